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

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memstrata.memory.timeparse import RELATIVE_PATTERN, describe_resolved, format_date

STOPWORDS = frozenset(
    "a an the and or but if then so to of in on at for with from by about as is are was were be been being "
    "i me my mine you your yours he him his she her hers it its we us our they them their this that these those "
    "do does did done have has had having not no yes just really very too also what which who whom when where why "
    "how all any some can could would should will shall may might must there here up down out over again more most "
    "such only own same than now oh hey hi hello wow yeah ok okay thanks thank lol haha im i'm it's that's don't "
    "gonna like get got go going one much many well good great nice sure sounds awesome amazing love glad".split()
)
# Split after . ! ? but not after common abbreviations ("Ms. Okafor").
_SENTENCE = re.compile(r"(?<=[.!?])(?<!\bMr\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<!\bMrs\.)(?<!\bvs\.)\s+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+|\d[\d,.:/]*")
_NUMBER = re.compile(r"\d")
_PLEASANTRY = re.compile(r"^(hey|hi|hello|thanks|thank you|bye|see you|take care|good to see|wow|haha|lol)\b", re.I)


@dataclass(frozen=True)
class Summary:
    """An extractive summary with the keywords and participants it found."""

    text: str
    keywords: list[str]
    participants: list[str]


def content_words(text: str) -> list[str]:
    """Lower-cased words that are not stopwords."""
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in STOPWORDS and len(w) > 2]


def proper_nouns(text: str) -> list[str]:
    """Capitalized words that do not start a sentence (names, places, titles)."""
    found = []
    for sentence in _SENTENCE.split(text):
        words = sentence.split()
        for w in words[1:]:
            clean = w.strip(".,!?;:\"'()[]")
            if len(clean) > 1 and clean[0].isupper() and clean.lower() not in STOPWORDS and clean != "I":
                found.append(clean)
    return found


def resolve_dates_in(text: str, anchor: datetime | None) -> str:
    """Append the absolute date after each relative expression."""
    if anchor is None:
        return text

    def repl(match: re.Match[str]) -> str:
        label = describe_resolved(match.group(0), anchor)
        return f"{match.group(0)} ({label})" if label else match.group(0)

    return RELATIVE_PATTERN.sub(repl, text)


def _score(sentence: str, freq: Counter[str]) -> float:
    words = content_words(sentence)
    if not words or _PLEASANTRY.match(sentence.strip()) and len(words) < 4:
        return 0.0
    detail = 2.0 * len(proper_nouns(" x " + sentence)) + 1.5 * bool(_NUMBER.search(sentence))
    detail += 2.0 * bool(RELATIVE_PATTERN.search(sentence))
    return detail + sum(freq[w] for w in set(words)) / (len(set(words)) ** 0.5)


def extractive_summary(
    turns: Sequence[tuple[str, str]], session_time: datetime | None, *, max_sentences: int = 5, max_words: int = 90
) -> Summary:
    """Summarize ``(speaker, text)`` turns of one episode."""
    freq = Counter(w for _, text in turns for w in set(content_words(text)))
    candidates = []
    for order, (speaker, text) in enumerate(turns):
        for sentence in _SENTENCE.split(text.strip()):
            if sentence:
                candidates.append((_score(sentence, freq), len(candidates), speaker, sentence))
    chosen = sorted(sorted(candidates, key=lambda c: -c[0])[:max_sentences], key=lambda c: c[1])
    parts, words = [], 0
    for score, _, speaker, sentence in chosen:
        if score <= 0 or words >= max_words:
            continue
        parts.append(f"{speaker}: {resolve_dates_in(sentence, session_time)}")
        words += len(sentence.split())
    participants = list(dict.fromkeys(s for s, _ in turns))
    names = Counter(n for _, text in turns for n in proper_nouns(" x " + text))
    keywords = [w for w, _ in names.most_common(6)] + [w for w, c in freq.most_common(6) if c > 1]
    keywords = list(dict.fromkeys(keywords))[:10]
    header = f"[{format_date(session_time)}] " if session_time else ""
    body = " ".join(parts) or " ".join(f"{s}: {t}" for s, t in turns)[:400]
    return Summary(text=f"{header}{', '.join(participants)}. {body}", keywords=keywords, participants=participants)
