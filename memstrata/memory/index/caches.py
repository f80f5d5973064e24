"""What one store's searches keep in this process, per user, within a memory budget.

A :class:`~memstrata.memory.store.MemoryStore` makes one :class:`SearchCaches` when it opens (``store.caches``);
its :meth:`~memstrata.memory.store.MemoryStore.close` clears it, and it goes when the store goes. It holds, keyed by
user first (never by a store's ``id``):

- ``snapshots``: the whole-memory snapshots, per (user, conversation) (:mod:`~memstrata.memory.index.snapshot`);
- ``runs``: the bounded working set of each retrieval run in flight, per (user, conversation, run), and
  ``latest``, each large scope's latest memory time per (user, conversation, write version)
  (:mod:`~memstrata.memory.index.bounded`);
- ``tiers``: HMO's held active tiers, per (user, conversation) (:mod:`~memstrata.memory.index.active`);
- ``sessions``: the whole sessions the bounded path read (:mod:`~memstrata.memory.index.sessions`), bounded on its own
  by ``Context.scale.cache_units``;
- ``facts``: the facts and episodes of the conversations ingestion wrote last, with their theme graph's edges and
  their speakers, per (user, conversation), the latest :data:`~memstrata.memory.store.held_facts.MAX_HELD` of them
  (:mod:`memstrata.memory.store.held_facts`);
- ``sizes``: whether each scope is past ``scale.max_turns``, per (user, conversation, threshold), and ``vectors``:
  query vectors by text, the latest ``Context.scale.query_vectors`` of them (:mod:`memstrata.runtime.search`).

Each has its own lock, as each module had before they moved here, so a slow read under one (the active tiers' lock
is held while their membership is read) never blocks a lookup in another.

**The budget.** :meth:`SearchCaches.touch` runs after every use of a user's snapshot (``Context.cache_mb``, read
from the run's context by :mod:`memstrata.runtime.search`, because one store serves runs with different contexts):
it estimates the bytes the user holds (:func:`user_bytes`) and, while the store's users together hold more than the
budget, picks the least recently used users but the one just served, whose entries :meth:`SearchCaches.drop_user`
then drops. A user dropped this way is read again from the store at its next query, with the same results.

Example:
    >>> caches = SearchCaches()
    >>> caches.touch("alice", budget_mb=1.0)  # the users to drop: none
    []
    >>> caches.users()
    ['alice']
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

import numpy as np

from memstrata.memory.index.sessions import SessionCache

# Estimated bytes of one snapshot row besides its vectors: the parsed unit and its text, its BM25 postings, its
# key in the lookup dicts and its per-row lists. Measured with tracemalloc on LoCoMo's conv-26 ingested offline
# (419 turns, 2,113 rows of every searched kind): the snapshot alone held 10.2 MB besides its vectors (4.9 KB a
# row), and after eight queries (the entity graph view, the memo, the reinforcement counts) 12.1 MB (5.8 KB a row).
ROW_BYTES = 6_000
# A bounded working set also keeps every candidate record (payload dict, metadata, vector) beside its snapshot.
RECORD_BYTES = 3_000
# What merely knowing a user costs (its size check, its place in the usage order), so the number of users is
# bounded too.
USER_BYTES = 1_024


class SearchCaches:
    """One store's per-process search state, keyed by user, evicted least recently used user first.

    Every mapping is read and written under its own lock (``snapshots_lock``, ``runs_lock`` for ``runs`` and
    ``latest``, ``tiers_lock``, ``sizes_lock``, ``vectors_lock``); :meth:`touch` and :meth:`drop_user` take them
    one at a time, never while holding another, so they cannot deadlock with a caller holding one.
    """

    def __init__(self) -> None:
        self.snapshots: dict[tuple[str, str | None], Any] = {}
        self.snapshots_lock = threading.Lock()
        self.runs: OrderedDict[tuple[str, str | None, str], Any] = OrderedDict()
        self.latest: dict[tuple[str, str | None, int], tuple[float, datetime | None]] = {}
        self.runs_lock = threading.Lock()
        self.tiers: dict[tuple[str, str | None], Any] = {}
        self.tiers_lock = threading.Lock()
        self.sessions = SessionCache()
        self.sizes: dict[tuple[str, str | None, int], tuple[float, bool]] = {}
        self.sizes_lock = threading.Lock()
        self.vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self.vectors_lock = threading.Lock()
        self.facts: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self.facts_lock = threading.Lock()
        self._used: OrderedDict[str, int] = OrderedDict()  # user -> estimated bytes, least recently used first
        self._total = 0  # the sum of _used's values
        self._used_lock = threading.Lock()

    def users(self) -> list[str]:
        """The users this process holds something of, least recently used first."""
        with self._used_lock:
            return list(self._used)

    def held_bytes(self) -> int:
        """The estimated bytes of every user, as last measured by :meth:`touch`."""
        with self._used_lock:
            return self._total

    def touch(self, user_id: str, *, budget_mb: float) -> list[str]:
        """Mark the user used now, measure what it holds, and pick the least recently used other users to drop
        while all of them hold more than ``budget_mb`` megabytes. The user just served is never picked, even alone
        over the budget.

        Returns the users picked, already out of the usage order, for the caller to :meth:`drop_user` where
        waiting costs nothing: dropping waits for each cache's lock (the active tiers' is held through a read
        from the store) and frees what the users held. Measuring takes no lock a read holds.
        """
        size = user_bytes(self, user_id)
        budget = budget_mb * 2**20
        victims: list[str] = []
        with self._used_lock:
            self._total += size - self._used.pop(user_id, 0)
            self._used[user_id] = size
            while self._total > budget and len(self._used) > 1:
                victim, freed = self._used.popitem(last=False)
                victims.append(victim)
                self._total -= freed
        return victims

    def drop_user(self, user_id: str) -> int:
        """Drop everything held of one user, in every scope (freed here, unless a query still uses it); returns
        how many snapshots, working sets and held tiers went.
        """
        with self._used_lock:
            self._total -= self._used.pop(user_id, 0)
        dropped = _pop_user(self.snapshots, self.snapshots_lock, user_id)
        with self.runs_lock:
            dropped += _pop_user(self.runs, None, user_id)
            _pop_user(self.latest, None, user_id)
        dropped += _pop_user(self.tiers, self.tiers_lock, user_id)
        _pop_user(self.sizes, self.sizes_lock, user_id)
        _pop_user(self.facts, self.facts_lock, user_id)
        self.sessions.forget(user_id)
        return len(dropped)

    def clear(self) -> None:
        """Drop everything (the store is closing): nothing of it stays in this process."""
        for cache, lock in (
            (self.snapshots, self.snapshots_lock),
            (self.runs, self.runs_lock),
            (self.latest, self.runs_lock),
            (self.tiers, self.tiers_lock),
            (self.sizes, self.sizes_lock),
            (self.vectors, self.vectors_lock),
            (self.facts, self.facts_lock),
        ):
            with lock:
                cache.clear()
        with self._used_lock:
            self._used.clear()
            self._total = 0
        self.sessions.forget(None)

    def is_empty(self) -> bool:
        """Whether nothing at all is held (after :meth:`clear`, or before any use)."""
        held = (self.snapshots, self.runs, self.latest, self.tiers, self.sizes, self.vectors, self.facts, self._used)
        return not any(held) and self.sessions.units == 0


def _pop_user(cache: dict[Any, Any], lock: threading.Lock | None, user_id: str) -> list[Any]:
    """Remove the entries whose key starts with ``user_id``; returns their values."""
    if lock is not None:
        with lock:
            return _pop_user(cache, None, user_id)
    return [cache.pop(key) for key in [k for k in cache if k[0] == user_id]]


def user_bytes(caches: SearchCaches, user_id: str) -> int:
    """The estimated bytes one user holds: its snapshots, working sets, active tiers and held facts, plus
    ``USER_BYTES``.

    An estimate: vectors and per-turn arrays are counted exactly (their ``nbytes``), every other part of a
    snapshot as ``ROW_BYTES`` per row, and a working set's kept records as ``RECORD_BYTES`` plus one vector each.
    """
    with caches.snapshots_lock:
        indexes = [ix for key, ix in caches.snapshots.items() if key[0] == user_id]
    with caches.runs_lock:
        sets = [ws for key, ws in caches.runs.items() if key[0] == user_id]
    # not under tiers_lock, which a refresh holds through a read from the store: a list() of a dict is one step
    # for the interpreter, so it sees the mapping before or after a change, never during it
    sets += [ws for key, held in list(caches.tiers.items()) if key[0] == user_id for ws in list(held.sets.values())]
    facts = sum(held.nbytes() for key, held in list(caches.facts.items()) if key[0] == user_id)
    return USER_BYTES + facts + sum(index_bytes(ix) for ix in indexes) + sum(working_set_bytes(ws) for ws in sets)


def index_bytes(index: Any) -> int:
    """A snapshot's estimated bytes (:class:`~memstrata.memory.index.snapshot.MemoryIndex`)."""
    if index is None:
        return 0
    tables = index.tables.values()
    arrays = sum(t.vecs.nbytes for t in tables) + (sum(v.nbytes for v in index.views) if index.view_tables else 0)
    arrays += index.prev_idx.nbytes + index.next_idx.nbytes + index.ts_seconds.nbytes
    return arrays + ROW_BYTES * sum(len(t) for t in tables)


def working_set_bytes(ws: Any) -> int:
    """A bounded working set's estimated bytes: its snapshot and its kept candidate records.

    Read without the set's lock (held through its reads from the store): only lengths and the snapshot's arrays,
    which another thread growing the set changes but cannot break.
    """
    index = ws.index
    count = sum(len(found) for found in list(ws.records.values()))
    per_vector = index.turn_vecs[:1].nbytes if index is not None else 0
    return index_bytes(index) + count * (RECORD_BYTES + per_vector)
