"""H-Mem's evidence score: semantic + temporal + robustness.

``F(m, Q, t) = w_sem * S + w_time * T + w_rob * R`` (H-Mem Eq. 3), where

* ``S`` is the semantic score: here not H-Mem's cosine but a turn's fused views
  (:func:`memstrata.memory.search.fusion.score_turns`), whose speaker and time boosts can take it to about 2,
* ``T`` is temporal relevance to the query's interval: interval overlap and
  normalized centre distance (Eq. 1, its small constant one second), and zero when the query has no time hint,
* ``R = exp(-(t - r) / (tau * (1 + eta * ln(1 + n))))`` is Ebbinghaus
  robustness with reinforcement count ``n`` (Eq. 2).

Eq. 1 and Eq. 2 come for one item (:func:`temporal_relevance`, :func:`robustness`) and for many at once, as numpy
arrays of epoch seconds (:func:`temporal_relevance_array`, :func:`robustness_array`).

Example:
    >>> from datetime import datetime, timedelta
    >>> round(robustness(datetime(2024, 1, 1), datetime(2025, 1, 1), tau_days=366, eta=0.5), 3)
    0.368
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np

from memstrata.memory.query import Interval

DAY = 86400.0
EPS = 1.0  # Eq. 1's small constant, in seconds: it only keeps the ratios defined for two instants


def temporal_relevance(unit: Interval | None, hint: Interval | None, *, lam: float, eps: float = EPS) -> float:
    """H-Mem Eq. 1; 0 when either side has no time.

    Two identical intervals score (almost exactly) 1, two disjoint ones only by their centres' distance:

    >>> day = Interval(datetime(2024, 5, 1), datetime(2024, 5, 1, 23, 59, 59))
    >>> round(temporal_relevance(day, day, lam=0.5), 4)
    1.0
    >>> later = Interval(datetime(2024, 5, 3), datetime(2024, 5, 3, 23, 59, 59))
    >>> round(temporal_relevance(day, later, lam=0.5), 3)
    0.167
    """
    if unit is None or hint is None:
        return 0.0
    s1, e1, s2, e2 = (unit.start.timestamp(), unit.end.timestamp(), hint.start.timestamp(), hint.end.timestamp())
    union = max(e1, e2) - min(s1, s2)
    inter = max(0.0, min(e1, e2) - max(s1, s2))
    distance = abs(unit.center - hint.center)
    return lam * inter / (union + eps) + (1 - lam) * max(0.0, 1 - distance / (union + eps))


def temporal_relevance_array(
    starts: np.ndarray, ends: np.ndarray, hint: Interval | None, *, lam: float, eps: float = EPS
) -> np.ndarray:
    """H-Mem Eq. 1 for many intervals, given as their ``starts`` and ``ends`` in epoch seconds (NaN: no time, 0).

    The same numbers as :func:`temporal_relevance`, one interval at a time:

    >>> day = Interval(datetime(2024, 5, 1), datetime(2024, 5, 1, 23, 59, 59))
    >>> s, e = np.array([day.start.timestamp(), np.nan]), np.array([day.end.timestamp(), np.nan])
    >>> temporal_relevance_array(s, e, day, lam=0.5).round(4).tolist()
    [1.0, 0.0]
    """
    starts, ends = np.asarray(starts, dtype=float), np.asarray(ends, dtype=float)
    if hint is None:
        return np.zeros(starts.shape)
    s2, e2 = hint.start.timestamp(), hint.end.timestamp()
    union = np.maximum(ends, e2) - np.minimum(starts, s2)
    inter = np.clip(np.minimum(ends, e2) - np.maximum(starts, s2), 0.0, None)
    distance = np.abs((starts + ends) / 2 - hint.center)
    score = lam * inter / (union + eps) + (1 - lam) * np.clip(1 - distance / (union + eps), 0.0, None)
    return np.nan_to_num(score, nan=0.0)


def robustness(
    last: datetime | None, now: datetime | None, *, tau_days: float, eta: float, reinforcements: int = 0
) -> float:
    """H-Mem Eq. 2: Ebbinghaus retention with reinforcement; 1.0 when times are unknown."""
    if last is None or now is None:
        return 1.0
    elapsed = max(0.0, (now - last).total_seconds())
    return math.exp(-elapsed / (tau_days * DAY * (1 + eta * math.log1p(reinforcements))))


def robustness_array(
    last: np.ndarray, now: datetime, *, tau_days: float, eta: float, reinforcements: np.ndarray
) -> np.ndarray:
    """H-Mem Eq. 2 for many items: ``last`` (r_m, epoch seconds; NaN: untimed, 1.0) and their counts n_m.

    >>> last = np.array([datetime(2024, 1, 1).timestamp(), np.nan])
    >>> robustness_array(last, datetime(2025, 1, 1), tau_days=366, eta=0.5, reinforcements=np.zeros(2)).round(3)
    array([0.368, 1.   ])
    """
    elapsed = np.clip(now.timestamp() - last, 0, None)
    scale = tau_days * DAY * (1 + eta * np.log1p(reinforcements))
    return np.where(np.isnan(elapsed), 1.0, np.exp(-elapsed / scale))


def fuse(semantic: Any, temporal: Any, robust: Any, *, weights: tuple[float, float, float]) -> Any:
    """H-Mem Eq. 3, for scalars or numpy arrays alike."""
    w_sem, w_time, w_rob = weights
    return w_sem * semantic + w_time * temporal + w_rob * robust
