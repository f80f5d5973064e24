"""HyMem's light module (§3.2), offline: the top-k Level-1 events of each query, and the turns they reach.

The Level-1 lookup ranks every ``event`` kind the query's scope searches (the
event summaries, and any later event kind), keeps the top ``level1_k`` as this
round's light evidence and the top ``coarse_n`` as the deep module's pool, and
turns the light events into candidate raw turns. Following H-Mem's scopes, a
query whose scope also searches the raw kind reads the best raw turns directly
(original fragments); a Long query reads only through events.

Example:
    >>> q = Query(id="q0", text="Where does Ann live?")
    >>> light_lookup(index, [q], vectors, level1_k=10, coarse_n=30, weights=Weights(), now=None,
    ...              scope_kinds={"Mixed": ["summary", "turn"]})                  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from memstrata.memory.fusion import Weights
from memstrata.memory.hits import event_hit, score_query, turn_hit
from memstrata.memory.index import MemoryIndex
from memstrata.memory.query import Hit, Query


@dataclass
class LightResult:
    """What the light lookup found: ``level1`` (top-k events), ``coarse`` (top-N events), candidate ``turns``."""

    level1: list[Hit] = field(default_factory=list)
    coarse: list[Hit] = field(default_factory=list)
    turns: list[Hit] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)  # hits per kind that found them, for the trace


def light_lookup(
    index: MemoryIndex, queries: Sequence[Query], vectors: np.ndarray, *, level1_k: int, coarse_n: int,
    weights: Weights, now: datetime | None, scope_kinds: Mapping[str, Sequence[str]], raw_per_query: int = 30,
) -> LightResult:
    """Top-``level1_k`` events per query, the coarse top-``coarse_n``, and their turns (plus direct raw turns)."""
    level1: dict[str, Hit] = {}
    coarse: dict[str, Hit] = {}
    out = LightResult()
    for query, qvec in zip(queries, vectors, strict=True):
        kinds = scope_kinds.get(query.scope, ())
        ranked, parts = score_query(index, query, qvec, event_kinds=[k for k in kinds if k in index.events],
                                    top_events=level1_k, weights=weights, now=now)
        for rank, (kind, row, score) in enumerate(ranked[:coarse_n]):
            hit = event_hit(index, kind, row, score * query.weight, query)
            coarse.setdefault(hit.key, hit)
            if rank < level1_k:
                level1.setdefault(hit.key, hit)
                out.turns += [turn_hit(index, i, parts, level="level1", found_by=kind, query=query)
                              for i in index.events[kind].turn_rows[row]]
        if index.turns_kind in kinds and len(parts["score"]):
            out.turns += [turn_hit(index, int(i), parts, level="level2", found_by=index.turns_kind, query=query)
                          for i in np.argsort(-parts["score"])[:raw_per_query]]
    out.level1 = list(level1.values())
    out.coarse = sorted(coarse.values(), key=lambda h: -h.score)
    for hit in out.turns:
        out.kinds[hit.found_by] = out.kinds.get(hit.found_by, 0) + 1
    return out
