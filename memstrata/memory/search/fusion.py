"""How a raw turn's score is made for one query: its views fused, then the hierarchy's priors (pure numpy).

A turn's semantic score fuses the standardized dense and BM25 scores of its
views, the score of the best event (Level-1 summary or any other ``event``
kind) that links to it (the hierarchy's prior), a boost when the query names
its speaker, and a share of its best neighbour's score (answers sit next to
questions). H-Mem's Eq. 3 (:mod:`memstrata.memory.search.hmem_score`) then adds
temporal relevance to the query's hint and Ebbinghaus robustness. A question that asks
for a time ("When did...") also boosts the turns that tell one (:func:`when_match`).

An event unit (a summary, a tree node, a fact) scores its dense and BM25 match fused by rank
(:func:`score_events`); with ``Context.weights.events="eq3"`` it is ranked by H-Mem's Eq. 3 as well, that score
its S (:func:`fused_events`).

Example:
    >>> ranks_to_unit(np.array([3.0, 1.0, 2.0])).round(2).tolist()
    [1.0, 0.97, 0.98]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

import numpy as np

from memstrata.memory.index import KindTable, MemoryIndex
from memstrata.memory.plan.temporal_hints import asks_when
from memstrata.memory.query import Interval, Query
from memstrata.memory.search.hmem_score import fuse
from memstrata.memory.search.weights import Weights
from memstrata.memory.timeparse import mentions_time
from memstrata.memory.tree.search import (
    event_relevance,
    event_robustness,
    turn_event_times,
    turn_robustness,
    window_relevance,
)

RRF_K = 60


def ranks_to_unit(scores: np.ndarray) -> np.ndarray:
    """RRF contribution of each item's rank, scaled so rank 1 is 1.0.

    Equal scores share the best of their ranks, so the result never depends on the order
    the units happen to be stored in (a snapshot updated in place equals a rebuilt one). Scores are compared at
    1e-6: two units with the same text get cosines that differ in their last float32 bits when the matrix product
    runs over another memory layout, and they must still tie.
    """
    if scores.size == 0:
        return scores
    key = -np.round(np.asarray(scores, dtype=np.float64), 6)
    ranks = np.searchsorted(np.sort(key), key, side="left").astype(float)
    return (RRF_K + 1) / (RRF_K + 1 + ranks)


def hybrid_semantic(dense: np.ndarray, lexical: np.ndarray) -> np.ndarray:
    """Rank fusion of dense and BM25 scores, in [0, 1]; BM25 only counts where it matched."""
    dense_part = ranks_to_unit(dense)
    lex_part = np.where(lexical > 0, ranks_to_unit(lexical), 0.0)
    return (dense_part + lex_part) / 2


def score_events(table: KindTable, qvec: np.ndarray, qtokens: list[str]) -> np.ndarray:
    """Semantic score of every unit of one event kind for one query (dense and BM25, fused by rank)."""
    if not len(table):
        return np.zeros(0)
    return hybrid_semantic(table.dense(qvec), table.bm25.scores(qtokens) if table.bm25 else np.zeros(len(table)))


def fused_events(
    index: MemoryIndex,
    scores: dict[str, np.ndarray],
    kinds: Sequence[str],
    hint: Interval | None,
    *,
    weights: Weights,
    now: datetime | None,
) -> dict[str, np.ndarray]:
    """The scores the query's event units are ranked by: ``scores`` as they are (``weights.events == "rank"``), or
    H-Mem's Eq. 3 for each of the ``kinds`` (``"eq3"``).

    Eq. 3 takes a unit's score in ``scores`` as its S (:func:`score_events`, already in [0, 1]), T from Eq. 1
    between the unit's time window and the query's ``hint`` (0 without one,
    :func:`~memstrata.memory.tree.search.event_relevance`) and R from Eq. 2 at ``now`` with the unit's own
    reinforcement (:func:`~memstrata.memory.tree.search.event_robustness`), weighted as the turns are.
    """
    if weights.events == "rank":
        return scores
    theta = (weights.semantic, weights.temporal, weights.robustness)
    return {
        kind: fuse(
            scores[kind],
            event_relevance(index, kind, hint, weights.lam),
            event_robustness(index, kind, now, tau_days=weights.tau_days, eta=weights.eta),
            weights=theta,
        )
        for kind in kinds
        if kind in scores
    }


def ranked_events(
    scores: dict[str, np.ndarray], kinds: Sequence[str], depth: Mapping[str, int] | None = None
) -> list[tuple[str, int, float]]:
    """``(kind, row, score)`` of the given event kinds, best first (ties in kind, then row order).

    With ``depth``, only each named kind's best ``depth[kind]`` rows are ranked (a kind not named keeps
    all): callers read a few dozen events, and a kind such as facts can hold thousands.
    """
    rows, names, flat = [], [], []
    for kind in kinds:
        if kind not in scores:
            continue
        s = scores[kind]
        n = min(len(s), depth.get(kind, len(s))) if depth is not None else len(s)
        top = np.sort(np.argpartition(-s, n - 1)[:n]) if 0 < n < len(s) else np.arange(n)
        rows.append(top)
        names += [kind] * n
        flat.append(s[top])
    if not names:
        return []
    row_of, score_of = np.concatenate(rows), np.concatenate(flat)
    return [(names[i], int(row_of[i]), float(score_of[i])) for i in np.argsort(-score_of, kind="stable")]


def event_prior(index: MemoryIndex, ranked: list[tuple[str, int, float]], top: int | Mapping[str, int]) -> np.ndarray:
    """Per turn: the best normalized score among the top events of each kind linking to it.

    ``top`` is how many of each kind's best events count (one number for every kind, or per kind);
    each kind is normalized by its own best score, so a kind with more units never crowds out another.
    Kinds whose level does not ``lends_prior`` are skipped.
    """
    prior = np.zeros(len(index.turns))
    best: dict[str, float] = {}
    taken: dict[str, int] = {}
    for kind, row, score in ranked:
        if not index.events[kind].level.lends_prior:
            continue
        limit = top if isinstance(top, int) else top.get(kind, 0)
        if taken.get(kind, 0) >= limit:
            continue
        taken[kind] = taken.get(kind, 0) + 1
        norm = best.setdefault(kind, score or 1.0)
        idx = index.events[kind].turn_rows[row]
        prior[idx] = np.maximum(prior[idx], score / norm)
    return prior


def link_prior(index: MemoryIndex, rows: Sequence[tuple[list[int], float]]) -> np.ndarray:
    """Per turn: the best normalized score of the units reaching it (e.g. facts reached through the graph)."""
    prior = np.zeros(len(index.turns))
    best = max((s for _, s in rows), default=0.0) or 1.0
    for turn_rows, score in rows:
        prior[turn_rows] = np.maximum(prior[turn_rows], score / best)
    return prior


def turn_semantic(index: MemoryIndex, qvec: np.ndarray, qtokens: list[str]) -> np.ndarray:
    """Each turn's own semantic score for one query: score fusion over its views, in [0, 1].

    Half dense (the turn alone, averaged with every ``view`` kind, e.g. the turn among
    its neighbours), half BM25 (the turn alone and its windows of neighbours each
    side; a view that did not match gives its lowest value). Each view is standardized over the user's turns
    (z-scores) before averaging, so a clear winner in one view keeps its margin, which
    rank fusion would flatten; the sum is then scaled to [0, 1]. A reply that only
    makes sense after the question it answers is found through its context, while the
    turn itself is what gets returned.
    """
    if not index.turns:
        return np.zeros(0)
    views = [index.dense_turns(qvec), *index.dense_views(qvec)]
    # Each sum is an array: its list is not empty (an empty one would divide by zero); the built-in's type allows
    # the 0 that sum() gives for an empty list.
    dense = cast(np.ndarray, sum(standardize(v) for v in views)) / len(views)
    lexical = [standardize(s) for s in index.window_bm25(qtokens)]
    fused = dense + cast(np.ndarray, sum(lexical)) / len(lexical)
    low, high = float(fused.min()), float(fused.max())
    return (fused - low) / (high - low) if high > low else np.zeros_like(fused)


def standardize(scores: np.ndarray) -> np.ndarray:
    """z-scores (all zeros when the scores do not vary, e.g. a query with no BM25 match)."""
    spread = float(scores.std())
    return (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores, dtype=float)


def score_turns(
    index: MemoryIndex,
    query: Query,
    own: np.ndarray,
    prior: np.ndarray,
    *,
    weights: Weights,
    now: datetime | None,
) -> dict[str, np.ndarray]:
    """Every turn's fused score for one sub-query, with its parts (``own`` from :func:`turn_semantic`)."""
    n = len(index.turns)
    if n == 0:
        return {"score": np.zeros(0)}
    sem = (1 - weights.episode_prior) * own + weights.episode_prior * prior
    sem = sem * (1 + weights.speaker * speaker_match(index, query.text) + weights.when * when_match(index, query.text))
    sem = np.maximum(sem, weights.neighbour * _neighbour_max(index, sem))
    temporal = _temporal(index, query.hint, weights.lam)
    robust = robustness_all(index, now, weights)
    score = fuse(sem, temporal, robust, weights=(weights.semantic, weights.temporal, weights.robustness))
    return {"score": score, "semantic": sem, "temporal": temporal, "robustness": robust, "own": own}


