"""Timestamps in the many shapes conversations carry them, plus relative-date resolution.

Fast paths handle ISO 8601, LoCoMo's ``"1:56 pm on 8 May, 2023"`` and
``"29.12.2023, 22:42:04"``; anything else goes to ``dateparser``. The original
string is always kept by the caller; an unparseable one yields ``None``.

Example:
    >>> parse_timestamp("1:56 pm on 8 May, 2023")
    datetime.datetime(2023, 5, 8, 13, 56)
    >>> resolve_relative("yesterday", datetime(2023, 5, 8)).date()
    datetime.date(2023, 5, 7)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_FORMATS = (
    "%I:%M %p on %d %B, %Y",
    "%I:%M %p on %d %b, %Y",
    "%d.%m.%Y, %H:%M:%S",
    "%d.%m.%Y %H:%M:%S",
    "%d.%m.%Y, %H:%M",
    "%d.%m.%Y",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y/%m/%d %H:%M:%S",
    "%d %B %Y",
    "%d %B, %Y",
    "%B %d, %Y",
)


def parse_timestamp(raw: object) -> datetime | None:
    """Parse a timestamp; return a naive datetime (UTC if it had an offset) or ``None``."""
    if raw is None:
        return None
    if isinstance(raw, datetime):
        return _naive(raw)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        try:
            return _naive(datetime.fromtimestamp(float(raw), tz=UTC))
        except (ValueError, OverflowError, OSError):  # outside what a datetime can hold: unparseable
            return None
    text = str(raw).strip()
    if not text:
        return None
    try:
        return _naive(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    for fmt in _FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    return _dateparser(text)


def _dateparser(text: str) -> datetime | None:
    import dateparser

    # A stray word must not silently become "now": relative parsing is off here.
    parsed = dateparser.parse(
        text,
        settings={"RETURN_AS_TIMEZONE_AWARE": False, "PREFER_DAY_OF_MONTH": "first", "STRICT_PARSING": False},
    )
    if parsed is None or not re.search(r"\d", text):
        return None
    return _naive(parsed)


def _naive(value: datetime) -> datetime:
    if value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
# counts people write in words ("a couple of days ago"); shared with the question hints
NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "few": 3,
    "a few": 3,
    "several": 3,
    "couple of": 2,
    "a couple of": 2,
    "couple": 2,
    "a couple": 2,
}
_UNIT_DAYS = {"day": 1, "week": 7, "fortnight": 14, "month": 30, "year": 365}
# a count as a regex: digits or any of NUMBER_WORDS, the longest first
COUNT = r"(?:\d+|" + "|".join(sorted(map(re.escape, NUMBER_WORDS), key=len, reverse=True)) + ")"

RELATIVE_PATTERN = re.compile(
    r"\b(the day before yesterday|the day after tomorrow|yesterday|today|tonight|this morning|last night|tomorrow|"
    r"over the weekend|(?:this )?past weekend|"
    r"(?:last|this|next|past) (?:week(?:end)?|month|year|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    rf"{COUNT} (?:day|week|fortnight|month|year)s? (?:ago|back))\b",
    re.IGNORECASE,
)


# A time told in a text, beyond the relative phrases above: a year, a month or weekday name (capitalised, so
# the verb "may" is not one), "last summer", "ago", "since", "recently", "for 3 years", "a few weeks".
TIME_MENTION = re.compile(
    r"\b(?:19|20)\d{2}\b|\b(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December|Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)\b|"
    r"\b(?i:(?:last|next|this|past) (?:year|month|week|weekend|summer|winter|spring|fall|autumn|night)|ago|since|"
    r"recently|\d+ (?:days?|weeks?|months?|years?)|"
    r"(?:a|one|two|three|four|five|six|few|couple of) (?:days?|weeks?|months?|years?))\b"
)


def mentions_time(text: str) -> bool:
    """Whether a text tells when something happened (a relative phrase, a date, a duration)."""
    return bool(RELATIVE_PATTERN.search(text) or TIME_MENTION.search(text))


def weekend_start(day: datetime, direction: int, count: int = 1) -> datetime:
    """The Saturday of the ``count``-th weekend before (``direction`` -1) or after (+1) ``day``'s date.

    "Last weekend" said on a Wednesday is the Saturday four days before; said on a Sunday, the one eight
    days before (the weekend under way is "this weekend"). "The weekend after" a Saturday is the next one.
    """
    day = day.replace(hour=0, minute=0, second=0, microsecond=0)
    if direction < 0:
        back = (day.weekday() - 5) % 7 or 7
        if day.weekday() == 6:  # Sunday: the weekend under way is not "last weekend"
            back += 7
        return day - timedelta(days=back) - timedelta(weeks=count - 1)
    return day + timedelta(days=(5 - day.weekday()) % 7 or 7) + timedelta(weeks=count - 1)


def resolve_relative(expression: str, anchor: datetime) -> datetime | None:
    """Resolve a relative date expression against the session time ``anchor``.

    A weekend resolves to its Saturday: "last weekend" (also "this past weekend", and "over the weekend" said
    on a weekday) is the weekend before the anchor's, "over the weekend" said at the weekend is that weekend,
    and "this weekend" is the coming one (the one under way at the weekend). Counts may be words ("a couple
    of", "several" = 3), and "back" reads as "ago".
    """
    expr = " ".join(expression.lower().split())
    fixed = {
        "yesterday": -1,
        "last night": -1,
        "today": 0,
        "tonight": 0,
        "this morning": 0,
        "tomorrow": 1,
        "the day before yesterday": -2,
        "the day after tomorrow": 2,
    }
    if expr in fixed:
        return anchor + timedelta(days=fixed[expr])
    if expr in ("last weekend", "past weekend", "this past weekend", "over the weekend", "this weekend"):
        day = anchor.replace(hour=0, minute=0, second=0, microsecond=0)
        if anchor.weekday() >= 5 and expr in ("this weekend", "over the weekend"):
            saturday = day - timedelta(days=anchor.weekday() - 5)  # the weekend under way
        else:
            saturday = weekend_start(anchor, 1 if expr == "this weekend" else -1)
        return saturday.replace(hour=anchor.hour, minute=anchor.minute, second=anchor.second)
    ago = re.fullmatch(r"(.+?) (day|week|fortnight|month|year)s? (?:ago|back)", expr)
    if ago:
        count = int(ago.group(1)) if ago.group(1).isdigit() else NUMBER_WORDS.get(ago.group(1), 1)
        try:
            return anchor - timedelta(days=count * _UNIT_DAYS[ago.group(2)])
        except OverflowError:  # "3000 years ago": before year 1, no date holds it
            return None
    rel = re.fullmatch(r"(last|this|next|past) (\w+)", expr)
    if not rel:
        return None
    direction, unit = rel.groups()
    sign = {"last": -1, "past": -1, "this": 0, "next": 1}[direction]
    if unit in _WEEKDAYS:
        delta = _WEEKDAYS.index(unit) - anchor.weekday()
        if sign < 0 and delta >= 0:
            delta -= 7
        if sign > 0 and delta <= 0:
            delta += 7
        return anchor + timedelta(days=delta)
    if unit == "weekend":  # "next weekend"
        return weekend_start(anchor, 1).replace(hour=anchor.hour, minute=anchor.minute, second=anchor.second)
    return anchor + timedelta(days=sign * _UNIT_DAYS[unit])


def describe_resolved(expression: str, anchor: datetime) -> str | None:
    """A human label for a resolved expression, at the granularity it names."""
    when = resolve_relative(expression, anchor)
    if when is None:
        return None
    expr = expression.lower()
    if "year" in expr:
        return str(when.year)
    if "month" in expr:
        return when.strftime("%B %Y")
    if "weekend" in expr:
        return f"the weekend of {when.strftime('%d %B %Y').lstrip('0')}"
    if "week" in expr and not re.search(r"\b(?:ago|back)\b", expr):
        return f"the week of {when.strftime('%d %B %Y').lstrip('0')}"
    return when.strftime("%d %B %Y").lstrip("0")


def format_date(value: datetime | None) -> str:
    """``8 May 2023`` style, or an empty string."""
    return value.strftime("%d %B %Y").lstrip("0") if value else ""
