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
    """Each row's ``k`` most similar other rows, best first (ties by row).

    Example:
        >>> top_k(np.array([[1.0, 0.5, 0.5], [0.5, 1.0, 0.9], [0.5, 0.9, 1.0]]), 1)
        [[1], [2], [1]]
    """
    sims = np.array(sims, dtype=float)
    np.fill_diagonal(sims, -np.inf)
    return nearest_rows(sims, k)


def nearest_rows(sims: np.ndarray, k: int) -> list[list[int]]:
    """Each row's ``k`` largest finite columns, best first (ties by column), in vectorized passes."""
    n = sims.shape[1] if sims.ndim == 2 else 0
    take = min(k, n)
    if take <= 0:
        return [[] for _ in range(len(sims))]
    kth = np.partition(sims, n - take, axis=1)[:, n - take]  # each row's k-th largest value
    out = []
    for row, floor in zip(sims, kth, strict=True):
        cand = np.flatnonzero(row >= floor)  # ties at the k-th value all compete, decided by column
        order = cand[np.lexsort((cand, -row[cand]))][:k]
        out.append([int(j) for j in order if np.isfinite(row[j])])
    return out


def fact_neighbours(
    fact_ids: Sequence[str],
    x: np.ndarray,
    k: int,
    previous: dict[str, list[tuple[str, float]]] | None = None,
    *,
    block: int = 1024,
) -> tuple[list[list[tuple[int, float]]], set[str]]:
    """Each fact's ``k`` most similar other facts (rows of the unit-length ``x``) with their cosine, best first, and
    the ids of the facts whose stored list was kept.

    ``previous`` holds the stored lists (neighbour id, weight) of facts already in the graph. A fact keeps its list
    when it is whole (no neighbour gone, ``k`` long or all there was) and no new fact comes closer than its last
    neighbour; the others are computed again, against every fact, a block of rows at a time (no n x n matrix).
    So a write that adds m facts to n costs an m x n product, not n x n, and gives the lists a full pass gives
    (up to exact ties).
    """
    row = {f: i for i, f in enumerate(fact_ids)}
    prev = previous or {}
    fresh = [i for i, f in enumerate(fact_ids) if f not in prev]
    out: list[list[tuple[int, float]] | None] = [None] * len(fact_ids)
    whole = {f: near for f, near in prev.items() if f in row and all(n in row for n, _ in near)}
    if fresh:
        near_new = x[fresh] @ x.T  # the new facts against all: each old fact's best new rival
        near_new[np.arange(len(fresh)), fresh] = -np.inf
        rival = near_new.max(axis=0)
    else:
        rival = np.full(len(fact_ids), -np.inf)
    n_other = len(fact_ids) - 1
    for f, near in whole.items():
        i = row[f]
        last = near[-1][1] if len(near) >= min(k, n_other) and near else -np.inf
        if len(near) >= min(k, n_other) and rival[i] < last - 1e-4:
            out[i] = [(row[n], w) for n, w in near]
    redo = [i for i, kept in enumerate(out) if kept is None]
    for start in range(0, len(redo), block):
        rows = redo[start : start + block]
        sims = x[rows] @ x.T
        sims[np.arange(len(rows)), rows] = -np.inf
        for i, s, best in zip(rows, sims, nearest_rows(sims, k), strict=True):
            out[i] = [(j, float(s[j])) for j in best]
    redone = set(redo)
    return [kept or [] for kept in out], {f for i, f in enumerate(fact_ids) if i not in redone}


def knn_edges(
    conversation_id: str,
    fact_ids: Sequence[str],
    fact_vectors: np.ndarray,
    themes: dict[str, list[str]],
    theme_vectors: dict[str, np.ndarray],
    *,
    k: int,
    previous: dict[str, list[tuple[str, float]]] | None = None,
) -> list[Edge]:
    """The conversation's fact and theme graph: membership edges and each node's top-``k`` similar nodes.

    ``previous``: the stored fact lists (:func:`similar_facts`), kept where no new fact changes them
    (:func:`fact_neighbours`).
    """
    return _graph(
        conversation_id, fact_ids, fact_vectors, themes, theme_vectors, k=k, previous=previous, skip_kept=False
    )[0]


def graph_changes(
    conversation_id: str,
    fact_ids: Sequence[str],
    fact_vectors: np.ndarray,
    themes: dict[str, list[str]],
    theme_vectors: dict[str, np.ndarray],
    stored: Sequence[Edge],
    *,
    k: int,
) -> tuple[list[Edge], list[Edge]]:
    """(stale edges to delete, edges to add) so that the ``stored`` graph becomes :func:`knn_edges`' graph.

    A fact whose stored list of similar facts is kept (:func:`fact_neighbours`) has the same edges in both, so those
    are neither built nor compared: a close that adds a few facts to thousands diffs the membership and theme edges
    and the lists it computed again, not every fact's.
    """
    mine = [e for e in stored if is_theme_edge(e)]
    previous = similar_facts(mine)
    wanted, kept = _graph(
        conversation_id, fact_ids, fact_vectors, themes, theme_vectors, k=k, previous=previous, skip_kept=True
    )
    compared = [e for e in mine if not (_fact_to_fact(e) and e.src in kept)]
    return edge_changes(compared, wanted)


def _graph(
    conversation_id: str,
    fact_ids: Sequence[str],
    fact_vectors: np.ndarray,
    themes: dict[str, list[str]],
    theme_vectors: dict[str, np.ndarray],
    *,
    k: int,
    previous: dict[str, list[tuple[str, float]]] | None,
    skip_kept: bool,
) -> tuple[list[Edge], set[str]]:
    """The graph's edges and the ids of the facts whose stored list in ``previous`` is kept; with ``skip_kept``,
    without those facts' similar-fact edges (the stored ones).
    """
    x = unit_rows(fact_vectors)
    row = {f: i for i, f in enumerate(fact_ids)}
    names = list(themes)
    mu = unit_rows(np.asarray([theme_vectors[t] for t in names])) if names else np.zeros((0, x.shape[1]))
    edges = [
        Edge(conversation_id, f, MEMBER, t, "fact", "theme", round(float(x[row[f]] @ mu[i]), 4))
        for i, t in enumerate(names)
        for f in themes[t]
    ]
    kept: set[str] = set()
    if len(x):
        lists, kept = fact_neighbours(fact_ids, x, k, previous)
        edges += [
            Edge(conversation_id, fact_ids[i], SIMILAR, fact_ids[j], "fact", "fact", round(sim, 4))
            for i, near in enumerate(lists)
            if not (skip_kept and fact_ids[i] in kept)
            for j, sim in near
        ]
    if len(mu):
        sims = mu @ mu.T
        edges += [
            Edge(conversation_id, names[i], SIMILAR, names[j], "theme", "theme", round(float(sims[i, j]), 4))
            for i, near in enumerate(top_k(sims, k))
            for j in near
        ]
    return edges, kept


def similar_facts(edges: Sequence[Edge]) -> dict[str, list[tuple[str, float]]]:
    """The stored fact-to-fact lists of this graph: each fact's neighbours and weights, best first."""
    out: dict[str, list[tuple[str, float]]] = {}
    for e in edges:
        if _fact_to_fact(e):
            out.setdefault(e.src, []).append((e.dst, e.weight))
    for near in out.values():
        near.sort(key=lambda p: -p[1])
    return out


def _fact_to_fact(edge: Edge) -> bool:
    return edge.rel == SIMILAR and edge.src_kind == "fact" and edge.dst_kind == "fact"


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
