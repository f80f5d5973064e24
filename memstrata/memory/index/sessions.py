"""Whole sessions the bounded search path read, kept per process for the next retrievals.

A bounded retrieval (:mod:`memstrata.memory.index.bounded`) loads up to
``Context.scale.sessions`` whole sessions, turns and turn views, and that read
is about a third of its time on a large store: Chroma returns each record's
metadata with its JSON payload. Questions of one user come back to the same
sessions, so this process keeps the last sessions it read, up to
``Bounds.cached_units`` records in all, least recently used dropped first (one cache per store,
``store.caches.sessions``; a user dropped from the store's caches by ``Context.cache_mb`` loses its sessions too).

Nothing stale is served. Before cached sessions are used, one ids-only read per
kind (no payload, a few tens of milliseconds) lists the units those sessions hold
now. A session whose units differ from the cached ones, because this process or
another one appended a turn, re-ingested or forgot part of it, is read again. An
edit that keeps a unit's id (a re-embedding) is not seen by that check: a
re-embedding in this process empties the user's cache (the store's write log
records it as a reset); another process's is seen once its sessions leave the
cache.

Example:
    >>> cache = SessionCache()  # one per store: store.caches.sessions
    >>> cache.units
    0
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

Key = tuple[str, str]  # (user, session key)


class SessionCache:
    """One store's cached sessions: their records per kind, keyed by user and session key; bounded in records."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Key, dict[str, list[Any]]] = OrderedDict()
        self._lock = threading.Lock()
        self._versions: dict[str, int] = {}
        self.units = 0

    def take(
        self,
        store: MemoryStore,
        *,
        user_id: str,
        conversation_id: str | None,
        keys: Sequence[str],
        kinds: Sequence[str],
    ) -> tuple[dict[str, dict[str, list[Any]]], list[str]]:
        """The cached sessions among ``keys`` that still hold the same units, and the keys to read instead."""
        self._sync(store, user_id)
        with self._lock:
            found = {k: self._entries[(user_id, k)] for k in keys if (user_id, k) in self._entries}
        if not found:
            return {}, list(keys)
        stale: set[str] = set()
        for kind in kinds:
            cached = {
                store.storage_key(user_id, r.metadata["conversation_id"], r.unit_id): key
                for key, by_kind in found.items()
                for r in by_kind.get(kind, [])
            }
            kept, added = store.recheck(
                kind,
                user_id=user_id,
                conversation_id=conversation_id,
                known=cached,
                where={"session_key": {"$in": list(found)}},
            )
            stale.update(cached[i] for i in cached.keys() - kept)  # removed since
            stale.update(r.metadata.get("session_key", "") for r in added)  # added since
        fresh = {k: v for k, v in found.items() if k not in stale}
        with self._lock:
            for k in fresh:
                if (user_id, k) in self._entries:
                    self._entries.move_to_end((user_id, k))
        return fresh, [k for k in keys if k not in fresh]

    def put(self, *, user_id: str, sessions: dict[str, dict[str, list[Any]]], limit: int) -> None:
        """Keep these sessions (replacing older copies), then drop the least recently used beyond ``limit``."""
        with self._lock:
            for key, by_kind in sessions.items():
                old = self._entries.pop((user_id, key), None)
                self.units -= _size(old)
                self._entries[(user_id, key)] = by_kind
                self.units += _size(by_kind)
            while self._entries and self.units > limit:
                _, dropped = self._entries.popitem(last=False)
                self.units -= _size(dropped)

    def _sync(self, store: MemoryStore, user_id: str) -> None:
        """Forget the user's sessions after a write of this process the write log cannot describe (a reset)."""
        version, seen = store.versions.get(user_id), self._versions.get(user_id)
        if seen is not None and seen != version and store.versions.since(user_id, seen) is None:
            self.forget(user_id)
        self._versions[user_id] = version

    def forget(self, user_id: str | None = None) -> None:
        """Drop the sessions of one user (of every user when ``None``), and the write version last seen of it."""
        with self._lock:
            for key in [k for k in self._entries if user_id in (None, k[0])]:
                self.units -= _size(self._entries.pop(key))
            if user_id is None:
                self._versions.clear()
            else:
                self._versions.pop(user_id, None)


def _size(by_kind: dict[str, list[Any]] | None) -> int:
    return sum(len(v) for v in (by_kind or {}).values())
