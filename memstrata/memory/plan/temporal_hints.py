"""Temporal hints in a question, parsed into a time interval, or into an offset from an anchor event.

H-Mem's planner infers "explicit temporal hints ... such as specific dates and
relative time cues" (§3.3, step 1). Offline, these rules do it:

- absolute: "on 8 May 2023", "May 8, 2023", "in May 2023", "in 2022", "2023-05-08", "5/8/2023" (slashes month
  first, as the timestamps' parser reads them, unless the first number cannot be a month), "8.5.2023" (dots day
  first);
- a month without a year ("in June"): the latest such month up to the reference time;
- a season ("in summer 2022", "the summer of 2021", "towards the end of summer 2023", "last winter"): its three
  months, or its first or last month when the question says "early", "the beginning of", "late" or "the end of".
  Seasons are the meteorological ones of the northern hemisphere (spring March-May, summer June-August, autumn
  September-November, winter December-February, named by the year its January falls in); a season without a year
  is the latest one begun by the reference time for "this", the latest one over for "last";
- relative to the reference time: "yesterday", "the day before yesterday", "last week", "this month", "last
  year", "last weekend" (the Saturday and Sunday before, as in a turn's facts), "last Friday", "three weeks ago",
  "a couple of days back";
- relative to an event: "the weekend before the concert", "two days after the wedding", "the week before
  27 June 2023". The parse gives an :class:`Offset` and the anchor's text; the anchor is a date (resolved at
  once) or an event, whose date the caller finds in memory (:func:`resolve`).

The reference time is the query's: ``Context.now``, else the latest memory.

Example:
    >>> from datetime import datetime
    >>> h = parse_hint("What did Ann do the weekend before the concert?", now=datetime(2023, 7, 1))
    >>> h.offset, h.anchor, h.interval
    (Offset(direction=-1, unit='weekend', count=1), 'the concert', None)
    >>> resolve(h, lambda anchor: datetime(2023, 6, 14)).start.date().isoformat()
    '2023-06-10'
    >>> parse_hint("Where did we go last week?", now=datetime(2023, 5, 10)).interval.start.date().isoformat()
    '2023-05-01'
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from memstrata.memory.query import Interval
from memstrata.memory.timeparse import COUNT, NUMBER_WORDS, resolve_relative, weekend_start

_MONTH_NAMES = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTH_NAMES |= {m.lower(): i for i, m in enumerate(calendar.month_abbr) if m} | {"sept": 9}
_MON = "(" + "|".join(sorted(_MONTH_NAMES, key=len, reverse=True)) + r")\.?"
_NUM = rf"({COUNT})"

_ANCHORED = re.compile(
    rf"\b(?:the\s+|a\s+)?(?:{_NUM}\s+)?(day|week|weekend|month|year)s?\s+(before|after)\s+"
    r"(?!that\b|then\b|yesterday\b|tomorrow\b)([^?.!;]+?)\s*(?:[?.!;]|,(?!\s*\d)|$)",
    re.I,
)
_DURATION_ASKED = re.compile(r"\bhow\s+(?:many|long)\s*(?:\w+\s*)?$", re.I)
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MON},?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MON}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I)
_ISO_DAY = re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b")
# 5/8/2023 is read month first, as the timestamps' parser (dateparser) reads it, unless the first number
# cannot be a month; 8.5.2023 is read day first, as European dotted dates are (and as the timestamps are)
_SLASH_DAY = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})\b")
_DOT_DAY = re.compile(r"\b(\d{1,2})\.(\d{1,2})\.(\d{4})\b")
_MONTH_YEAR = re.compile(rf"\b{_MON},?\s+(\d{{4}})\b", re.I)
_YEAR = re.compile(r"\b(?:in|during|of|since)\s+((?:19|20)\d{2})\b|\b((?:19|20)\d{2})\b", re.I)
_MONTH_ONLY = re.compile(rf"\b(?:in|during|last|this)\s+{_MON}(?!\s*\d)\b", re.I)
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}  # first month
_SEASON = re.compile(
    r"\b(?:(early|late|mid|(?:towards?\s+)?the\s+(?:end|beginning|start)\s+of|(?:the\s+)?(?:end|beginning|start)\s+of)"
    r"\s+)?(?:(last|this|the)\s+)?(spring|summer|autumn|fall|winter)(?:\s+of)?(?:,?\s+((?:19|20)\d{2}))?\b",
    re.I,
)
_RELATIVE = re.compile(
    rf"\b(the day before yesterday|yesterday|today|tonight|last night|this morning|(?:last|this|past|previous) "
    rf"(?:week(?:end)?|month|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    rf"{_NUM} (day|week|month|year)s? (?:ago|back))\b",
    re.I,
)


_ASKS_WHEN = re.compile(
    r"^\W*(?:when\b|what (?:date|day|year|month|time)\b|which (?:date|day|year|month)\b|"
    r"how long ago\b|since when\b)",
    re.I,
)


def asks_when(text: str) -> bool:
    """Whether a question asks for a time ("When did...", "What year...", "How long ago...")."""
    return bool(_ASKS_WHEN.search(text))


@dataclass(frozen=True)
class Offset:
    """``count`` units (day, week, weekend, month, year) before (-1) or after (+1) an anchor."""

    direction: int
    unit: str
    count: int = 1


@dataclass(frozen=True)
class TemporalHint:
    """What a question says about time: an interval, or an offset from an anchor still to be dated."""

    phrase: str
    interval: Interval | None = None
    granularity: str = "day"
    offset: Offset | None = None
    anchor: str | None = None


def parse_hint(text: str, *, now: datetime | None) -> TemporalHint | None:
    """The first temporal hint of the text, or ``None``; relative ones need ``now``.

    "How many months before my anniversary did Rachel get engaged?" asks how long lay between two events, not
    what happened a month before one: an offset that ``how many`` (or ``how long``) counts is no hint.
    """
    match = _ANCHORED.search(text)
    if match and _DURATION_ASKED.search(text[: match.start()] + (match[1] or "")):
        match = None
    if match:
        offset = Offset(-1 if match[3].lower() == "before" else 1, match[2].lower(), _count(match[1]))
        anchor = match[4].strip()
        dated = _absolute(anchor)
        if dated is not None:
            shifted = apply_offset(offset, dated.interval.start)  # type: ignore[union-attr]
            if shifted is None:
                return None  # "5000 years before 2020": no date holds it
            return TemporalHint(match[0].strip(" ?.!;,"), shifted, _granularity(offset.unit), offset, anchor)
        return TemporalHint(match[0].strip(" ?.!;,"), None, _granularity(offset.unit), offset, anchor)
    return _season(text, now) or _absolute(text) or _month_only(text, now) or _relative(text, now)


def resolve(hint: TemporalHint, find: Callable[[str], datetime | None]) -> Interval | None:
    """The hint's interval; an anchored one is dated by ``find(anchor)`` (``None`` when the event is unknown)."""
    if hint.interval is not None or hint.offset is None or hint.anchor is None:
        return hint.interval
    when = find(hint.anchor)
    return apply_offset(hint.offset, when) if when is not None else None


