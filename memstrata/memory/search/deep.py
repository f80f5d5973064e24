"""HyMem's deep module (§3.3), offline: backtrack from chosen Level-1 events to their verbatim turns.

The turns of the chosen events (all of the coarse top-N when nothing chose
among them) join the best raw turns of each query, and are reranked by their
fused score. The follow-up search uses the same function with no events.

Example:
    >>> backtrack(
    ...     index,
    ...     [q],
    ...     vectors,
    ...     [3, 4, 5],
    ...     raw_top=60,
    ...     weights=weights(ctx),
    ...     now=None,
    ...     scope_kinds={"Mixed": ["summary"]},
    ... )  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import numpy as np

from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels.level1.theme import THEME
from memstrata.memory.query import Hit, Query
from memstrata.memory.search.fusion import Weights
from memstrata.memory.search.scoring import score_query, turn_hits
from memstrata.memory.tree.search import tag_hits


def backtrack(
    index: MemoryIndex,
    queries: Sequence[Query],
    vectors: np.ndarray,
    event_turns: Sequence[int],
    *,
    raw_top: int,
    weights: Weights,
    now: datetime | None,
    scope_kinds: Mapping[str, Sequence[str]],
    keep: int | None = None,
    top_events: int = 1,
    chosen_bonus: float = 0.0,
) -> list[Hit]:
    """The turns of the chosen events plus each query's best ``raw_top`` raw turns, reranked.

    ``keep`` bounds how many of the best-scored turns per query become candidates;
    the hierarchy prior of the turn scores comes from the query's best ``top_events``
    events of the kinds its scope searches. ``chosen_bonus`` is added to the score
    of every turn of a chosen event (and ``parts["chosen"]`` set), so that when a
    model chose the events, their turns enter the context before any turn that
    only scored well; offline it is 0 and the rerank is by score alone.
    """
    linked = set(event_turns)
    out = []
    for query, qvec in zip(queries, vectors, strict=True):
        kinds = [k for k in scope_kinds.get(query.scope, ()) if k in index.events and k != THEME.kind]
        _, parts = score_query(
            index, query, qvec, event_kinds=kinds, top_events=max(top_events, 1), weights=weights, now=now, depth={}
        )
        chosen = np.fromiter(linked | {int(i) for i in np.argsort(-parts["score"])[:raw_top]}, dtype=int)
        if chosen_bonus:
            order = np.argsort(-(parts["score"][chosen] + chosen_bonus * np.isin(chosen, list(linked))))
        else:
            order = np.argsort(-parts["score"][chosen])
        rows = chosen[order][:keep]
        hits = turn_hits(index, rows, parts, level="level2", found_by=index.turns_kind, query=query)
        out += tag_hits(
            index,
            query,
            [  # the scope and tree window that led to each turn
                _bonus(hit, chosen_bonus if int(i) in linked else 0.0) for i, hit in zip(rows, hits, strict=True)
            ],
        )
    return out


def _bonus(hit: Hit, bonus: float) -> Hit:
    return hit.with_(score=round(hit.score + bonus, 4), parts={**hit.parts, "chosen": bonus}) if bonus else hit
