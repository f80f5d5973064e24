"""xMemory's kNN graph over facts and themes, as edges of the edge store.

Each fact links to its theme (``member_of``, weighted by its cosine to the theme's centroid) and to its
``k`` most similar facts; each theme links to its ``k`` most similar themes (``similar``). Only the top
``k`` per node are kept, so the graph grows linearly with the facts. :func:`edge_changes` gives what
to delete and what to add so that the stored graph equals the new one (a re-ingest changes nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memstrata.memory.store.edges import Edge
from memstrata.memory.themes.partition import unit_rows

MEMBER, SIMILAR = "member_of", "similar"
KINDS = ("fact", "theme")


def top_k(sims: np.ndarray, k: int) -> list[list[int]]:
    """Each row's ``k`` most similar other rows, best first (ties by row)."""
    sims = sims.copy()
    np.fill_diagonal(sims, -np.inf)
    out = []
    for row in sims:
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]
        out.append([j for j in order if np.isfinite(row[j])])
    return out


def knn_edges(
    conversation_id: str,
    fact_ids: Sequence[str],
    fact_vectors: np.ndarray,
    themes: dict[str, list[str]],
    theme_vectors: dict[str, np.ndarray],
    *,
    k: int,
) -> list[Edge]:
    """The conversation's fact and theme graph: membership edges and each node's top-``k`` similar nodes."""
    x = unit_rows(fact_vectors)
    row = {f: i for i, f in enumerate(fact_ids)}
    names = list(themes)
    mu = unit_rows(np.asarray([theme_vectors[t] for t in names])) if names else np.zeros((0, x.shape[1]))
    edges = [
        Edge(conversation_id, f, MEMBER, t, "fact", "theme", round(float(x[row[f]] @ mu[i]), 4))
        for i, t in enumerate(names)
        for f in themes[t]
    ]
    if len(x):
        sims = x @ x.T
        edges += [
            Edge(conversation_id, fact_ids[i], SIMILAR, fact_ids[j], "fact", "fact", round(float(sims[i, j]), 4))
            for i, near in enumerate(top_k(sims, k))
            for j in near
        ]
    if len(mu):
        sims = mu @ mu.T
        edges += [
            Edge(conversation_id, names[i], SIMILAR, names[j], "theme", "theme", round(float(sims[i, j]), 4))
            for i, near in enumerate(top_k(sims, k))
            for j in near
        ]
    return edges


def is_theme_edge(edge: Edge) -> bool:
    """An edge of this graph (and of no other: entity and tree edges have other kinds)."""
    return edge.rel in (MEMBER, SIMILAR) and edge.src_kind in KINDS and edge.dst_kind in KINDS


def edge_changes(stored: Sequence[Edge], wanted: Sequence[Edge]) -> tuple[list[Edge], list[Edge]]:
    """(stale edges to delete, edges to add): compared by ends, label and weight."""

    def key(e: Edge) -> tuple[str, str, str, float]:
        return e.src, e.rel, e.dst, round(e.weight, 4)

    have = {key(e): e for e in stored if is_theme_edge(e)}
    want = {key(e): e for e in wanted}
    return [e for k, e in have.items() if k not in want], [e for k, e in want.items() if k not in have]
