"""Grouping facts into themes, and keeping the grouping good as facts arrive (pure numpy and networkx).

**Initial grouping** (Bi-Mem §4.2.1): facts are the nodes of a graph with an edge wherever two facts'
embeddings have a cosine similarity above ``tau`` (Eq. 5; the paper uses 0.2 with all-MiniLM-L6-v2, the
encoder memstrata ships), weighted by that similarity and kept only among each fact's ``k`` nearest;
label propagation finds its communities (:func:`label_propagation`).

**Maintenance** (xMemory §3.2): the partition P of N facts into K themes of sizes n_k is scored by

    f(P) = SparsityScore(P) + SemScore(P)                                    (Eq. 1)
    SparsityScore(P) = N^2 / (K * sum_k n_k^2)                               (Eq. 2)
    SemScore(P) = 1/K * sum_k [ mean_{i in C_k} cos(x_i, mu_k) ] * g(s_k)    (Eq. 3)
    g(s_k) = exp(-(s_k - m)^2 / (2 sigma^2)),  s_k = max_{j != k} cos(mu_k, mu_j),
    m = median(s),  sigma = median(|s - m|) + eps.

``eps`` (``Context.themes.scale_floor``) is the smallest spread of nearest-theme similarities taken to matter.
The paper only says it is small; with a handful of themes the median absolute deviation can be nearly 0, and
then g crushes any theme whose nearest similarity differs from the median by a rounding error, so a split of
an obviously mixed theme would lower f. A floor of 0.05 (cosines of MiniLM sentence vectors that close are
not told apart) keeps g a bell over differences that mean something.

SparsityScore is 1 when the themes are of equal size and falls as one theme swallows the rest;
SemScore rewards cohesive themes whose nearest neighbour theme is neither a near-copy nor a stranger.
A new fact joins the theme whose centroid is most similar, if that similarity reaches ``attach``, else
it starts a theme (:func:`attach`); a theme over the cap is split by the candidate split that maximises
f (:func:`best_split`); a theme below the floor is merged into the neighbour that maximises f
(:func:`best_merge`).

Example:
    >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    >>> sorted(map(sorted, label_propagation(x, tau=0.5, k=1)))
    [[0, 1], [2, 3]]
    >>> round(sparsity_score([2, 2]), 3), round(sparsity_score([3, 1]), 3)
    (1.0, 0.8)
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

import numpy as np

from memstrata.memory.themes.settings import ThemeSettings

LabelT = TypeVar("LabelT", bound=Hashable)  # a theme label: the centroids come back under the labels given


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (zero rows stay zero)."""
    v = np.asarray(vectors, dtype=float)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.where(norms > 0, norms, 1.0)