def hint_interval(text: str, *, now: datetime | None) -> Interval | None:
    """The interval of the text's hint when it needs no memory (anchored-on-event hints give ``None``)."""
    hint = parse_hint(text, now=now)
    return hint.interval if hint is not None else None


def apply_offset(offset: Offset, anchor: datetime) -> Interval | None:
    """The period ``offset`` away from ``anchor``: "the weekend before" is the last Saturday and Sunday before it;
    ``None`` when it falls outside the dates Python holds (years 1 to 9999: "3000 years ago").
    """
    try:
        return _offset_period(offset, anchor)
    except (OverflowError, ValueError):
        return None


def _offset_period(offset: Offset, anchor: datetime) -> Interval:
    day = anchor.replace(hour=0, minute=0, second=0, microsecond=0)
    sign, n = offset.direction, offset.count
    if offset.unit == "weekend":
        saturday = weekend_start(day, sign, n)
        return Interval(saturday, saturday + timedelta(days=2, microseconds=-1))
    if offset.unit == "day":
        start = day + timedelta(days=sign * n)
        return Interval(start, start + timedelta(days=1, microseconds=-1))
    if offset.unit == "week":
        start = day - timedelta(days=day.weekday()) + timedelta(weeks=sign * n)
        return Interval(start, start + timedelta(days=7, microseconds=-1))
    if offset.unit == "month":
        return _month(_shift_month(day.year, day.month, sign * n))
    return _year(day.year + sign * n)


def _absolute(text: str) -> TemporalHint | None:
    for pattern, order in (
        (_DAY_MONTH_YEAR, "dmy"),
        (_MONTH_DAY_YEAR, "mdy"),
        (_ISO_DAY, "iso"),
        (_SLASH_DAY, "slash"),
        (_DOT_DAY, "dot"),
    ):
        match = pattern.search(text)
        if match:
            day = _day(match, order)
            if day is not None:
                return TemporalHint(match[0], Interval(day, day + timedelta(days=1, microseconds=-1)), "day")
    match = _MONTH_YEAR.search(text)
    if match:
        return TemporalHint(match[0], _month((int(match[2]), _MONTH_NAMES[match[1].lower()])), "month")
    match = _YEAR.search(text)
    if match:
        return TemporalHint(match[0], _year(int(match[1] or match[2])), "year")
    return None


