"""A record's initial importance, 1-10 (HMO §3.1 and Appendix A), without a model.

With a model, :mod:`memstrata.nodes.ingest.tiers` asks it for the score with our own wording of HMO's rubric
(behavioural alignment, reasoning utility, contextual persistence), batched, with a schema and this heuristic as
the fallback. Offline, this module scores the same three dimensions from what the text shows, and nothing more:

- **behavioural alignment** (who the speaker is): first-person statements of preference, habit or feeling, and
  emotional weight (a small lexicon of strong feeling words);
- **reasoning utility** (ground truth for later): named entities and dates, the facts the episode yielded;
- **contextual persistence** (what will come up again): commitments and plans in the first person ("I will",
  "I'm going to", "we decided") and novelty, one minus the episode's best cosine to the user's memory so far
  (a record that repeats what is stored adds little).

Greetings and filler count against a record. Each signal is in [0, 1]; the score is
``1 + 9 * (0.25 novelty + 0.20 entities + 0.15 dates + 0.20 plans + 0.20 feeling)``, less the filler share.
The weights were set by hand from the rubric, not tuned on any data set.

Example:
    >>> s = signals(["Ann: I'm so proud, I finally signed the lease in Lisbon on 3 March!"], novelty=0.8)
    >>> offline_importance(s) > offline_importance(signals(["Ann: hi!", "Bo: hey, thanks"], novelty=0.1))
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memstrata.memory.text import PLEASANTRY
from memstrata.memory.timeparse import RELATIVE_PATTERN

_PLANS = re.compile(
    r"\b(?:i|we)(?:'ll| will| shall|'m going to| am going to|'re going to| are going to| plan(?:ned)? to| decided"
    r"| promise[d]?| have to| need to| want to| hope to| intend to| am about to)\b|\b(?:goal|deadline|appointment|"
    r"interview|wedding|exam|trip|launch)\b",
    re.I,
)
_FEELING = re.compile(
    r"\b(?:love[sd]?|hate[sd]?|proud|afraid|scared|terrified|excited|thrilled|devastated|heartbroken|grief|"
    r"grieving|anxious|worried|lonely|overwhelmed|grateful|furious|angry|ashamed|miss(?:ed)?|cried|crying|"
    r"passionate|dream(?:s|ed)?|fear)\b",
    re.I,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|my|me|we|our)\b", re.I)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*")
_DATE = re.compile(
    r"\b(?:\d{1,2}(?:st|nd|rd|th)?\s+(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*|"
    r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\s+\d{1,2}|\d{4}-\d{2}-\d{2}|"
    r"(?:19|20)\d{2}|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.I,
)
_SMALL_TALK = re.compile(r"^(?:ok|okay|cool|nice|sure|yeah|yes|yep|lol|haha|great|same|right)\b", re.I)
_CALENDAR = frozenset(
    [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
    ]
)
WEIGHTS = {"novelty": 0.25, "entities": 0.20, "dates": 0.15, "plans": 0.20, "feeling": 0.20}


@dataclass(frozen=True)
class Signals:
    """What the offline score reads of one record, each in [0, 1]."""

    novelty: float
    entities: float
    dates: float
    plans: float
    feeling: float
    filler: float


def signals(lines: Sequence[str], *, novelty: float, speakers: Sequence[str] = ()) -> Signals:
    """The signals of a record's rendered turns (``"Speaker: text"``); ``novelty`` is computed by the caller.

    Names are capitalised words not at a sentence start, other than the speakers' own names, months and weekdays.
    """
    texts = [line.split(": ", 1)[-1] for line in lines]
    joined = " ".join(texts)
    known = {s.casefold() for s in speakers}
    names = {
        m.group(0)
        for t in texts
        for m in _NAME.finditer(t)
        if m.group(0).casefold() not in known and m.group(0).casefold() not in _CALENDAR
    }
    dates = len(_DATE.findall(joined)) + len(RELATIVE_PATTERN.findall(joined))
    plans = len(_PLANS.findall(joined))
    feeling = len(_FEELING.findall(joined)) + sum(1 for t in texts if _FIRST_PERSON.search(t) and "!" in t)
    filler = sum(
        1 for t in texts if (PLEASANTRY.match(t.strip()) or _SMALL_TALK.match(t.strip())) and len(t.split()) <= 6
    )
    return Signals(
        novelty=_unit(novelty),
        entities=min(1.0, len(names) / 4),
        dates=min(1.0, dates / 2),
        plans=min(1.0, plans / 2),
        feeling=min(1.0, feeling / 3),
        filler=filler / max(1, len(texts)),
    )


def offline_importance(s: Signals) -> float:
    """The 1-10 score of the signals (see the module docstring)."""
    value = sum(weight * getattr(s, name) for name, weight in WEIGHTS.items()) - 0.3 * s.filler
    return round(1.0 + 9.0 * _unit(value), 2)


def _unit(x: float) -> float:
    return min(1.0, max(0.0, float(x)))