def top_k(row: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` largest values of ``row``, largest first, ties by index: what
    ``np.argsort(-row, kind="stable")[:k]`` gives, without sorting the whole row.
    """
    if k >= len(row):
        return np.argsort(-row, kind="stable")
    kth = np.partition(row, len(row) - k)[len(row) - k]  # the k-th largest value
    above = np.flatnonzero(row > kth)
    tied = np.flatnonzero(row == kth)[: k - len(above)]  # ties at the cut: lowest indices, as a stable sort
    chosen = np.concatenate([above, tied])
    return chosen[np.lexsort((chosen, -row[chosen]))]


def label_propagation(vectors: np.ndarray, *, tau: float, k: int, seed: int = 0) -> list[set[int]]:
    """Bi-Mem's scenes: communities of the fact graph, by label propagation.

    The graph links two facts whose cosine similarity exceeds ``tau`` (Bi-Mem Eq. 5), keeping for each fact
    only its ``k`` most similar neighbours (xMemory's kNN graph). Without the kNN cut the graph is nearly
    complete on one conversation's facts (on LoCoMo's conv-26, 71% of all pairs of facts pass 0.2) and
    propagation returns a single community. Asynchronous label propagation with edge weights (networkx)
    and a fixed ``seed``: the same facts always give the same groups. A fact with no edge is a group of its own.
    """
    import networkx as nx  # only this function needs it; importing it costs a fifth of a second

    x = unit_rows(vectors)
    graph = nx.Graph()
    graph.add_nodes_from(range(len(x)))
    if len(x) > 1:
        sims = x @ x.T
        np.fill_diagonal(sims, -np.inf)
        graph.add_weighted_edges_from(
            (i, int(j), float(sims[i, j])) for i in range(len(x)) for j in top_k(sims[i], k) if sims[i, j] > tau
        )
    groups = [set(c) for c in nx.community.asyn_lpa_communities(graph, weight="weight", seed=seed)]
    return sorted(groups, key=min)


def sparsity_score(sizes: Sequence[int]) -> float:
    """Eq. 2 of xMemory: N^2 / (K * sum n_k^2); 1 for equal sizes, lower as sizes grow uneven."""
    sizes = [n for n in sizes if n > 0]
    if not sizes:
        return 0.0
    total = sum(sizes)
    return total * total / (len(sizes) * sum(n * n for n in sizes))


def centroids(vectors: np.ndarray, labels: Sequence[LabelT]) -> tuple[list[LabelT], np.ndarray]:
    """The themes in order of first appearance and their unit-length centroid (mean of unit vectors)."""
    x = unit_rows(vectors)
    keys = list(dict.fromkeys(labels))
    index = {k: i for i, k in enumerate(keys)}
    return keys, unit_rows(_group_sums(x, [index[k] for k in labels], len(keys)))


def sem_score(vectors: np.ndarray, labels: Sequence[Hashable], *, eps: float = ThemeSettings.scale_floor) -> float:
    """Eq. 3 of xMemory: mean over themes of (mean cosine of a member to its centroid) * g(nearest-theme cosine)."""
    if len(labels) == 0:
        return 0.0
    _, sizes, sums = theme_sums(vectors, labels)
    return _sem(sizes, sums, eps)


def theme_sums(vectors: np.ndarray, labels: Sequence[Hashable]) -> tuple[list[Hashable], np.ndarray, np.ndarray]:
    """The themes in order of first appearance, their sizes, and the sums of their members' unit vectors.

    A theme's centroid is its sum's direction, and the mean cosine of its members to that centroid is
    ``|sum| / size`` (each member contributes ``x . sum / |sum|``), so f(P) follows from sizes and sums alone:
    a candidate split or merge changes two or three rows, not the whole partition.
    """
    x = unit_rows(vectors)
    keys = list(dict.fromkeys(labels))
    index = {k: i for i, k in enumerate(keys)}
    rows = [index[k] for k in labels]
    return keys, np.bincount(rows, minlength=len(keys)).astype(float), _group_sums(x, rows, len(keys))


def _group_sums(x: np.ndarray, rows: Sequence[int], groups: int) -> np.ndarray:
    """Per group, the sum of its rows of ``x`` (rows sorted by group, then one ``reduceat``)."""
    out = np.zeros((groups, x.shape[1]))
    if not len(rows):
        return out
    row_array = np.asarray(rows, dtype=int)
    order = np.argsort(row_array, kind="stable")
    ordered = row_array[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    out[ordered[starts]] = np.add.reduceat(x[order], starts, axis=0)
    return out


def _sem(sizes: np.ndarray, sums: np.ndarray, eps: float) -> float:
    norms = np.linalg.norm(sums, axis=1)
    cohesion = norms / sizes
    if len(sizes) == 1:
        return float(cohesion[0])  # no other theme: nothing to be redundant with or isolated from
    mu = sums / np.where(norms > 0, norms, 1.0)[:, None]
    between = mu @ mu.T
    np.fill_diagonal(between, -np.inf)
    nearest = between.max(axis=1)
    m = float(np.median(nearest))
    sigma = float(np.median(np.abs(nearest - m))) + eps
    g = np.exp(-((nearest - m) ** 2) / (2 * sigma * sigma))
    return float(np.mean(cohesion * g))


def _f(sizes: np.ndarray, sums: np.ndarray, eps: float) -> float:
    return sparsity_score(sizes.astype(int).tolist()) + _sem(sizes, sums, eps)


def objective(vectors: np.ndarray, labels: Sequence[Hashable], *, eps: float = ThemeSettings.scale_floor) -> float:
    """Eq. 1 of xMemory: f(P) = SparsityScore(P) + SemScore(P)."""
    if len(labels) == 0:
        return 0.0
    _, sizes, sums = theme_sums(vectors, labels)
    return _f(sizes, sums, eps)


def attach(vector: np.ndarray, centroid_rows: np.ndarray, *, threshold: float) -> int | None:
    """The theme (row of ``centroid_rows``) a new fact joins: the most similar centroid, if it reaches
    ``threshold``; ``None`` starts a new theme.
    """
    if len(centroid_rows) == 0:
        return None
    sims = unit_rows(centroid_rows) @ unit_rows(np.asarray(vector, dtype=float)[None, :])[0]
    best = int(np.argmax(sims))
    return best if sims[best] >= threshold else None


def two_means(vectors: np.ndarray, *, k: int, rounds: int = 10) -> list[int]:
    """A deterministic k-means on unit vectors (cosine): seeds are the first member and then, each time, the
    member least similar to every seed so far; ``rounds`` Lloyd steps. Labels ``0..k-1``.
    """
    x = unit_rows(vectors)
    seeds = [0]
    while len(seeds) < min(k, len(x)):
        closest = (x @ x[seeds].T).max(axis=1)
        seeds.append(int(np.argmin(closest)))
    centres = x[seeds]
    labels = np.zeros(len(x), dtype=int)
    for _ in range(rounds):
        new = np.argmax(x @ centres.T, axis=1)
        if _ and np.array_equal(new, labels):
            break
        labels = new
        centres = unit_rows(
            np.vstack([x[labels == c].sum(axis=0) if np.any(labels == c) else centres[c] for c in range(len(centres))])
        )
    return labels.tolist()


class Partition:
    """Facts grouped into themes, with what f(P) needs of each theme (its size and the sum of its members' unit
    vectors) kept up to date by :meth:`split` and :meth:`merge`: a step costs the themes it changes, not a pass
    over all N facts. Themes are kept in order of first appearance (their first member's row).

    Args:
        vectors: the facts' vectors (scaled to unit length here).
        labels: each fact's theme.
    """

    def __init__(self, vectors: np.ndarray, labels: Sequence[Hashable]) -> None:
        self.x = unit_rows(vectors)
        self.labels = list(labels)
        self.members: dict[Hashable, list[int]] = {}
        for i, label in enumerate(self.labels):
            self.members.setdefault(label, []).append(i)
        keys, _, sums = theme_sums(self.x, self.labels)
        self._sums = dict(zip(keys, sums, strict=True))

    def ordered(self) -> list[Hashable]:
        """The themes in order of first appearance."""
        return sorted(self.members, key=lambda key: self.members[key][0])

    def _arrays(self, keys: Sequence[Hashable]) -> tuple[np.ndarray, np.ndarray]:
        sizes = np.asarray([len(self.members[key]) for key in keys], dtype=float)
        return sizes, np.vstack([self._sums[key] for key in keys])

    def _relabel(self, rows: Sequence[int], new: Sequence[Hashable]) -> None:
        for i, label in zip(rows, new, strict=True):
            self.labels[i] = label
            self.members.setdefault(label, []).append(i)
        for label in set(new):
            self.members[label].sort()
            self._sums[label] = self.x[self.members[label]].sum(axis=0)

    def split(self, theme: Hashable, *, parts: Sequence[int] = (2, 3), eps: float) -> bool:
        """Split ``theme`` by the candidate that maximises f(P), into themes named ``(theme, j)``.

        Candidates: the theme's members clustered into each number of ``parts`` (deterministic k-means on
        cosine). Returns whether it split (a theme that cannot be split stays).
        """
        members = self.members[theme]
        rest = [key for key in self.ordered() if key != theme]
        sizes, sums = self._arrays(rest) if rest else (np.zeros(0), np.zeros((0, self.x.shape[1])))
        best: list[int] | None = None
        best_f = -np.inf
        for k in parts:
            if len(members) < k:
                continue
            sub = np.asarray(two_means(self.x[members], k=k))
            found = sorted(set(sub.tolist()))
            if len(found) < 2:
                continue
            part_sums = np.vstack([self.x[members][sub == j].sum(axis=0) for j in found])
            part_sizes = np.asarray([np.sum(sub == j) for j in found], dtype=float)
            score = _f(np.concatenate([sizes, part_sizes]), np.vstack([sums, part_sums]), eps)
            if score > best_f:
                best, best_f = sub.tolist(), score
        if best is None:
            return False
        rows = self.members.pop(theme)
        del self._sums[theme]
        self._relabel(rows, [(theme, j) for j in best])
        return True

    def merge(self, theme: Hashable, *, neighbours: int = 3, eps: float) -> Hashable | None:
        """Merge ``theme`` into whichever of its ``neighbours`` nearest themes (by centroid) gives the highest
        f(P); returns that theme (``None``, and nothing changes, when there is no other theme).
        """
        keys = self.ordered()
        if len(keys) < 2:
            return None
        sizes, sums = self._arrays(keys)
        me = keys.index(theme)
        mu = unit_rows(sums)
        sims = mu @ mu[me]
        options = [int(i) for i in np.argsort(-sims, kind="stable") if i != me][:neighbours]  # never itself
        keep = [i for i in range(len(keys)) if i != me]
        scores = []
        for target in options:
            merged_sizes, merged_sums = sizes.copy(), sums.copy()
            merged_sizes[target] += sizes[me]
            merged_sums[target] += sums[me]
            scores.append(_f(merged_sizes[keep], merged_sums[keep], eps))
        into = keys[options[int(np.argmax(scores))]]
        rows = self.members.pop(theme)
        del self._sums[theme]
        self._relabel(rows, [into] * len(rows))
        return into


def best_split(
    vectors: np.ndarray,
    labels: Sequence[Hashable],
    theme: Hashable,
    *,
    parts: Sequence[int] = (2, 3),
    eps: float = ThemeSettings.scale_floor,
) -> list[Hashable]:
    """The labels after splitting ``theme`` by the candidate that maximises f(P) (:meth:`Partition.split`);
    a theme that cannot be split is returned unchanged.
    """
    partition = Partition(vectors, labels)
    partition.split(theme, parts=parts, eps=eps)
    return partition.labels


def best_merge(
    vectors: np.ndarray,
    labels: Sequence[Hashable],
    theme: Hashable,
    *,
    neighbours: int = 3,
    eps: float = ThemeSettings.scale_floor,
) -> list[Hashable]:
    """The labels after merging ``theme`` into whichever of its ``neighbours`` nearest themes (by centroid)
    gives the highest f(P) (:meth:`Partition.merge`). With no other theme, the labels are returned unchanged.
    """
    partition = Partition(vectors, labels)
    partition.merge(theme, neighbours=neighbours, eps=eps)
    return partition.labels