def _season(text: str, now: datetime | None) -> TemporalHint | None:
    """A season with a year, or "last/this <season>" against ``now`` (see the module docstring)."""
    for match in _SEASON.finditer(text):
        part, which, name, year = (match[1] or "").lower(), (match[2] or "").lower(), match[3].lower(), match[4]
        first = _SEASONS[name]
        if year:
            start = (int(year) - 1, 12) if first == 12 else (int(year), first)
        elif which in ("last", "this") and now is not None:
            start = _shift_month(now.year, now.month, -((now.month - first) % 12))  # the latest one begun
            if which == "last" and _month(_shift_month(*start, 2)).end >= now:
                start = _shift_month(*start, -12)  # "last": the latest one over
        else:
            continue  # "spring" alone, or "the summer" with no year: not a time hint
        months = [_shift_month(*start, k) for k in range(3)]
        if part == "early" or "beginning" in part or "start" in part:
            months = months[:1]
        elif part == "late" or "end" in part:
            months = months[-1:]
        elif part == "mid":
            months = months[1:2]
        return TemporalHint(match[0], Interval(_month(months[0]).start, _month(months[-1]).end), "month")
    return None


def _month_only(text: str, now: datetime | None) -> TemporalHint | None:
    match = _MONTH_ONLY.search(text)
    if (
        match is None
        or now is None
        or (match[1].lower() == "may" and not match[0].lower().startswith(("in", "during")))
    ):
        return None  # "may" is also a verb: only "in May" / "during May" count
    month = _MONTH_NAMES[match[1].lower()]
    year = now.year if month <= now.month else now.year - 1
    if match[0].lower().startswith("last") and year == now.year and month == now.month:
        year -= 1
    return TemporalHint(match[0], _month((year, month)), "month")


def _relative(text: str, now: datetime | None) -> TemporalHint | None:
    match = _RELATIVE.search(text)
    if match is None or now is None:
        return None
    phrase = match[0].lower().replace("previous", "last").replace("past", "last")
    ago = re.fullmatch(rf"{_NUM} (day|week|month|year)s? (?:ago|back)", phrase)
    if ago:  # "three weeks ago": that day, week, month or year
        period = apply_offset(Offset(-1, ago[2], _count(ago[1])), now)
        return TemporalHint(match[0], period, ago[2]) if period is not None else None
    words = phrase.split()
    if words[0] in ("last", "this") and words[1] in ("week", "weekend", "month", "year"):
        last = words[0] == "last"
        count = 1 if last or words[1] == "weekend" else 0  # "this week": the reference time's own week
        period = apply_offset(Offset(-1 if last else 1, words[1], count), now)
        return TemporalHint(match[0], period, _granularity(words[1])) if period is not None else None
    when = resolve_relative(phrase, now)  # yesterday, today, last Friday
    if when is None:
        return None
    day = apply_offset(Offset(1, "day", 0), when)
    return TemporalHint(match[0], day, "day") if day is not None else None


def _day(match: re.Match[str], order: str) -> datetime | None:
    if order == "iso":
        y, m, d = int(match[1]), int(match[2]), int(match[3])
    elif order in ("slash", "dot"):
        first, second, y = int(match[1]), int(match[2]), int(match[3])
        y += 2000 if y < 100 else 0
        m, d = (second, first) if order == "dot" or first > 12 else (first, second)
    elif order == "dmy":
        d, m, y = int(match[1]), _MONTH_NAMES[match[2].lower()], int(match[3])
    else:
        m, d, y = _MONTH_NAMES[match[1].lower()], int(match[2]), int(match[3])
    try:
        return datetime(y, m, d)
    except ValueError:
        return None


def _count(word: str | None) -> int:
    if not word:
        return 1
    return int(word) if word.isdigit() else NUMBER_WORDS.get(word.lower(), 1)


def _granularity(unit: str) -> str:
    return "week" if unit == "weekend" else unit


def _shift_month(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    return index // 12, index % 12 + 1


def _month(year_month: tuple[int, int]) -> Interval:
    year, month = year_month
    start = datetime(year, month, 1)
    return Interval(start, start + timedelta(days=calendar.monthrange(year, month)[1], microseconds=-1))


def _year(year: int) -> Interval:
    return Interval(datetime(year, 1, 1), datetime(year + 1, 1, 1) - timedelta(microseconds=1))
