"""Choosing evidence from the themes at query time (pure numpy): xMemory's two retrieval stages.

**Stage I** (xMemory §3.3, Eq. 4): a greedy representative selection on a kNN graph of candidates. With
``R`` the representatives chosen so far, ``C(R)`` the candidates they cover (each representative and its
neighbours) and ``Delta(i; R)`` what candidate ``i`` would newly cover, each step takes

    i* = argmax_{i not in R}  alpha * sum_{u in Delta(i;R)} w_iu / Z  +  (1 - alpha) * s(q, i)       (Eq. 4)

and stops when ``|C(R)| / |V|`` reaches ``coverage`` or ``|R|`` reaches ``budget``. The paper leaves three
things open; the readings taken here:

* ``w_ii = 1``: a candidate covers itself with the weight of a perfect match, so a candidate with no
  neighbour left to cover still counts for itself;
* ``Z`` is the largest weight any single candidate could cover (``max_i sum_{u in {i} u N(i)} w_iu``), so the
  coverage term lies in [0, 1] like the relevance term;
* ``s(q, i)`` is the candidate's relevance min-max scaled to [0, 1] over the candidates.

Ties go to the earlier candidate (callers pass candidates best first).

**Stage II** (xMemory §3.3): starting from a coarse context (the picked themes), evidence is admitted in order of
support while it lowers the reader's uncertainty, with early stopping; an admitted unit may be refined (its episode
expanded to its other messages) when that lowers the uncertainty further. Offline there is no reader;
:func:`admit_by_coverage` uses the share of the query's content words (and names) that neither the coarse context
nor the admitted evidence says as the uncertainty, so a unit is admitted when it says a query word nothing before it
said, and the stage stops after ``patience`` units in a row that say nothing new. That is a proxy, not the paper's
measure: it is said so wherever it is used.

Example:
    >>> rel = np.array([1.0, 0.9, 0.2])
    >>> sims = np.array([[1.0, 0.95, 0.0], [0.95, 1.0, 0.0], [0.0, 0.0, 1.0]])
    >>> representatives(rel, sims, k=1, alpha=0.8, coverage=1.0, budget=2)
    [0, 2]
    >>> admit_by_coverage({"cat", "miso"}, [{"cat"}, {"cat"}, {"miso"}, {"dog"}], patience=2)
    ([0, 2], 0.0)
    >>> admit_by_coverage({"cat", "miso"}, [{"cat"}, {"cat"}, {"miso"}, {"dog"}], patience=3, said={"cat"})
    ([2], 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence, Set

import numpy as np

from memstrata.memory.themes.graph import top_k


def knn_neighbours(sims: np.ndarray, k: int) -> list[list[int]]:
    """Each row's ``k`` most similar other rows with a positive similarity, best first (ties by row): the kNN
    graph's neighbours (:func:`~memstrata.memory.themes.graph.top_k`) whose edge has a weight.
    """
    w = np.asarray(sims, dtype=float)
    return [[j for j in near if w[i, j] > 0] for i, near in enumerate(top_k(w, k))]


def scaled(values: np.ndarray) -> np.ndarray:
    """Min-max scaled to [0, 1] (all 1 when every value is the same)."""
    v = np.asarray(values, dtype=float)
    if not len(v):
        return v
    low, high = float(v.min()), float(v.max())
    return np.ones_like(v) if high - low < 1e-12 else (v - low) / (high - low)


def _covers(sims: np.ndarray, k: int) -> tuple[list[dict[int, float]], float]:
    """Per candidate, the weight with which it covers itself (1) and each kNN neighbour; and Z."""
    w = np.asarray(sims, dtype=float)
    near = [[i, *js] for i, js in enumerate(knn_neighbours(w, k))]
    weight = [{u: (1.0 if u == i else float(w[i, u])) for u in covers} for i, covers in enumerate(near)]
    return weight, max((sum(ws.values()) for ws in weight), default=1.0) or 1.0


def representatives(
    relevance: np.ndarray, sims: np.ndarray, *, k: int, alpha: float, coverage: float, budget: int
) -> list[int]:
    """Eq. 4 of xMemory: the greedy coverage-plus-relevance representatives of the candidates, in order chosen.

    ``relevance`` is each candidate's match to the query; ``sims`` their pairwise similarities (the kNN graph
    keeps each candidate's ``k`` most similar with a positive weight).
    """
    n = len(relevance)
    if n == 0 or budget <= 0:
        return []
    weight, z = _covers(sims, k)
    rel = scaled(relevance)
    chosen: list[int] = []
    covered: set[int] = set()
    while len(chosen) < min(budget, n) and (not chosen or len(covered) < coverage * n):  # one pick at least
        gains = [
            (alpha * sum(ws for u, ws in weight[i].items() if u not in covered) / z + (1 - alpha) * rel[i], -i)
            for i in range(n)
            if i not in chosen
        ]
        _, best = max(gains)
        chosen.append(-best)
        covered.update(weight[-best])
    return chosen


def objective(relevance: np.ndarray, sims: np.ndarray, chosen: Sequence[int], *, k: int, alpha: float) -> float:
    """The set function Eq. 4 climbs greedily: alpha * covered weight / Z + (1 - alpha) * summed relevance.

    Each covered candidate counts once, with the best weight among the chosen that cover it (the greedy
    step's gain is this function's increase when each candidate is covered by one representative only).
    """
    weight, z = _covers(sims, k)
    best: dict[int, float] = {}
    for i in chosen:
        for u, ws in weight[i].items():
            best[u] = max(best.get(u, 0.0), ws)
    return alpha * sum(best.values()) / z + (1 - alpha) * float(sum(scaled(relevance)[list(chosen)]))


class UncertaintyGate:
    """xMemory's Stage II admission rule: a unit is admitted when the uncertainty it leaves is lower than the best so
    far; after ``patience`` units in a row that lower nothing, the stage stops (early stopping), as it does at 0.
    ``start`` is the uncertainty of the coarse context alone (1.0 without one).

    The measure is the caller's: the reader's own doubt (1 - its stated confidence) with a model, the share of the
    query's words nothing admitted says offline (:func:`admit_by_coverage`).

    Example:
        >>> gate = UncertaintyGate(1.0, patience=2)
        >>> [gate.offer(u) for u in (0.6, 0.6, 0.3)], gate.uncertainty, gate.done
        ([True, False, True], 0.3, False)
        >>> gate.refine(0.3), gate.refine(0.1), gate.uncertainty, gate.idle
        (False, True, 0.1, 0)
    """

    def __init__(self, start: float, *, patience: int) -> None:
        self.uncertainty, self.patience, self.idle = start, patience, 0

    @property
    def done(self) -> bool:
        """Nothing is left to lower, or ``patience`` offers in a row lowered nothing."""
        return self.uncertainty <= 0 or self.idle >= self.patience

    def offer(self, uncertainty: float) -> bool:
        """Whether the unit that would leave ``uncertainty`` is admitted."""
        if uncertainty < self.uncertainty:
            self.uncertainty, self.idle = uncertainty, 0
            return True
        self.idle += 1
        return False

    def refine(self, uncertainty: float) -> bool:
        """Whether a refinement of the unit just admitted (its episode's other messages) that would leave
        ``uncertainty`` is taken: only when lower than the best so far. A refinement refused leaves early stopping's
        count alone: the unit it would refine was admitted.
        """
        if uncertainty < self.uncertainty:
            self.uncertainty = uncertainty
            return True
        return False


def unsaid(query_terms: Set[str], said: Set[str]) -> float:
    """Stage II's offline uncertainty: the share of the query's terms not among ``said`` (1.0 with no query terms)."""
    return len(query_terms - said) / len(query_terms) if query_terms else 1.0


def admit_by_coverage(
    query_terms: Set[str], unit_terms: Sequence[Set[str]], *, patience: int, said: Set[str] = frozenset()
) -> tuple[list[int], float]:
    """Stage II's offline proxy: the units (in support order) admitted while they lower the uncertainty.

    The uncertainty is the share of ``query_terms`` neither ``said`` (the coarse context's terms) nor an admitted
    unit holds; :class:`UncertaintyGate` admits and stops. Returns the admitted positions and the uncertainty left.
    With no query terms there is nothing to lower: nothing is admitted; nor is anything when the coarse context
    says every query term.
    """
    if not query_terms:
        return [], 0.0
    gate, known = UncertaintyGate(unsaid(query_terms, said), patience=patience), set(said)
    admitted: list[int] = []
    for i, terms in enumerate(unit_terms):
        if gate.done:
            break
        if gate.offer(unsaid(query_terms, known | terms)):
            admitted.append(i)
            known |= terms
    return admitted, gate.uncertainty
