"""Turning scores into evidence: the light Level-1 lookup, the deep Level-2 backtrack, admission.

These are the pure operations behind the retrieval nodes. A *query* here is a
dict ``{"text", "scope", "hint_start", "hint_end", "weight"}``; a *candidate*
is a raw-turn dict ready for the context packer.

Example:
    >>> q = {"text": "Where does Ann live?", "scope": "Mixed", "hint_start": None, "hint_end": None, "weight": 1.0}
    >>> light_lookup(index, [q], vectors, level1_k=10, coarse_n=30, weights=Weights(), now=None)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memstrata.memory.planning import SubQuery
from memstrata.memory.ranking import Weights, episode_prior, score_summaries, score_turns, turn_semantic
from memstrata.memory.search import MemoryIndex, tokenize
from memstrata.memory.timeparse import format_date


def as_subquery(query: dict[str, Any]) -> SubQuery:
    start, end = query.get("hint_start"), query.get("hint_end")
    return SubQuery(
        id=query.get("id", "q"), text=query["text"], scope=query.get("scope", "Mixed"),
        hint_start=datetime.fromisoformat(start) if start else None,
        hint_end=datetime.fromisoformat(end) if end else None,
    )


def turn_item(index: MemoryIndex, i: int, parts: dict[str, np.ndarray], level: str, weight: float) -> dict[str, Any]:
    """A candidate dict for turn ``i`` with its score breakdown."""
    t = index.turns[i]
    return {
        "id": f"{t.conversation_id}/{t.turn_id}", "turn_id": t.turn_id, "conversation_id": t.conversation_id,
        "session_id": t.session_id, "position": t.position, "speaker": t.speaker, "text": t.text,
        "image_caption": t.image_caption, "time": format_date(t.ts) or t.time_raw, "level": level,
        "score": float(parts["score"][i]) * weight,
        "score_parts": {k: round(float(v[i]), 4) for k, v in parts.items() if k != "score"},
    }


def summary_item(index: MemoryIndex, s: int, score: float) -> dict[str, Any]:
    row = index.summaries[s]
    return {"id": f"{row.conversation_id}/{row.summary_id}", "summary_id": row.summary_id,
            "episode_id": row.episode_id, "conversation_id": row.conversation_id, "session_id": row.session_id,
            "text": row.text, "time": format_date(row.ts), "score": round(float(score), 4), "index": int(s)}


def _scored(index: MemoryIndex, query: dict[str, Any], qvec: np.ndarray, *, top_summaries: int,
            weights: Weights, now: datetime | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Summary scores and fused turn scores; the query-only parts are memoized on the snapshot."""
    text = query["text"]
    key = f"{text}\x1f{query.get('dense_text') or ''}"
    if key not in index.memo:
        tokens = tokenize([text])[0]
        index.remember(key, (score_summaries(index, qvec, tokens), turn_semantic(index, qvec, tokens)))
    sums, own = index.memo[key]
    prior = episode_prior(index, sums, top_summaries)
    return sums, score_turns(index, as_subquery(query), own, prior, weights=weights, now=now)


