"""Choosing among candidate turns before packing: a near-duplicate filter, MMR, and photo captions.

These are plain, general techniques, named for what they are: the duplicate
filter drops a turn whose vector nearly equals a better-ranked one's; MMR
(maximal marginal relevance) reorders the head of the ranking so a turn that
repeats an earlier pick yields its slot. Neither is xMemory's selection (that is the theme path's,
:mod:`memstrata.memory.search.themes`, whose admitted turns go first: :func:`found_first`). A question naming
a time gets the best few turns of its windows first (:func:`window_first`). A turn that only asks what the
query asks yields to the turns that state something, and one that repeats the query is folded into it
(:func:`statements_first`).

Example:
    >>> coverage_texts([], 5)
    []
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from memstrata.memory.index import MemoryIndex, tokenize
from memstrata.memory.plan.settings import RetrievalSettings
from memstrata.memory.query import Hit


def _rows(index: MemoryIndex, hits: Sequence[Hit]) -> list[int | None]:
    return [index.by_key.get((h.conversation_id, h.unit_id)) for h in hits]


def drop_near_duplicates(
    candidates: Sequence[Hit], index: MemoryIndex, *, max_items: int, threshold: float = 0.95
) -> tuple[list[Hit], int]:
    """The best ``max_items`` turns by score, skipping near-duplicates of a better one; and how many were skipped."""
    best: dict[str, Hit] = {}
    for cand in candidates:
        if cand.key not in best or cand.score > best[cand.key].score:
            best[cand.key] = cand
    ranked = sorted(best.values(), key=lambda c: -c.score)[: max_items * 2]
    rows = np.array([-1 if r is None else r for r in _rows(index, ranked)], dtype=int)
    vecs = index.turn_vecs[rows] if len(rows) else np.zeros((0, 1))
    sims = vecs @ vecs.T
    sims[rows < 0, :] = sims[:, rows < 0] = 0.0  # unknown turns are never duplicates
    dropped = np.zeros(len(ranked), dtype=bool)
    # Only the (few) near-duplicate pairs need a look; a pair drops its lower-ranked turn if the other stays.
    for i, j in np.argwhere(np.triu(sims >= threshold, 1)):
        if not dropped[i]:
            dropped[j] = True
    kept = [c for c, d in zip(ranked, dropped, strict=True) if not d][:max_items]
    return kept, int(dropped.sum())


def mmr(
    candidates: Sequence[Hit],
    index: MemoryIndex,
    *,
    penalty: float,
    head: int = RetrievalSettings.mmr_head,
    picks: int = 80,
) -> list[Hit]:
    """Rank by score minus ``penalty`` x the best similarity to what is already ranked (MMR).

    Only the first ``picks`` slots are reordered; the rest keep score order.
    """
    ranked = sorted(candidates, key=lambda c: (-c.score, c.key))
    if penalty <= 0 or len(ranked) < 2:
        return ranked
    top, rest = ranked[:head], ranked[head:]
    rows = [r for r in _rows(index, top) if r is not None]
    if len(rows) < len(top):  # a candidate the snapshot does not hold
        return ranked
    vecs = index.turn_vecs[rows]
    scores = np.array([c.score for c in top])
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


def window_first(ranked: Sequence[Hit], quota: int) -> list[Hit]:
    """The ranking with its best ``quota`` hits inside a time window the question names moved to the front.

    H-Mem narrows a question with a temporal hint to the tree windows it selects. Here the temporal score
    prefers those turns only a little (H-Mem's Eq. 3 weight), so a window holding a few turns (a day)
    can see them all outranked by turns said at other times; its best few enter the context first. A hit is
    inside a window when its temporal part is 1 (:func:`memstrata.memory.tree.search.window_relevance`
    gives 1 there and H-Mem's Eq. 1, below 1, elsewhere). The other hits keep their order.
    """
    inside = [h for h in ranked if h.parts.get("temporal", 0.0) >= 1.0][: max(quota, 0)]
    first = {h.key for h in inside}
    return [*inside, *(h for h in ranked if h.key not in first)]


def found_first(ranked: Sequence[Hit], finders: Sequence[str], quota: int) -> list[Hit]:
    """The ranking with its best ``quota`` hits found by one of ``finders`` moved to the front (each turn once).

    The theme path's admitted evidence is the backbone xMemory builds its context from (Stage I picks it,
    Stage II admits it); here it enters the context first, and the rest of the budget is filled in score
    order. The other hits keep their order.
    """
    wanted = set(finders)
    first: dict[str, Hit] = {}
    for h in ranked:
        if len(first) >= max(quota, 0):
            break
        if h.found_by in wanted and h.key not in first:
            first[h.key] = h
    return [*first.values(), *(h for h in ranked if h.key not in first)]


def mark_captions(candidates: Sequence[Hit], query_texts: Sequence[str]) -> list[Hit]:
    """Set ``show_caption``: a photo caption is worth its tokens only where it shares a word with the query.

    Captions are machine descriptions of shared photos, not what anybody said; they
    take about a tenth of a conversation's tokens. The turn's own text is always kept.
    """
    terms = set(tokenize([" ".join(query_texts)])[0])
    with_caption = [c for c in candidates if c.image_caption]
    words = tokenize([c.image_caption or "" for c in with_caption]) if with_caption else []
    shown = {id(c): bool(terms & set(w)) for c, w in zip(with_caption, words, strict=True)}
    return [c.with_(show_caption=shown[id(c)]) if id(c) in shown else c for c in candidates]


def coverage_texts(candidates: Sequence[Hit], top: int) -> list[str]:
    """The texts of the best ``top`` candidates (what a reader would see first)."""
    return [f"{c.speaker}: {c.text}" for c in sorted(candidates, key=lambda c: -c.score)[:top]]


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class AskedAgain:
    """How a stored turn that asks what the query asks is ranked (:func:`statements_first`).

    In a chat the user repeats questions; the earlier asking of a question matches the question best and answers
    nothing. ``overlap``: the share of the query's words one question sentence of the turn must hold to ask the
    same; ``said``: a turn that also states more than this many words the query lacks is a statement, not a
    question; ``weight``: the score such a question keeps; ``fold``: the word Jaccard with the query at which the
    turn is the query again and leaves the candidates.
    """

    overlap: float = 0.5
    said: int = 3
    weight: float = 0.5
    fold: float = 0.8


def _words(text: str) -> set[str]:
    return set(tokenize([text])[0])


def asks_same(text: str, query_words: set[str], rule: AskedAgain) -> bool:
    """Whether a turn only asks what the query asks: a question sentence holds ``rule.overlap`` of the query's
    words, and its other sentences state at most ``rule.said`` words the query lacks.

    Example:
        >>> q = _words("What's my dog called?")
        >>> (
        ...     asks_same("What is my dog called again?", q, AskedAgain()),
        ...     asks_same("My dog is called Pepper.", q, AskedAgain()),
        ... )
        (True, False)
    """
    if not query_words or "?" not in text:
        return False
    asked, stated = _sentence_words(text)
    if not any(len(query_words & words) >= rule.overlap * len(query_words) for words in asked):
        return False
    return len(stated - query_words) <= rule.said


@lru_cache(maxsize=4096)
def _sentence_words(text: str) -> tuple[tuple[frozenset[str], ...], frozenset[str]]:
    """A turn's words per question sentence, and the words of its other sentences together (memoized: the
    answer node asks this of the same candidate turns for every query of a conversation).
    """
    sentences = [s for s in _SENTENCE.split(text.strip()) if s]
    asked = [s for s in sentences if s.rstrip().endswith("?")]
    return tuple(frozenset(_words(s)) for s in asked), frozenset().union(
        *(_words(s) for s in sentences if s not in asked)
    )


def statements_first(
    candidates: Sequence[Hit], query: str, rule: AskedAgain = AskedAgain()
) -> tuple[list[Hit], int, int]:
    """The candidates with every turn that only asks what ``query`` asks down-weighted by ``rule.weight``, and
    those that repeat it (word Jaccard >= ``rule.fold``) folded away; and how many of each.

    Example:
        >>> hit = Hit(kind="turn", unit_id="t1", conversation_id="c", score=0.9, text="What's my dog called?")
        >>> statements_first(
        ...     [hit, hit.with_(unit_id="t2", text="Her name is Pepper.", score=0.5)], "What is my dog called?"
        ... )[1:]
        (0, 1)
    """
    words = _words(query)
    kept: list[Hit] = []
    demoted = folded = 0
    for hit in candidates:
        if not asks_same(hit.text, words, rule):
            kept.append(hit)
            continue
        own = _words(hit.text)
        if len(own & words) >= rule.fold * len(own | words):
            folded += 1
            continue
        demoted += 1
        kept.append(hit.with_(score=hit.score * rule.weight))
    return kept, demoted, folded
