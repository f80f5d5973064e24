"""HMO's priority (Eq. 5) and persona drift (Eq. 6), as read from the prose of §3.3-3.4.

The seed's text lost both formulas. What the prose fixes, and the form we take:

- Eq. 5 "integrates the initial importance I and the dynamic persona alignment A, weighted by coefficients α and
  β"; "the term ln(1+n) provides a logarithmic gain based on the cumulative recall count n, while simultaneously
  acting as a resistance factor in the exponential denominator to modulate the base decay constant τ"; "as
  interaction frequency increases, the effective decay slope flattens". The prose names three hyperparameters (α,
  β, τ) and one recall term that acts in two places, so we read it as::

      P = (α·I/10 + β·A) · (1 + ln(1+n)) · exp(−Δt / (τ·(1 + ln(1+n))))

  with ``I`` in 1-10 scaled to [0.1, 1], ``A`` the cosine between the record and its own conversation's persona
  (negative taken as 0; :mod:`memstrata.memory.tiers.persona`), ``n`` the recall count and ``Δt`` the memory time
  since the record was last used (or written). The same factor ``1 + ln(1+n)`` is the gain and the decay's
  resistance, and is 1 for a record never recalled, so the decay stays finite and a new record keeps its base. A
  gain that multiplies needs no weight of its own: ten recalls (ln 11 ≈ 2.4) multiply a record's priority by 3.4
  whatever its base, where an added term would need a fourth coefficient to be weighed against I and A.
- Coefficients (``Context.tier.alpha``, ``tier.beta``, ``tier.decay_days``): α = 0.6 and β = 0.4,
  importance first because §3.1 prefers the evaluator's many-sided judgement to similarity alone, alignment second
  as the cheap term that follows the persona; τ = 30 days, so a record untouched for a month keeps
  e^-1 of its priority when never recalled and more the more it was (H-Mem's τ of a year ranks relevance over the
  whole memory; tiers move over weeks).
- Eq. 6: the drift of the persona from its anchor is the cosine distance ``1 − cos(p, p_anchor)`` between the
  embeddings of the persona's text (the issue's reading, which §3.4's "deviation ... exceeds a threshold" allows),
  taken per conversation (:mod:`memstrata.memory.tiers.anchor`).

Example:
    >>> w = PriorityWeights()
    >>> priority(8, 0.5, recalls=3, age_days=60, weights=w) > priority(8, 0.5, recalls=0, age_days=60, weights=w)
    True
    >>> decay(0, 30.0, tau_days=30.0) < decay(5, 30.0, tau_days=30.0)
    True
    >>> round(priority_at(0.8, scored_at=0.0, now=30 * 86400.0, recalls=0, tau_days=30.0), 3)  # e^-1 of it
    0.294
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DAY = 86400.0  # seconds: Eq. 5's ages are in days, stored times in epoch seconds


@dataclass(frozen=True)
class PriorityWeights:
    """Eq. 5's coefficients (see the module docstring for why these values)."""

    alpha: float = 0.6
    beta: float = 0.4
    tau_days: float = 30.0


def decay(recalls: int, age_days: float, *, tau_days: float) -> float:
    """``exp(−Δt / (τ·(1 + ln(1+n))))``: the share of priority left after ``age_days``; more recalls, slower."""
    return math.exp(-max(0.0, age_days) / (tau_days * (1.0 + math.log1p(max(0, recalls)))))


def priority(importance: float, alignment: float, *, recalls: int, age_days: float, weights: PriorityWeights) -> float:
    """Eq. 5 as read above: ``(α·I/10 + β·A) · (1 + ln(1+n)) · decay``."""
    base = weights.alpha * importance / 10.0 + weights.beta * max(0.0, alignment)
    return base * (1.0 + math.log1p(max(0, recalls))) * decay(recalls, age_days, tau_days=weights.tau_days)


def priority_at(stored: float | None, *, scored_at: float | None, now: float, recalls: int, tau_days: float) -> float:
    """A stored priority as it stands at memory time ``now``: Eq. 5's decay carried on from ``scored_at``.

    Eq. 5's decay is a product, so a priority scored at ``scored_at`` and left untouched since is worth
    ``stored · decay(n, now − scored_at)`` at ``now``. Priorities are compared only at one time: a record scored
    a month ago does not outrank one scored today on an older, undecayed number.
    """
    if stored is None:
        return 0.0
    if scored_at is None:
        return stored
    return stored * decay(recalls, (now - scored_at) / DAY, tau_days=tau_days)


def alignment(record: Sequence[float] | np.ndarray | None, persona: Sequence[float] | np.ndarray | None) -> float:
    """Cosine between a record's vector and the persona's (0 when either is missing)."""
    if record is None or persona is None:
        return 0.0
    a, b = np.asarray(record, dtype=float), np.asarray(persona, dtype=float)
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denom if denom else 0.0


def drift(current: Sequence[float] | np.ndarray | None, anchor: Sequence[float] | np.ndarray | None) -> float:
    """Eq. 6: the cosine distance of the persona from its anchor (1.0 when there is no anchor yet)."""
    if current is None:
        return 0.0
    if anchor is None:
        return 1.0
    return 1.0 - alignment(current, anchor)


def persona_vector(vectors: Sequence[Sequence[float]]) -> np.ndarray | None:
    """The persona's embedding: the normalised mean of its current dimension texts' vectors."""
    if not len(vectors):
        return None
    mean = np.asarray(vectors, dtype=float).mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return mean / norm if norm else None
