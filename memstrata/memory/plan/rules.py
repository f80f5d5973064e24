"""Offline planning: the deterministic stand-ins for the LLM's planning decisions.

* :func:`decompose_query` splits conjunctions of named entities and multiple questions
  (H-Mem's decomposition, rule-based);
* :func:`predict_scope` labels a sub-query Short/Long/Mixed and extracts temporal hints;
* :func:`coverage` measures how much of a query the evidence covers (the offline
  gate and reflection check);
* :func:`follow_up_query` builds the entity-anchored missing-info query of the question;
* :func:`anchored_follow_up` builds a sub-query's missing-info query anchored on its evidence (H-Mem A.4);
* :func:`dependent_rewrite` fills a dependent sub-query with what its prerequisite found;
* :func:`expand_query` rewrites a query with pseudo-relevance feedback terms.

Example:
    >>> [s.text for s in decompose_query("What do Ann and Bob like to cook?")]
    ['What do Ann and Bob like to cook?', 'What do Ann like to cook?', 'What do Bob like to cook?']
"""

from __future__ import annotations

import calendar
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from memstrata.context import default
from memstrata.memory.plan.settings import RetrievalSettings
from memstrata.memory.plan.temporal_hints import hint_interval
from memstrata.memory.query import Hit, Interval, Query, Scope
from memstrata.memory.text import STOPWORDS, content_words, proper_nouns, words_in
from memstrata.memory.timeparse import RELATIVE_PATTERN, resolve_relative

_QUESTION_WORDS = frozenset(
    [
        "what",
        "when",
        "where",
        "who",
        "whom",
        "whose",
        "which",
        "why",
        "how",
        "did",
        "does",
        "do",
        "is",
        "are",
        "was",
        "were",
        "has",
        "have",
    ]
)
_NAME_PAIR = re.compile(r"\b([A-Z][\w'-]+)((?:, [A-Z][\w'-]+)*),? (?:and|&) ([A-Z][\w'-]+)\b")
_LONG_CUES = re.compile(
    r"\b(usually|generally|always|often|personality|traits?|likely|would|prefer\w*|hobb(?:y|ies)|interests?|"
    r"kind of|type of|values?|feel about|think about|in general|favou?rite|tend)\b",
    re.I,
)
_SHORT_CUES = re.compile(r"\b(when|what time|which day|what date|how long ago|yesterday|today|recently)\b", re.I)
_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m} | {
    m.lower(): i for i, m in enumerate(calendar.month_abbr) if m
}
_DATE = re.compile(
    r"\b(?:(\d{1,2})(?:st|nd|rd|th)? )?("
    + "|".join(sorted(_MONTHS, key=len, reverse=True))
    + r")\.?(?: (\d{1,2})(?:st|nd|rd|th)?)?,?(?: (\d{4}))?\b|\b(19\d{2}|20\d{2})\b",
    re.I,
)


def decompose_query(query: str, *, max_parts: int = default("max_sub_queries")) -> list[Query]:
    """The original query first, then one sub-query per named entity of a conjunction or per question."""
    query = query.strip()
    parts: list[str] = [query]
    questions = [q.strip() for q in re.split(r"(?<=\?)\s+", query) if q.strip()]
    if len(questions) > 1:
        parts += questions
    for q in questions:
        match = _NAME_PAIR.search(q)
        if match:
            names = [match.group(1), *re.findall(r"[A-Z][\w'-]+", match.group(2) or ""), match.group(3)]
            parts += [q[: match.start()] + name + q[match.end() :] for name in names]
    unique = list(dict.fromkeys(parts))[:max_parts]
    return [Query(id=f"q{i}", text=t) for i, t in enumerate(unique)]


def predict_scope(text: str, *, now: datetime | None) -> tuple[Scope, Interval | None]:
    """Short/Long/Mixed by cue words, plus the temporal hint the text names."""
    hint = temporal_hint(text, now=now)
    if hint is not None or _SHORT_CUES.search(text):
        return "Short", hint
    if _LONG_CUES.search(text):
        return "Long", hint
    return "Mixed", hint


def temporal_hint(text: str, *, now: datetime | None) -> Interval | None:
    """An explicit date, month or year in the text, or a relative one resolved against ``now``."""
    parsed = hint_interval(text, now=now)  # memstrata.memory.plan.temporal_hints: the tree's window parser
    if parsed is not None:
        return parsed
    match = _DATE.search(text)
    if match:
        return _interval(match)
    rel = RELATIVE_PATTERN.search(text)
    if rel and now is not None:
        when = resolve_relative(rel.group(0), now)
        if when is not None:
            span = timedelta(days=7 if "week" in rel.group(0).lower() else 31 if "month" in rel.group(0).lower() else 1)
            return Interval(when - span / 2, when + span / 2)
    return None


def _interval(match: re.Match[str]) -> Interval | None:
    if match.group(5):
        whole = int(match.group(5))
        return Interval(datetime(whole, 1, 1), datetime(whole, 12, 31, 23, 59))
    month = _MONTHS[match.group(2).lower()]
    day = match.group(1) or match.group(3)
    year = match.group(4)
    if not year:
        return None  # a month without a year is too vague to anchor
    y = int(year)
    if day and 1 <= int(day) <= calendar.monthrange(y, month)[1]:
        d = datetime(y, month, int(day))
        return Interval(d, d + timedelta(hours=23, minutes=59))
    return Interval(datetime(y, month, 1), datetime(y, month, calendar.monthrange(y, month)[1], 23, 59))


