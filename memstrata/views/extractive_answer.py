"""A short extractive answer for the CLI: the clause of the best turn that holds what was asked.

This is no reader model. It looks at the question's type ("when" wants a
date, "how many"/"how much" a number, "where" a place) and returns the first
clause of the best-ranked turn that holds such a thing, with a relative date
resolved against the turn's session date ("two weeks ago" said on 14 April 2024
becomes "two weeks ago (31 March 2024)"). For other questions it returns the
best turn's first clause that shares a word with the question. It returns
``None`` when nothing fits; callers label its output as extractive.

Example:
    >>> from datetime import datetime
    >>> extractive_answer(
    ...     "When did Tom run the half marathon?",
    ...     [("Tom: I ran the Brighton half marathon two weeks ago!", datetime(2024, 4, 14))],
    ... )
    'I ran the Brighton half marathon two weeks ago (31 March 2024)!'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from memstrata.memory.text import content_words, resolve_dates_in
from memstrata.memory.timeparse import RELATIVE_PATTERN

_CLAUSE = re.compile(r"(?<=[.!?;])\s+|,\s+(?=(?:and|but|so|because)\b)")
_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*"
_DATE = re.compile(
    rf"\b(\d{{1,2}}(?:st|nd|rd|th)? {_MONTH}|{_MONTH} \d{{1,2}}|(?:19|20)\d\d|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend)\b",
    re.I,
)
_NUMBER = re.compile(r"\b(\d[\d,.]*|one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|dozen)\b", re.I)
_PLACE = re.compile(r"\b(?:in|at|to|from|near) (?:the )?[A-Z][\w'-]+")


def question_type(question: str) -> str:
    """``date``, ``number``, ``place`` or ``other``."""
    q = question.lower()
    if q.startswith("when") or "what date" in q or "which day" in q or "what year" in q:
        return "date"
    if q.startswith(("how many", "how much", "how long", "how old")):
        return "number"
    if q.startswith("where"):
        return "place"
    return "other"


def _fits(clause: str, kind: str, question_words: set[str]) -> bool:
    if kind == "date":
        return bool(_DATE.search(clause) or RELATIVE_PATTERN.search(clause))
    if kind == "number":
        return bool(_NUMBER.search(clause))
    if kind == "place":
        return bool(_PLACE.search(clause))
    return bool(question_words & set(content_words(clause)))


def extractive_answer(question: str, turns: Sequence[tuple[str, datetime | None]], *, top: int = 3) -> str | None:
    """The best clause of the best ``top`` turns (``"speaker: text"``, session date), or ``None``."""
    kind = question_type(question)
    words = set(content_words(question))
    for text, when in turns[:top]:
        body = text.split(": ", 1)[-1]
        for clause in _CLAUSE.split(body):
            if clause.strip() and _fits(clause, kind, words):
                return resolve_dates_in(clause.strip(), when)
    return None