def speaker_match(index: MemoryIndex, text: str) -> np.ndarray:
    """1 for turns spoken by a speaker the query names (people ask about what someone said), else 0."""
    named = {s for s in index.speakers if _names(text, s)}
    if not named or len(named) == len(index.speakers):
        return np.zeros(len(index.turns))
    return np.array([t.speaker in named for t in index.turns], dtype=float)


def when_match(index: MemoryIndex, text: str) -> np.ndarray:
    """For a question asking for a time: 1 for turns that tell one, else 0 (all 0 for other questions).

    Asked "When did Evan meet his wife?", the turn to find usually dates the event itself ("last week I met
    this awesome woman", "for two years now"), more often than the other turns about her. A turn tells a time
    when its text has a date, a relative phrase or a duration (:func:`mentions_time`), or one of its facts
    resolved a date from it.
    """
    if not asks_when(text):
        return np.zeros(len(index.turns))
    key = "fusion\x1ftells_time"
    if key not in index.memo:
        tells = np.array(index.raw.column("tells_time", _tells_time), dtype=float)  # kept through writes
        rows, _ = turn_event_times(index)
        tells[rows] = 1.0
        index.remember(key, tells)
    return index.memo[key]


def _tells_time(turn: Any) -> bool:
    return mentions_time(turn.text)


def _names(text: str, speaker: str) -> bool:
    first = speaker.split()[0]
    return len(first) > 1 and re.search(rf"\b{re.escape(first)}\b", text, re.IGNORECASE) is not None


def _neighbour_max(index: MemoryIndex, values: np.ndarray) -> np.ndarray:
    """For each turn, the larger value of its previous and next turn in the same session."""
    padded = np.append(values, 0.0)  # index -1 (no neighbour) reads the trailing 0
    return np.maximum(padded[index.prev_idx], padded[index.next_idx])


def robustness_all(index: MemoryIndex, now: datetime | None, weights: Weights) -> np.ndarray:
    """Vectorized H-Mem Eq. 2 with the reinforcement the temporal tree records (n_m, r_m of the event
    summary holding each turn; see :func:`memstrata.memory.tree.search.turn_robustness`); 1.0 where untimed.
    """
    return turn_robustness(index, now, tau_days=weights.tau_days, eta=weights.eta)


def _temporal(index: MemoryIndex, hint: Interval | None, lam: float) -> np.ndarray:
    """Temporal relevance through the tree: 1 inside the windows the hint selects, else H-Mem Eq. 1."""
    return window_relevance(index, hint, lam)
