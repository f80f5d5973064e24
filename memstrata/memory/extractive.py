"""Offline Level-1 summaries: extractive, keeping names, dates, places and numbers.

Sentences are scored by how much retrievable detail they carry (capitalized
names and places, numbers, dates, content words shared with the episode) and
the best few are kept in order, each attributed to its speaker. Relative dates
are resolved against the session date: "yesterday" becomes
"yesterday (7 May 2023)".

Example:
    >>> from datetime import datetime
    >>> s = extractive_summary([("Ann", "Hi! I went to Porto yesterday with Bob.")], datetime(2023, 5, 8))
    >>> "Porto" in s.text and "7 May 2023" in s.text
    True
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memstrata.memory.text import (
    NUMBER,
    PLEASANTRY,
    SENTENCE,
    content_words,
    proper_nouns,
    resolve_dates_in,
    split_at,
)
from memstrata.memory.timeparse import RELATIVE_PATTERN, format_date


@dataclass(frozen=True)
class Summary:
    """An extractive summary with the keywords and participants it found."""

    text: str
    keywords: list[str]
    participants: list[str]
    quotes: list[tuple[int, int, int]]  # (turn index, start, end) of each kept sentence, in its turn's text


def _score(sentence: str, freq: Counter[str]) -> float:
    words = content_words(sentence)
    if not words or (PLEASANTRY.match(sentence.strip()) and len(words) < 4):
        return 0.0
    detail = 2.0 * len(proper_nouns(" x " + sentence)) + 1.5 * bool(NUMBER.search(sentence))
    detail += 2.0 * bool(RELATIVE_PATTERN.search(sentence))
    return detail + sum(freq[w] for w in set(words)) / (len(set(words)) ** 0.5)


def extractive_summary(
    turns: Sequence[tuple[str, str]], session_time: datetime | None, *, max_sentences: int = 5, max_words: int = 90
) -> Summary:
    """Summarize ``(speaker, text)`` turns of one episode."""
    freq = Counter(w for _, text in turns for w in dict.fromkeys(content_words(text)))  # ordered: no hash seed
    candidates: list[tuple[float, int, str, str, tuple[int, int]]] = []
    for index, (speaker, text) in enumerate(turns):
        for start, sentence in split_at(SENTENCE, text.strip(), len(text) - len(text.lstrip())):
            if sentence:
                candidates.append((_score(sentence, freq), len(candidates), speaker, sentence, (index, start)))
    chosen = sorted(sorted(candidates, key=lambda c: -c[0])[:max_sentences], key=lambda c: c[1])
    parts, quotes, words = [], [], 0
    for score, _, speaker, sentence, (index, start) in chosen:
        if score <= 0 or words >= max_words:
            continue
        parts.append(f"{speaker}: {resolve_dates_in(sentence, session_time)}")
        quotes.append((index, start, start + len(sentence)))
        words += len(sentence.split())
    participants = list(dict.fromkeys(s for s, _ in turns))
    names = Counter(n for _, text in turns for n in proper_nouns(" x " + text))
    keywords = [w for w, _ in names.most_common(6)] + [w for w, c in freq.most_common(6) if c > 1]
    keywords = list(dict.fromkeys(keywords))[:10]
    header = f"[{format_date(session_time)}] " if session_time else ""
    body = " ".join(parts) or " ".join(f"{s}: {t}" for s, t in turns)[:400]
    return Summary(
        text=f"{header}{', '.join(participants)}. {body}",
        keywords=keywords,
        participants=participants,
        quotes=quotes,
    )
