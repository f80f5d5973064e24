"""How a query's candidates are scored: the weights of H-Mem's Eq. 1-3 and how event units are ranked.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.weights``): pass it whole, or as a dict of
the fields to change (``weights={"temporal": 0.0}``); :mod:`memstrata.memory.search.fusion` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class Weights:
    """How a query's candidates are scored: H-Mem's Eq. 1-3 on the turns and their views, and how event units are
    ranked (``events``, see :func:`fused_events`). ``Context.weights`` holds the run's; ``eta`` weighs the
    reinforcement the temporal tree records.
    """

    semantic: Annotated[float, setting("H-Mem Eq. 3 weight of the semantic score")] = 0.7
    temporal: Annotated[float, setting("H-Mem Eq. 3 weight of temporal relevance")] = 0.15
    robustness: Annotated[float, setting("H-Mem Eq. 3 weight of robustness (decay)")] = 0.15
    tau_days: Annotated[float, setting("H-Mem Eq. 2 time constant of the decay, in days")] = 365.0
    eta: Annotated[
        float,
        setting(
            "H-Mem Eq. 2 reinforcement strength: how much each consolidation the temporal tree records (n_m) "
            "slows the decay of the turns it holds"
        ),
    ] = 0.5
    episode_prior: Annotated[
        float,
        setting("share of a turn's semantic score taken from the best Level-1 event linking to it"),
    ] = 0.15
    neighbour: Annotated[
        float,
        setting("a turn scores at least this share of its best neighbour (answers follow questions)"),
    ] = 0.4
    speaker: Annotated[float, setting("relative boost of turns spoken by a speaker the query names")] = 0.7
    when: Annotated[float, setting("relative boost, for a question asking for a time, of turns that tell one")] = 0.3
    lam: Annotated[float, setting("H-Mem Eq. 1: overlap share against centre distance")] = 0.5
    events: Annotated[
        Literal["rank", "eq3"],
        setting(
            "how summaries, tree nodes and facts are scored: 'rank' (dense and BM25 fused by rank), or 'eq3' "
            "(H-Mem's Eq. 3 on them too: that score as S, with T from their time span and R from their "
            "reinforcement)"
        ),
    ] = "rank"
