"""Offline consolidation of a tree node: an extractive summary of its children within a token cap per level.

Sentences of the children's texts are ranked by the retrievable details they
add (names and places, numbers, dates) and by how central their words are
among the children; each pick must add a detail or a word not yet kept. The
picks are grouped under their child's date, so every kept sentence keeps its
day. Names and numbers that did not fit as sentences follow in one
``Also:`` line, as long as the cap allows. Nothing is paraphrased, so nothing
is invented.

Example:
    >>> from datetime import datetime
    >>> kids = [
    ...     Child("[8 May 2023] Ann, Bo. Ann: I ran the Brighton half in 1:52.", datetime(2023, 5, 8)),
    ...     Child("[9 May 2023] Ann, Bo. Bo: We booked a trip to Porto for June.", datetime(2023, 5, 9)),
    ... ]
    >>> text = consolidate(kids, header="week 2023-W19", cap=60, count=lambda s: len(s.split()))
    >>> "Brighton" in text and "Porto" in text and "8 May 2023" in text
    True
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from memstrata.memory.text import SENTENCE, content_words, proper_nouns
from memstrata.memory.timeparse import format_date

_HEADER = re.compile(r"^\s*\[[^\]]*\]\s*")
_NUMBERISH = re.compile(r"\b\d[\d,.:/]*\b")
_DATE_LEAD = re.compile(r"^\s*(\d{1,2} [A-Z][a-z]+ \d{4}): ")
_NAMES_ONLY = re.compile(r"^[A-Z][\w'-]*(?: [A-Z][\w'-]*)*(?:, [A-Z][\w'-]*(?: [A-Z][\w'-]*)*)*\.?$")
_MONTH = re.compile(
    r"\b(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December)\b"
)


@dataclass(frozen=True)
class Child:
    """One child's text and time, as consolidation reads it."""

    text: str
    when: datetime | None = None


def details(sentence: str) -> list[str]:
    """The names, places, dates and numbers a sentence carries."""
    found = proper_nouns(" x " + sentence) + _NUMBERISH.findall(sentence) + _MONTH.findall(sentence)
    return list(dict.fromkeys(found))


def _sentences(children: Sequence[Child]) -> list[tuple[str, str]]:
    """``(date, sentence)`` of every sentence worth keeping; a sentence keeps the date it was filed under."""
    out = []
    for child in children:
        date = format_date(child.when)
        for sentence in SENTENCE.split(_HEADER.sub("", child.text.strip())):
            lead = _DATE_LEAD.match(sentence)
            if lead:  # a consolidated child's sentence already says its day
                date, sentence = lead.group(1), sentence[lead.end() :]
            sentence = sentence.strip()
            # a bare participant list ("Ann, Bo.") or a fragment carries nothing to find
            if len(content_words(sentence)) >= 3 and not _NAMES_ONLY.match(sentence):
                out.append((date, sentence))
    return out


def _pick(
    candidates: list[tuple[str, str]], fits: Callable[[list[tuple[str, str]]], bool], limit: int
) -> list[tuple[str, str]]:
    freq = Counter(w for _, s in candidates for w in dict.fromkeys(content_words(s)))
    kept: list[tuple[str, str]] = []
    have_details: set[str] = set()
    have_words: set[str] = set()
    pool = list(candidates)
    for _ in range(min(limit, len(pool))):  # budget: one pass per possible pick
        gain = partial(_gain, freq, have_words, have_details)
        best = max(pool, key=gain, default=None)
        if best is None or gain(best) <= 0 or not fits([*kept, best]):
            break
        pool.remove(best)
        kept.append(best)
        have_details |= set(details(best[1]))
        have_words |= set(content_words(best[1]))
    return sorted(kept, key=lambda c: candidates.index(c))


def _gain(freq: Counter[str], have_words: set[str], have_details: set[str], candidate: tuple[str, str]) -> float:
    """What ``candidate`` adds to the picks so far: its new details count double, its new content words by their
    frequency, scaled down by the root of how many there are.
    """
    words = set(content_words(candidate[1])) - have_words
    new = set(details(candidate[1])) - have_details
    return 2.0 * len(new) + sum(freq[w] for w in words) / (len(words) ** 0.5 if words else 1.0)


def _render(header: str, kept: Sequence[tuple[str, str]], extra: Sequence[str]) -> str:
    parts: list[str] = []
    last = None
    for date, sentence in kept:
        parts.append(f"{date}: {sentence}" if date and date != last else sentence)
        last = date or last
    text = f"[{header}] " + " ".join(parts)
    return text + (f" Also: {', '.join(extra)}." if extra else "")


def consolidate(children: Sequence[Child], *, header: str, cap: int, count: Callable[[str], int]) -> str:
    """The node's text: ``[header]`` then the best sentences of its children, at most ``cap`` tokens by ``count``."""
    candidates = _sentences(children)
    kept = _pick(candidates, lambda picks: count(_render(header, picks, ())) <= cap, limit=64)
    text = _render(header, kept, ())
    covered = {d for _, s in kept for d in details(s)}
    missing = [d for _, s in candidates for d in details(s) if d not in covered]
    extra: list[str] = []
    for item in dict.fromkeys(missing):
        if count(_render(header, kept, [*extra, item])) > cap:
            break
        extra.append(item)
    return _render(header, kept, extra) if extra else text
