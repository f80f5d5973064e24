"""The vector store's write log: per-user write versions and a journal of the unit writes behind them.

Every unit write of :class:`~memstrata.memory.store.vectors.VectorStore` records a :class:`Change` in its
:class:`WriteLog` (``store.versions``); a search snapshot replays the changes since its version instead of
reading the store again (:mod:`memstrata.memory.index.snapshot`).

Example:
    >>> log = WriteLog()
    >>> log.record("alice", "turn", "delete", conversation_id="c1", unit_ids=("t0",))
    >>> log.get("alice"), [c.op for c in log.since("alice", 0)]
    (1, ['delete'])
    >>> log.bump("alice")
    >>> log.since("alice", 0) is None
    True
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Change:
    """One write of this process, as in-process search snapshots replay it.

    ``op`` is ``upsert`` (``units`` with their ``vectors``), ``delete`` (``unit_ids`` of one
    conversation) or ``reset`` (everything of the user may have changed: rebuild).
    """

    version: int
    kind: str
    op: str
    units: tuple[Any, ...] = ()
    vectors: tuple[Any, ...] = ()
    conversation_id: str | None = None
    unit_ids: tuple[str, ...] = ()


@dataclass
class WriteLog:
    """Per-user write versions and a bounded journal of the writes behind them.

    A search snapshot at version v asks for :meth:`since` (v) and applies those
    changes in place instead of rebuilding; when the journal no longer reaches back
    to v (more than ``max_rows`` units written since), it gets ``None`` and rebuilds.
    Only unit writes are logged; edge and counter writes never are.
    """

    max_rows: int = 20_000
    counts: dict[str, int] = field(default_factory=dict)
    journal: dict[str, list[Change]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, user_id: str, kind: str, op: str, **parts: Any) -> None:
        """Bump the user's version and journal the change, dropping the oldest entries beyond ``max_rows`` units."""
        with self.lock:
            version = self.counts.get(user_id, 0) + 1
            self.counts[user_id] = version
            entries = self.journal.setdefault(user_id, [])
            entries.append(Change(version=version, kind=kind, op=op, **parts))
            rows = sum(len(c.units) + len(c.unit_ids) for c in entries)
            while len(entries) > 1 and rows > self.max_rows:
                rows -= len(entries[0].units) + len(entries[0].unit_ids)
                entries.pop(0)

    def bump(self, user_id: str) -> None:
        """A write the journal cannot describe: snapshots of this user rebuild."""
        self.record(user_id, "", "reset")

    def get(self, user_id: str) -> int:
        """The user's current write version (0 before any write)."""
        return self.counts.get(user_id, 0)

    def bump_all(self) -> None:
        """Every user's snapshots rebuild (after a re-embedding)."""
        for user in list(self.counts):
            self.bump(user)

    def since(self, user_id: str, version: int) -> list[Change] | None:
        """The changes after ``version``, oldest first; ``None`` when they are no longer all known."""
        with self.lock:
            entries = [c for c in self.journal.get(user_id, []) if c.version > version]
            current = self.counts.get(user_id, 0)
        if current == version:
            return []
        if not entries or entries[0].version != version + 1 or any(c.op == "reset" for c in entries):
            return None
        return entries