def light_lookup(
    index: MemoryIndex, queries: Sequence[dict[str, Any]], vectors: np.ndarray, *, level1_k: int, coarse_n: int,
    weights: Weights, now: datetime | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """HyMem's light module: top-``level1_k`` summaries, the coarse top-``coarse_n``, and their turns.

    Following H-Mem's scopes, a Short or Mixed query also reads the best raw turns
    directly (original fragments); a Long query reads only through the summaries.
    """
    hits: dict[str, dict[str, Any]] = {}
    coarse: dict[str, dict[str, Any]] = {}
    turns: list[dict[str, Any]] = []
    for query, qvec in zip(queries, vectors, strict=True):
        weight = query.get("weight", 1.0)
        sums, parts = _scored(index, query, qvec, top_summaries=level1_k, weights=weights, now=now)
        order = np.argsort(-sums)
        for rank, s in enumerate(order[:coarse_n]):
            item = summary_item(index, int(s), sums[s] * weight)
            coarse.setdefault(item["id"], item)
            if rank < level1_k:
                hits.setdefault(item["id"], item)
                turns += [turn_item(index, i, parts, "level1", weight)
                          for i in index.episode_turns(index.summaries[int(s)])]
        if query.get("scope", "Mixed") != "Long" and len(parts["score"]):
            turns += [turn_item(index, int(i), parts, "level2", weight)
                      for i in np.argsort(-parts["score"])[: level1_k * 3]]
    return list(hits.values()), sorted(coarse.values(), key=lambda c: -c["score"]), turns


def backtrack(
    index: MemoryIndex, queries: Sequence[dict[str, Any]], vectors: np.ndarray, episodes: Sequence[int], *,
    raw_top: int, weights: Weights, now: datetime | None, keep: int | None = None,
) -> list[dict[str, Any]]:
    """HyMem's deep module offline: the turns of the chosen episodes plus the best raw turns, reranked.

    ``keep`` bounds how many of the best-scored turns per query become candidates.
    """
    linked = {i for s in episodes for i in index.episode_turns(index.summaries[s])}
    out = []
    for query, qvec in zip(queries, vectors, strict=True):
        _, parts = _scored(index, query, qvec, top_summaries=max(len(episodes), 1), weights=weights, now=now)
        chosen = np.fromiter(linked | {int(i) for i in np.argsort(-parts["score"])[:raw_top]}, dtype=int)
        chosen = chosen[np.argsort(-parts["score"][chosen])][:keep]
        out += [turn_item(index, int(i), parts, "level2", query.get("weight", 1.0)) for i in chosen]
    return out


def admit(candidates: Sequence[dict[str, Any]], index: MemoryIndex, *, max_items: int,
          duplicate_threshold: float = 0.95) -> tuple[list[dict[str, Any]], int]:
    """xMemory Stage II, offline: admit by score, skipping turns that add nothing (near-duplicates)."""
    best: dict[str, dict[str, Any]] = {}
    for cand in candidates:
        if cand["id"] not in best or cand["score"] > best[cand["id"]]["score"]:
            best[cand["id"]] = cand
    ranked = sorted(best.values(), key=lambda c: -c["score"])[: max_items * 2]
    rows = np.array([index.by_key.get((c["conversation_id"], c["turn_id"]), -1) for c in ranked], dtype=int)
    vecs = index.turn_vecs[rows] if len(rows) else np.zeros((0, 1))
    sims = vecs @ vecs.T
    sims[rows < 0, :] = sims[:, rows < 0] = 0.0  # unknown turns are never duplicates
    dropped = np.zeros(len(ranked), dtype=bool)
    # Only the (few) near-duplicate pairs need a look; a pair drops its lower-ranked turn if the other stays.
    for i, j in np.argwhere(np.triu(sims >= duplicate_threshold, 1)):
        if not dropped[i]:
            dropped[j] = True
    kept = [c for c, d in zip(ranked, dropped, strict=True) if not d][:max_items]
    return kept, int(dropped.sum())


def diversify(candidates: Sequence[dict[str, Any]], index: MemoryIndex, *, penalty: float, head: int = 300,
              picks: int = 80) -> list[dict[str, Any]]:
    """Rank by score minus ``penalty`` x the best similarity to what is already ranked (MMR).

    This is xMemory's representative selection in its offline form: a
    relevant turn that repeats an earlier pick yields its slot to one that covers
    something new. Only the first ``picks`` slots are reordered; the rest keep score order.
    """
    ranked = sorted(candidates, key=lambda c: (-c["score"], c["id"]))
    if penalty <= 0 or len(ranked) < 2:
        return ranked
    top, rest = ranked[:head], ranked[head:]
    rows = [index.by_key.get((c["conversation_id"], c["turn_id"])) for c in top]
    if any(r is None for r in rows):
        return ranked
    vecs = index.turn_vecs[rows]
    scores = np.array([c["score"] for c in top])
    closest = np.full(len(top), -np.inf)
    free = np.ones(len(top), dtype=bool)
    order: list[int] = []
    for _ in range(min(picks, len(top))):
        gain = np.where(free, scores - penalty * np.maximum(closest, 0.0), -np.inf)
        pick = int(np.argmax(gain))
        order.append(pick)
        free[pick] = False
        closest = np.maximum(closest, vecs @ vecs[pick])
    order += [i for i in range(len(top)) if free[i]]
    return [top[i] for i in order] + rest


def mark_captions(candidates: Sequence[dict[str, Any]], query_texts: Sequence[str]) -> list[dict[str, Any]]:
    """Set ``show_caption``: a photo caption is worth its tokens only where it shares a word with the query.

    Captions are machine descriptions of shared photos, not what anybody said; they
    take about a tenth of a conversation's tokens. The turn's own text is always kept.
    """
    terms = set(tokenize([" ".join(query_texts)])[0])
    with_caption = [c for c in candidates if c.get("image_caption")]
    words = tokenize([c["image_caption"] for c in with_caption]) if with_caption else []
    shown = {id(c): bool(terms & set(w)) for c, w in zip(with_caption, words, strict=True)}
    return [{**c, "show_caption": shown[id(c)]} if id(c) in shown else c for c in candidates]


def coverage_texts(candidates: Sequence[dict[str, Any]], top: int) -> list[str]:
    """The texts of the best ``top`` candidates (what a reader would see first)."""
    return [f"{c['speaker']}: {c['text']}" for c in sorted(candidates, key=lambda c: -c["score"])[:top]]
