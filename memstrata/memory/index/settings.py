"""How a search holds memory: the whole-memory snapshot, the bounded path past its size, and their caches.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.scale``): pass it whole, or as a dict of
the fields to change (``scale={"refresh_s": ...}``); a field's description is what LangGraph Studio shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class ScaleSettings:
    """How a search holds memory: the whole-memory snapshot, the bounded path past its size, and their caches."""

    refresh_s: Annotated[
        float,
        setting("seconds a search snapshot is trusted before a count check looks for other processes' writes"),
    ] = 5.0
    max_turns: Annotated[
        int,
        setting(
            "above this many raw turns of the searched scope, a query reads its candidates from the store (HNSW "
            "and the word index) and builds a snapshot of those alone, instead of holding the whole memory in "
            "memory; 0 always does so"
        ),
    ] = 20000
    large_recheck_s: Annotated[
        float,
        setting(
            "seconds a scope found larger than snapshot_max_turns is trusted to stay so, and its latest memory "
            "time (the bounded path's time anchor) to stay put (the size check reads up to snapshot_max_turns "
            "ids: from the word index embedded, 25 ms at 1M turns; from Chroma on a server, 12 s at 100k turns; "
            "the bounded path is right at any size, so a scope that shrank meanwhile only costs speed)"
        ),
    ] = 600.0
    dense_k: Annotated[
        int,
        setting("bounded path: turns and turn views each query reads through Chroma's HNSW index"),
    ] = 200
    event_k: Annotated[
        int,
        setting("bounded path: units of every other searched kind each query reads through the HNSW index"),
    ] = 60
    lexical_k: Annotated[
        int,
        setting(
            "bounded path: units per kind read for each content word of a query (the word index's best BM25 "
            "matches of the words together: the word index embedded, the units' tagged terms on a server)"
        ),
    ] = 40
    lexical_terms: Annotated[
        int,
        setting("bounded path: content words of a query (its longest) whose matches are read"),
    ] = 6
    entity_facts: Annotated[int, setting("bounded path: facts read for the entities a query names")] = 200
    sessions: Annotated[int, setting("bounded path: whole sessions (turns and views) loaded for one retrieval")] = 80
    cache_units: Annotated[
        int,
        setting(
            "bounded path: turns and views of recently read sessions this process keeps for later retrievals "
            "(checked against the store before use; 0 keeps none)"
        ),
    ] = 50000
    query_vectors: Annotated[int, setting("query vectors this process keeps for repeated texts")] = 2048
