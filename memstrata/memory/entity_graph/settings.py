"""Facts and H-Mem's entity graph: how entities are merged, facts superseded, and the graph expanded at query time.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.graph``): pass it whole, or as a dict of
the fields to change (``graph={"typo_ratio": ...}``); a field's description is what LangGraph Studio shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class GraphSettings:
    """Facts and H-Mem's entity graph: how entities are merged, facts superseded, and the graph expanded at query
    time.
    """

    typo_ratio: Annotated[
        float,
        setting("rapidfuzz ratio at or above which two names of compatible type are one entity"),
    ] = 90.0
    supersede_pairs: Annotated[
        int,
        setting(
            "with a model: supersession pairs put to the model per conversation and write, all in one call (the "
            "rule decides the rest)"
        ),
    ] = 20
    fact_k: Annotated[int, setting("facts the light module reads per query, beside the Level-1 summaries")] = 20
    hops: Annotated[int, setting("hops of expansion from the entities a query names (0 turns it off)")] = 2
    facts: Annotated[
        int,
        setting("facts reached through the entity graph that add their turns to the candidates, per query"),
    ] = 30
    hop_decay: Annotated[float, setting("weight kept per hop of graph expansion")] = 0.5
    vector_seeds: Annotated[
        int,
        setting(
            "entities nearest the query's vector (the mean of their facts') that also seed the graph expansion, "
            "beside those the query names (H-Mem's seeds by vector; 0: by name only)"
        ),
    ] = 0
    seed_floor: Annotated[float, setting("the least cosine to the query of an entity that seeds by vector")] = 0.35
    recent_events: Annotated[int, setting("latest facts an entity's profile lists")] = 20
    superseded_weight: Annotated[
        float,
        setting("score factor of a superseded fact, unless the query asks about the past"),
    ] = 0.8
