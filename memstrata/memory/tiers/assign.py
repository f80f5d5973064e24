"""HMO's three tiers (§3.2) and how use moves a record between them (§3.3).

- **Tier 1, the cache**: every record of the ``recent_sessions`` most recent sessions, plus the ``pivotal``
  records of highest priority among the others;
- **Tier 2, the buffer**: the next ``buffer`` records by priority, which do not fit the cache;
- **Tier 3, the archive**: everything else (every record is in the archive; the tier field names only the
  active tiers, and ``""`` marks a record demoted back to the archive).

:func:`assign_tiers` ranks a *candidate set*: the active records (tiers 1-2) plus the records that are new (a
write's newly closed episodes) or were just used (a retrieval's archive records, scored lazily when they are
retrieved). A candidate that ranks in wins its tier (promotion), an active record that ranks out goes to the
archive (demotion), the rest keep theirs. The archive as a whole is never ranked, as HMO prescribes: a record that
is not used is not scored.

Example:
    >>> rs = [
    ...     Record(("c", "summary", f"s{i}"), f"c/{i // 2}", float(i), priority=p)
    ...     for i, p in enumerate([0.9, 0.1, 0.2, 0.8, 0.3, 0.4])
    ... ]
    >>> tiers = assign_tiers(rs, recent_sessions=1, pivotal=1, buffer=1)
    >>> [tiers[r.item] for r in rs]
    ['cache', '', '', 'buffer', 'cache', 'cache']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

CACHE, BUFFER, ARCHIVE = "cache", "buffer", ""
TIER_NAMES = {1: "the cache", 2: "the cache and buffer", 3: "the archive"}  # what a query at each depth searches
Item = tuple[str, str, str]


@dataclass(frozen=True)
class Record:
    """One record as the tiers see it: its counters key, its session, its memory time and its priority."""

    item: Item
    session_key: str
    time: float | None
    priority: float


def assign_tiers(records: Iterable[Record], *, recent_sessions: int, pivotal: int, buffer: int) -> dict[Item, str]:
    """The tier of every candidate: cache, buffer or archive (``""``)."""
    pool = list({r.item: r for r in records}.values())
    latest: dict[str, float] = {}
    for r in pool:
        latest[r.session_key] = max(latest.get(r.session_key, float("-inf")), r.time if r.time is not None else 0.0)
    recent = set(sorted(latest, key=lambda k: (latest[k], k), reverse=True)[: max(0, recent_sessions)])
    out = {r.item: CACHE for r in pool if r.session_key in recent}
    rest = sorted(
        (r for r in pool if r.session_key not in recent), key=lambda r: (-r.priority, -(r.time or 0.0), r.item)
    )
    for rank, r in enumerate(rest):
        out[r.item] = CACHE if rank < pivotal else BUFFER if rank < pivotal + buffer else ARCHIVE
    return out


def changes(before: Mapping[Item, str | None], after: Mapping[Item, str]) -> dict[Item, str]:
    """The candidates whose tier moved (a record not in ``before`` was in the archive)."""
    return {item: tier for item, tier in after.items() if (before.get(item) or ARCHIVE) != tier}


def place_recalled(
    active: Iterable[Record],
    recalled: Iterable[Record],
    tiers: Mapping[Item, str | None],
    *,
    recent_sessions: int,
    pivotal: int,
    buffer: int,
) -> dict[Item, str]:
    """What a retrieval's use does: the used records, scored now, ranked alongside the active ones; the moves."""
    return changes(
        tiers, assign_tiers([*active, *recalled], recent_sessions=recent_sessions, pivotal=pivotal, buffer=buffer)
    )
