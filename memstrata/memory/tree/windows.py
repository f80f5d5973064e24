"""H-Mem's tree levels: each level's time window (beta) and join threshold (alpha), and the active levels.

The leaves are the day level (HyMem's Level-1 event summaries, one per verbatim
episode, dated by their session); above them sit week, month and year nodes.
A window is named by a key: ``2023-05-08`` (day), ``2023-W19`` (ISO week),
``2023-05`` (month), ``2023`` (year). Leaves without a time have no calendar
window: their day window is their session (``session 3``) and every upper
window is ``untimed``, so the tree consolidates them by meaning in session
order and never invents a date.

Example:
    >>> from datetime import datetime
    >>> window_key("week", datetime(2023, 5, 8)), window_key("month", datetime(2023, 5, 8))
    ('2023-W19', '2023-05')
    >>> window_span("2023-W19")[0].date().isoformat()
    '2023-05-08'
    >>> active_levels(timedelta(days=3)), active_levels(timedelta(days=20))
    (('day', 'week'), ('day', 'week', 'month'))
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from memstrata.memory.tree.settings import TreeSettings

LEVELS = ("day", "week", "month", "year")
UPPER = LEVELS[1:]
UNTIMED = "untimed"


@dataclass(frozen=True)
class TreeLevel:
    """One upper level: its name (the window size beta) and its similarity threshold alpha."""

    name: str
    alpha: float


def tree_levels(alphas: Sequence[float] = TreeSettings.alphas) -> list[TreeLevel]:
    """The upper levels with their thresholds, week first."""
    if len(alphas) != len(UPPER) or not all(0.0 <= a <= 1.0 for a in alphas):
        msg = f"tree thresholds: give {len(UPPER)} values in [0, 1] for {UPPER}, got {list(alphas)}"
        raise ValueError(msg)
    return [TreeLevel(name, float(a)) for name, a in zip(UPPER, alphas, strict=True)]


def active_levels(age: timedelta | None) -> tuple[str, ...]:
    """The levels a history of this age uses: under 7 days day and week, up to 30 days month too, else all.

    ``None`` (no timestamps at all) has no age; it gets day and week, the smallest tree.
    """
    if age is None or age < timedelta(days=7):
        return LEVELS[:2]
    if age <= timedelta(days=30):
        return LEVELS[:3]
    return LEVELS


def window_key(level: str, when: datetime | None, *, session_id: str = "") -> str:
    """The key of the level's window holding ``when`` (untimed: the session at day level, else ``untimed``)."""
    if when is None:
        return f"session {session_id}" if level == "day" else UNTIMED
    if level == "day":
        return when.date().isoformat()
    if level == "week":
        year, week, _ = when.isocalendar()
        return f"{year}-W{week:02d}"
    if level == "month":
        return f"{when.year}-{when.month:02d}"
    if level == "year":
        return str(when.year)
    msg = f"unknown tree level {level!r}; levels are {LEVELS}"
    raise ValueError(msg)


_DAY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_YEAR = re.compile(r"^(\d{4})$")


def window_level(key: str) -> str | None:
    """The level a window key names (``None`` for untimed windows)."""
    for level, pattern in (("day", _DAY), ("week", _WEEK), ("month", _MONTH), ("year", _YEAR)):
        if pattern.match(key):
            return level
    return None


def window_span(key: str) -> tuple[datetime, datetime]:
    """First and last moment of a calendar window; a clear error for anything else."""
    if m := _DAY.match(key):
        start = datetime(int(m[1]), int(m[2]), int(m[3]))
        return start, start + timedelta(days=1, microseconds=-1)
    if m := _WEEK.match(key):
        start = datetime.fromisocalendar(int(m[1]), int(m[2]), 1)
        return start, start + timedelta(days=7, microseconds=-1)
    if m := _MONTH.match(key):
        year, month = int(m[1]), int(m[2])
        start = datetime(year, month, 1)
        return start, start + timedelta(days=calendar.monthrange(year, month)[1], microseconds=-1)
    if m := _YEAR.match(key):
        return datetime(int(m[1]), 1, 1), datetime(int(m[1]) + 1, 1, 1) - timedelta(microseconds=1)
    msg = f"{key!r} is not a window: use 2023-05-08 (day), 2023-W19 (week), 2023-05 (month) or 2023 (year)"
    raise ValueError(msg)


def level_for_span(start: datetime, end: datetime) -> str:
    """A hint's granularity: the smallest level whose window is at least as long as the interval, except that
    a span of several months shorter than a year (a season) is read as its months, not as its year.
    """
    days = (end - start).total_seconds() / 86400.0
    return "day" if days <= 1.01 else "week" if days <= 7.01 else "month" if days < 364 else "year"


def windows_between(level: str, start: datetime, end: datetime, *, limit: int = 400) -> list[str]:
    """Keys of the level's windows that overlap ``[start, end]``, in order (at most ``limit``)."""
    keys: list[str] = []
    when = start
    while when <= end and len(keys) < limit:
        key = window_key(level, when)
        keys.append(key)
        when = window_span(key)[1] + timedelta(microseconds=1)
    return keys
