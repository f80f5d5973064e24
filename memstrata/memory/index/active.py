"""HMO's active tiers as search snapshots: the cache (tier 1), and the cache with the buffer (tiers 1-2).

Each is a :class:`~memstrata.memory.index.snapshot.MemoryIndex` over every searched unit of the whole sessions
that hold the tier's records, and the entities, tree nodes, themes and personas of their conversations
(:meth:`WorkingSet.hold_sessions`), so a search of it scores as the whole-memory snapshot would score that part.
They are small (``tier.recent_sessions`` sessions plus at most ``tier.pivotal + tier_buffer`` records' sessions)
and held per process on the store (``store.caches.tiers``, within ``Context.cache_mb``); the archive is searched
through the bounded path (:mod:`memstrata.memory.index.bounded`).

Which records are active is read from the counters store every ``refresh_seconds`` at most (``Context.tier.refresh_s``):
a query's promotions and demotions are written at once, but the held snapshots take them at that refresh, not after
every query, since a query moves a few records and adding a session rebuilds the tier's snapshot (a promoted record
stays findable in the archive meanwhile). A snapshot is built again at once when this process wrote units of the
user. By construction, BM25's statistics are the
tier's, and a tree node or entity of a held conversation can point at a turn of a session the tier does not hold
(that turn is not found there).

Example:
    >>> index = active_index(store, user_id="alice", conversation_id=None, depth=1, bounds=b)  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memstrata.memory.index.bounded import Bounds, WorkingSet
from memstrata.memory.index.snapshot import MemoryIndex
from memstrata.memory.plan.settings import RetrievalSettings

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

CACHE, BUFFER = "cache", "buffer"


@dataclass
class _Held:
    checked: float
    rows: list[Any]  # the active records' counters
    sessions: dict[int, tuple[str, ...]]  # depth -> the session keys of its records
    sets: dict[int, WorkingSet] = field(default_factory=dict)
    version: int = -1


def active_sessions(rows: Sequence[Any]) -> dict[int, tuple[str, ...]]:
    """Per depth (1: the cache, 2: cache and buffer), the sessions holding its records, newest record first."""
    order = sorted(rows, key=lambda c: (-(c.record_time or 0.0), c.session_key or ""))
    cache = tuple(dict.fromkeys(c.session_key for c in order if c.tier == CACHE and c.session_key))
    both = tuple(dict.fromkeys(c.session_key for c in order if c.session_key))
    return {1: cache, 2: both}


def active_index(
    store: MemoryStore,
    *,
    user_id: str,
    conversation_id: str | None,
    depth: int,
    bounds: Bounds,
    refresh_seconds: float = 5.0,
    window_widths: Sequence[int] = RetrievalSettings.window_widths,
) -> MemoryIndex | None:
    """The snapshot of tier ``depth`` (1 or 2); ``None`` when no record is in an active tier yet.

    A held snapshot is kept while the sessions it holds are still wanted, give or take a few: sessions that
    joined are read and added, and it is built again only when more than half as many as are wanted left it
    (a demoted record's session stays searchable until then, which costs a little time and no recall).
    """
    with store.caches.tiers_lock:
        held = _refreshed(store, user_id, conversation_id, refresh_seconds)
        keys = held.sessions.get(depth, ())
        if not keys:
            return None
        ws = held.sets.get(depth)
        if ws is None or len(set(ws.sessions) - set(keys)) > len(keys) // 2:
            ws = held.sets[depth] = WorkingSet(
                store, user_id=user_id, conversation_id=conversation_id, bounds=bounds, window_widths=window_widths
            )
    return ws.hold_sessions(list(keys))


def _refreshed(store: MemoryStore, user_id: str, conversation_id: str | None, refresh_seconds: float) -> _Held:
    """The held tiers of one scope, read again when due; called under ``store.caches.tiers_lock``."""
    tiers, key = store.caches.tiers, (user_id, conversation_id)
    version = store.versions.get(user_id)
    held = tiers.get(key)
    if held is not None and held.version == version and time.monotonic() - held.checked <= refresh_seconds:
        return held
    rows = store.counters.active(user_id, conversation_id=conversation_id)
    if held is None or held.version != version:  # this process wrote units: every snapshot is built again
        held = tiers[key] = _Held(time.monotonic(), rows, active_sessions(rows), version=version)
    else:
        held.checked, held.rows, held.sessions = time.monotonic(), rows, active_sessions(rows)
    return held


def held_active(
    store: MemoryStore, *, user_id: str, conversation_id: str | None, refresh_seconds: float = 5.0
) -> list[Any]:
    """The counters of the records in the active tiers, as this process holds them: read from the counters store
    every ``refresh_seconds`` at most, with this process's own moves since then (:func:`note_moves`).

    A query's use ranks its records against these (HMO's lazy update): reading them from the store at every query
    is a user-wide read, about 1.4 s on a server store of 100k turns. Another process's moves are seen after
    the next refresh.
    """
    with store.caches.tiers_lock:
        return list(_refreshed(store, user_id, conversation_id, refresh_seconds).rows)


def note_moves(store: MemoryStore, user_id: str, rows: Sequence[Any]) -> None:
    """Take this process's new counters of some records (after a use wrote them) into the held active rows of the
    user, in every held scope they belong to; the held sessions still change only at the next refresh.
    """
    caches = store.caches
    with caches.tiers_lock:
        for (user, conversation_id), held in caches.tiers.items():
            if user != user_id:
                continue
            by_item = {c.item: c for c in held.rows}
            for c in rows:
                if conversation_id in (None, c.conversation_id):
                    if c.tier in (CACHE, BUFFER):
                        by_item[c.item] = c
                    else:
                        by_item.pop(c.item, None)
            held.rows = list(by_item.values())


def refresh_tiers(store: MemoryStore, user_id: str) -> None:
    """Have the user's next tiered read re-read which records are active, as ``tier.refresh_s`` would (a bench
    models a pause this way); the held snapshots are kept and take only the sessions that joined or left.
    """
    caches = store.caches
    with caches.tiers_lock:
        for key, held in caches.tiers.items():
            if key[0] == user_id:
                held.checked = float("-inf")


def tier_sizes(store: MemoryStore, user_id: str, conversation_id: str | None = None) -> dict[str, int]:
    """How many records each active tier holds, and their sessions."""
    rows = store.counters.active(user_id, conversation_id=conversation_id)
    sessions = active_sessions(rows)
    return {
        "cache": sum(1 for c in rows if c.tier == CACHE),
        "buffer": sum(1 for c in rows if c.tier == BUFFER),
        "cache_sessions": len(sessions[1]),
        "active_sessions": len(sessions[2]),
    }
