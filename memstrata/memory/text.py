"""General text utilities shared by ingestion and retrieval: stopwords, words, names, sentences, dates.

Example:
    >>> content_words("I went to Porto with Bob!")
    ['went', 'porto', 'bob']
    >>> proper_nouns("Yesterday I met Bob in Porto.")
    ['Bob', 'Porto']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache

from memstrata.memory.timeparse import RELATIVE_PATTERN, describe_resolved

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "so",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "with",
        "from",
        "by",
        "about",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "i",
        "me",
        "my",
        "mine",
        "you",
        "your",
        "yours",
        "he",
        "him",
        "his",
        "she",
        "her",
        "hers",
        "it",
        "its",
        "we",
        "us",
        "our",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "do",
        "does",
        "did",
        "done",
        "have",
        "has",
        "had",
        "having",
        "not",
        "no",
        "yes",
        "just",
        "really",
        "very",
        "too",
        "also",
        "what",
        "which",
        "who",
        "whom",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "some",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "there",
        "here",
        "up",
        "down",
        "out",
        "over",
        "again",
        "more",
        "most",
        "such",
        "only",
        "own",
        "same",
        "than",
        "now",
        "oh",
        "hey",
        "hi",
        "hello",
        "wow",
        "yeah",
        "ok",
        "okay",
        "thanks",
        "thank",
        "lol",
        "haha",
        "im",
        "i'm",
        "it's",
        "that's",
        "don't",
        "gonna",
        "like",
        "get",
        "got",
        "go",
        "going",
        "one",
        "much",
        "many",
        "well",
        "good",
        "great",
        "nice",
        "sure",
        "sounds",
        "awesome",
        "amazing",
        "love",
        "glad",
    ]
)
# Split after . ! ? but not after common abbreviations ("Ms. Okafor").
SENTENCE = re.compile(r"(?<=[.!?])(?<!\bMr\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<!\bMrs\.)(?<!\bvs\.)\s+")
WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+|\d[\d,.:/]*")
NUMBER = re.compile(r"\d")
PLEASANTRY = re.compile(r"^(hey|hi|hello|thanks|thank you|bye|see you|take care|good to see|wow|haha|lol)\b", re.I)


def split_at(pattern: re.Pattern[str], text: str, start: int = 0) -> list[tuple[int, str]]:
    """``pattern.split(text)`` (a pattern without groups) with where each piece starts, plus ``start``.

    Example:
        >>> split_at(SENTENCE, "Hi. I moved.")
        [(0, 'Hi.'), (4, 'I moved.')]
    """
    pieces, last = [], 0
    for m in pattern.finditer(text):
        pieces.append((start + last, text[last : m.start()]))
        last = m.end()
    pieces.append((start + last, text[last:]))
    return pieces


def content_words(text: str) -> list[str]:
    """Lower-cased words that are not stopwords."""
    return [w.lower() for w in WORD.findall(text) if w.lower() not in STOPWORDS and len(w) > 2]


@lru_cache(maxsize=4096)
def word_set(text: str) -> frozenset[str]:
    """The set of :func:`content_words` of ``text``, memoized: the retrieval nodes ask it of the same evidence
    texts again and again (the gate, the follow-up and reflection each measure what the evidence covers).
    """
    return frozenset(content_words(text))


def words_in(texts: Iterable[str]) -> set[str]:
    """The content words of all ``texts`` together (the same set as of their join, since no word spans a space).

    Example:
        >>> sorted(words_in(["I went to Porto.", "Bob went too"]))
        ['bob', 'porto', 'went']
    """
    out: set[str] = set()
    for text in texts:
        out |= word_set(text)
    return out


def proper_nouns(text: str) -> list[str]:
    """Capitalized words that do not start a sentence (names, places, titles)."""
    found = []
    for sentence in SENTENCE.split(text):
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
