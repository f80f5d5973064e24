"""Bi-Mem's associative recall, its initial search (Eq. 9): one top-k over facts, scenes and persona together (pure
numpy).

Bi-Mem first retrieves the k units of its three levels that best match the query by a hybrid of dense and BM25
scores, weighted alpha = 0.5 (§5.1, Table 5), and only then spreads: a retrieved fact evokes its scene, a retrieved
scene brings its facts nearest it (Eq. 10), a retrieved persona is a global anchor that spreads to nothing. Here the
three levels are memstrata's facts, themes (the scenes) and current persona dimensions; the spreading is the theme
path's (:mod:`memstrata.memory.search.themes`), the anchor the persona path's.

Adapted in one respect: each kind keeps its own BM25 index (the snapshot's), so a unit's BM25 score is scaled by the
best BM25 score over all three kinds for this query before the weighted sum (one index over the three kinds would
give them shared document frequencies). Cosines are used as they are.

Example:
    >>> import numpy as np
    >>> from types import SimpleNamespace as NS
    >>> class Table:
    ...     def __init__(self, cos, lex, units):
    ...         self.vecs, self.units = np.eye(len(cos)), units
    ...         self.cos, self.bm25 = np.array(cos), NS(scores=lambda tokens, lex=np.array(lex): lex)
    ...
    ...     def __len__(self):
    ...         return len(self.units)
    ...
    ...     def dense(self, qvec):
    ...         return self.cos
    >>> fact = Table([0.5, 0.1], [4.0, 0.0], [NS(), NS()])
    >>> theme = Table([0.4], [0.0], [NS()])
    >>> index = NS(events={"fact": fact, "theme": theme})
    >>> [(kind, row, round(score, 2)) for kind, row, score in joint_top(index, None, ["w"], 2)]
    [('fact', 0, 0.75), ('theme', 0, 0.2)]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels.level1.fact import FACT
from memstrata.memory.levels.level1.persona import PERSONA, Persona
from memstrata.memory.levels.level1.theme import THEME

ALPHA = 0.5
"""Bi-Mem's weight of the dense score against BM25 in its hybrid retriever (§5.1, Table 5)."""
JOINT_KINDS = (FACT.kind, THEME.kind, PERSONA.kind)


def joint_top(
    index: MemoryIndex,
    qvec: np.ndarray | Any,
    tokens: list[str],
    k: int,
    *,
    alpha: float = ALPHA,
    validity: Mapping[str, np.ndarray | float] | None = None,
    kinds: Sequence[str] = JOINT_KINDS,
) -> list[tuple[str, int, float]]:
    """``(kind, row, score)`` of the ``k`` best facts, themes and current persona dimensions together, best first
    (ties in ``kinds`` order, then by row): ``alpha * cosine + (1 - alpha) * BM25 / the best BM25 of the three``,
    times the unit's ``validity`` (a fact no longer current is worth less, as everywhere else in the search).
    """
    parts: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
    for kind in kinds:
        table = index.events.get(kind)
        if table is None or not len(table):
            continue
        cos = np.asarray(table.dense(qvec), dtype=float)
        lex = np.asarray(table.bm25.scores(tokens), dtype=float) if table.bm25 is not None else np.zeros(len(cos))
        keep = np.ones(len(cos), dtype=bool)
        if kind == PERSONA.kind:  # a replaced version or a dimension with no items is no anchor
            keep = np.array([u.current and bool(u.items) for u in table.units_as(Persona)], dtype=bool)
        parts.append((kind, cos, lex, keep))
    if k <= 0 or not parts:
        return []
    top_lex = max((float(lex[keep].max()) for _, _, lex, keep in parts if keep.any()), default=0.0)
    scale = 1.0 / top_lex if top_lex > 0 else 0.0
    scored: list[tuple[float, int, int, str]] = []
    for order, (kind, cos, lex, keep) in enumerate(parts):
        score = (alpha * cos + (1 - alpha) * lex * scale) * (validity or {}).get(kind, 1.0)
        rows = np.flatnonzero(keep)
        best = rows[np.lexsort((rows, -score[rows]))][:k]
        scored += [(-float(score[r]), order, int(r), kind) for r in best]
    return [(kind, row, -neg) for neg, _, row, kind in sorted(scored)[:k]]