def query_terms(text: str) -> list[str]:
    """Content words of a query, without question words."""
    return [w for w in content_words(text) if w not in _QUESTION_WORDS]


def query_entities(text: str, known: Iterable[str] = ()) -> list[str]:
    """Names in the query: capitalized words (any position) that are not question words, plus known speakers."""
    words = {w.strip("?,.!'s") for w in re.findall(r"[A-Z][\w'-]+", text)}
    names = {w for w in words if w and w.lower() not in _QUESTION_WORDS and w.lower() not in STOPWORDS}
    lowered = text.lower()
    names |= {k for k in known if k.lower() in lowered}
    return sorted(names)


def coverage(query: str, texts: Sequence[str]) -> float:
    """Share of the query's content words (prefix-matched, so plurals count) found in the texts."""
    terms = set(query_terms(query))
    if not terms:
        return 1.0
    haystack = words_in(texts)
    found = sum(1 for t in terms if any(h.startswith(t[:5]) for h in haystack))
    return found / len(terms)


def missing_terms(query: str, texts: Sequence[str]) -> list[str]:
    """The query's content words the texts do not contain."""
    haystack = words_in(texts)
    return [t for t in dict.fromkeys(query_terms(query)) if not any(h.startswith(t[:5]) for h in haystack)]


def follow_up_query(query: str, texts: Sequence[str], *, speakers: Iterable[str] = ()) -> str | None:
    """The missing-info query: the query's entities plus the terms evidence has not covered yet."""
    missing = missing_terms(query, texts)
    if not missing:
        return None
    entities = query_entities(query, speakers)
    return " ".join(dict.fromkeys([*entities, *missing]))


def expand_query(query: str, texts: Sequence[str], *, terms: int = RetrievalSettings.rewrite_terms) -> str:
    """Pseudo-relevance feedback: add the evidence's most telling new names and words."""
    have = set(query_terms(query))
    names = Counter(n for t in texts for n in proper_nouns(" x " + t) if n.lower() not in have)
    words = Counter(w for t in texts for w in dict.fromkeys(content_words(t)) if w not in have)  # ordered ties
    extra = [n for n, _ in names.most_common(terms)] + [w for w, c in words.most_common(terms * 2) if c > 1]
    extra = list(dict.fromkeys(extra))[:terms]
    return f"{query} {' '.join(extra)}".strip() if extra else query


def evidence_anchors(top: Sequence[Hit], *, limit: int = RetrievalSettings.anchor_names) -> list[str]:
    """The concrete anchors of the best evidence: its speakers and the names it mentions, best first."""
    names: list[str] = []
    for hit in top:
        names += [hit.speaker] if hit.speaker else []
        names += proper_nouns(" x " + hit.text)
    return list(dict.fromkeys(n for n in names if n.lower() not in _QUESTION_WORDS))[:limit]


def anchored_follow_up(
    query: str, texts: Sequence[str], top: Sequence[Hit], *, names: int = RetrievalSettings.anchor_names
) -> str | None:
    """H-Mem's missing-info query, offline: the slot the evidence lacks, anchored on what the evidence found.

    The slot is the query's words that the evidence does not contain; the anchors
    are the names (speakers and mentioned names) of the best evidence. Its dates
    are not a time hint: the missing piece is usually said in other sessions.
    ``None`` when nothing is missing.

    Example:
        >>> top = [
        ...     Hit(
        ...         kind="turn",
        ...         unit_id="D1:2",
        ...         conversation_id="c",
        ...         score=1.0,
        ...         speaker="Ann",
        ...         text="I adopted a dog from the Porto shelter.",
        ...         time="8 May 2023",
        ...     )
        ... ]
        >>> anchored_follow_up("What breed is the dog Ann adopted?", [top[0].text], top)
        'Ann Porto breed'
    """
    missing = missing_terms(query, texts)
    if not missing:
        return None
    anchors = evidence_anchors(top, limit=names)
    have = {a.lower() for a in anchors}
    return " ".join(dict.fromkeys([*anchors, *(m for m in missing if m not in have)]))


def has_anchor(query: str, texts: Sequence[str]) -> bool:
    """Whether a follow-up query names something the evidence contains (a name or a content word)."""
    haystack = words_in(texts)
    words = set(content_words(query)) - set(_QUESTION_WORDS)
    return bool(words & haystack)


def dependent_rewrite(query: str, found: Sequence[Hit], *, names: int = RetrievalSettings.anchor_names) -> str:
    """A dependent sub-query rewritten, offline, with the names and dates its prerequisite's best evidence found.

    Example:
        >>> top = [
        ...     Hit(
        ...         kind="turn",
        ...         unit_id="D1:2",
        ...         conversation_id="c",
        ...         score=1.0,
        ...         speaker="Ann",
        ...         text="We moved to Porto.",
        ...         time="8 May 2023",
        ...     )
        ... ]
        >>> dependent_rewrite("What is the weather like there?", top)
        'What is the weather like there? Ann Porto 8 May 2023'
    """
    extra = [a for a in evidence_anchors(found, limit=names) if a.lower() not in query.lower()]
    dates = list(dict.fromkeys(h.time for h in found if h.time))[:1]
    return " ".join([query, *extra, *dates]).strip()
