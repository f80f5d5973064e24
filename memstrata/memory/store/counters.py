"""Per-unit usage data beside the units: reinforcement (H-Mem's n_m, r_m), HMO's recall count, last access,
initial importance, priority and tier.

These change when memory is used, not when it is written, so they live apart
from the vectors, in the same table store as the edges: updating them never
touches the vector store, so it never invalidates a search snapshot, and a query
that records an access stays cheap.

Every update goes through the table's ``merge`` hook, which sets the named fields,
adds to the counted ones and keeps the rest (a reinforcement reads the stored count
first and sets the next one, so replaying the same consolidation never counts twice):

- SQLite (embedded mode): one ``INSERT ... ON CONFLICT DO UPDATE`` per unit inside
  ``BEGIN IMMEDIATE``, so an increment is atomic even between processes;
- Chroma (server mode): a read-modify-write under a per-collection lock, so it is
  exact within a process, while across processes the last writer wins.

Each store also holds one ``threading.Lock`` around its updates, so the batches of
one store never interleave.

Example:
    >>> from pathlib import Path
    >>> from memstrata.memory.store.tables import open_table
    >>> counters = CounterStore(open_table("counters", path=Path("/tmp/memstrata-doc"), client=None))
    >>> counters.record_recall("alice", [("c1", "turn", "s1:t0")], at=1700000000.0)
    >>> counters.get("alice", [("c1", "turn", "s1:t0")])[("c1", "turn", "s1:t0")].recall_count
    1
    >>> counters.delete_user("alice")
    1
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from memstrata.errors import StoreError
from memstrata.memory.store import tenant
from memstrata.memory.store.tables import Scalar, Table, TableRow, WriteCounts

Item = tuple[str, str, str]  # (conversation_id, kind, unit_id)


@dataclass
class UnitCounters:
    """What memstrata knows about one unit's use.

    Attributes:
        conversation_id: the unit's conversation.
        kind: the unit kind, e.g. ``"turn"``, ``"summary"``.
        unit_id: the unit's id.
        reinforcement_count: H-Mem's n_m, how often the unit was consolidated.
        reinforced_at: H-Mem's r_m, when it last was (epoch seconds).
        recall_count: HMO's recall count, how often it was returned as evidence.
        last_access: when it last was (epoch seconds).
        tier: its storage tier (HMO: ``"cache"``, ``"buffer"``; ``None`` is the archive).
        importance: HMO's initial importance, 1-10, set once when its episode closes.
        priority: HMO's priority (Eq. 5) when it was last scored.
        scored_at: the memory time of that scoring (epoch seconds).
        session_key: a scored record's ``conversation/session`` (the cache holds whole recent sessions).
        record_time: a scored record's memory time (epoch seconds).
    """

    conversation_id: str
    kind: str
    unit_id: str
    reinforcement_count: int = 0
    reinforced_at: float | None = None
    recall_count: int = 0
    last_access: float | None = None
    tier: str | None = None
    importance: float | None = None
    priority: float | None = None
    scored_at: float | None = None
    session_key: str | None = None
    record_time: float | None = None

    def with_scores(self, fields: Mapping[str, Scalar]) -> UnitCounters:
        """These counters as :meth:`CounterStore.set_scores` leaves them after writing ``fields`` (a tier of ``""``,
        the archive, reads back as ``None``), without reading them back.
        """
        changes: dict[str, Any] = dict(fields)  # the values' types differ by field; ``replace`` checks the names
        if "tier" in fields:
            changes["tier"] = fields["tier"] or None
        return replace(self, **changes)

    @property
    def item(self) -> Item:
        """The unit's key in this store: ``(conversation_id, kind, unit_id)``."""
        return (self.conversation_id, self.kind, self.unit_id)


def _key(user_id: str, item: Item) -> str:
    conversation_id, kind, unit_id = item
    return tenant.storage_key(user_id, conversation_id, f"{kind}\x1f{unit_id}", namespace="counter")


def _optional_float(value: Scalar) -> float | None:
    return float(value) if value is not None else None


def _from_row(row: TableRow) -> UnitCounters:
    f = row.fields
    tier = f.get("tier")
    return UnitCounters(
        conversation_id=row.conversation_id,
        kind=str(f["kind"]),
        unit_id=str(f["unit_id"]),
        reinforcement_count=int(f.get("reinforcement_count") or 0),
        reinforced_at=_optional_float(f.get("reinforced_at")),
        recall_count=int(f.get("recall_count") or 0),
        last_access=_optional_float(f.get("last_access")),
        tier=str(tier) if tier else None,
        importance=_optional_float(f.get("importance")),
        priority=_optional_float(f.get("priority")),
        scored_at=_optional_float(f.get("scored_at")),
        session_key=str(f["session_key"]) if f.get("session_key") else None,
        record_time=_optional_float(f.get("record_time")),
    )


def _items(items: Sequence[Item]) -> list[Item]:
    """The items without repeats (a unit recalled twice in one call counts once), checked."""
    out = list(dict.fromkeys(tuple(i) for i in items))
    for item in out:
        if len(item) != 3 or not all(isinstance(part, str) and part for part in item):
            msg = f"a counter item is (conversation_id, kind, unit_id) of non-empty strings, got {item!r}"
            raise StoreError(msg)
    return out  # type: ignore[return-value]


class CounterStore:
    """Per-user counters on a :class:`~memstrata.memory.store.tables.Table`.

    Args:
        table: where the counters live (``open_table("counters", ...)``).
    """

    def __init__(self, table: Table) -> None:
        self.table = table
        self._lock = threading.Lock()
        # this process's writes that can change reinforcement (not recall counts or tiers), for a search
        # snapshot that keeps n_m and r_m per conversation
        self.reinforcements = WriteCounts()

    def get(self, user_id: str, items: Sequence[Item]) -> dict[Item, UnitCounters]:
        """Counters of the units, by ``(conversation_id, kind, unit_id)``; uncounted units come back with zeros."""
        wanted = {_key(user_id, i): i for i in _items(items)}
        found = {r.key: _from_row(r) for r in self.table.get(user_id=user_id, keys=list(wanted))}
        return {item: found.get(key) or UnitCounters(*item) for key, item in wanted.items()}

    def put(self, user_id: str, counters: Sequence[UnitCounters]) -> int:
        """Write counters as given, replacing what is stored for those units (a copy or a restore)."""
        rows = [
            TableRow(
                _key(user_id, (c.conversation_id, c.kind, c.unit_id)),
                tenant.check_user(user_id),
                c.conversation_id,
                {
                    "kind": c.kind,
                    "unit_id": c.unit_id,
                    "reinforcement_count": c.reinforcement_count,
                    "reinforced_at": c.reinforced_at,
                    "recall_count": c.recall_count,
                    "last_access": c.last_access,
                    "tier": c.tier,
                    "importance": c.importance,
                    "priority": c.priority,
                    "scored_at": c.scored_at,
                    "session_key": c.session_key,
                    "record_time": c.record_time,
                },
            )
            for c in counters
        ]
        with self._lock:
            self.reinforcements.bump(user_id, [c.conversation_id for c in counters])
            return self.table.upsert(rows) if rows else 0

    def all(self, user_id: str, *, kind: str | None = None, conversation_id: str | None = None) -> list[UnitCounters]:
        """Every counted unit of the user, optionally only those of one kind or one conversation."""
        return [
            _from_row(r)
            for r in self.table.get(
                user_id=user_id, conversation_id=conversation_id, match={"kind": kind} if kind else None
            )
        ]

    def record_recall(self, user_id: str, items: Sequence[Item], *, at: float) -> None:
        """The units were returned as evidence: ``recall_count`` += 1, ``last_access`` = ``at``."""
        self._merge(user_id, items, {"last_access": float(at)}, add={"recall_count": 1})

    def reinforce(self, user_id: str, items: Sequence[Item], *, at: float) -> None:
        """The units were consolidated at memory time ``at``: ``reinforcement_count`` += 1, ``reinforced_at`` = ``at``.

        Consolidations are counted in memory-time order: a unit whose last reinforcement is
        at ``at`` or later is left as it is. So a replayed consolidation (a resumed ingest, or
        two processes ingesting the same conversation at once) is counted once, as in a single
        sequential run, and the count is the number of distinct memory times the unit was
        consolidated at. The price: a consolidation older than the last one, e.g. a session
        imported out of order, is not counted.
        """
        tenant.check_user(user_id)
        at = float(at)
        with self._lock:
            stored = self.get(user_id, items)
            rows = [
                TableRow(
                    _key(user_id, item),
                    user_id,
                    item[0],
                    {
                        "kind": item[1],
                        "unit_id": item[2],
                        "reinforcement_count": old.reinforcement_count + 1,
                        "reinforced_at": at,
                    },
                )
                for item, old in stored.items()
                if old.reinforced_at is None or at > old.reinforced_at
            ]
            if rows:
                self.reinforcements.bump(user_id, [r.conversation_id for r in rows])
                self.table.merge(rows)

    def set_tier(self, user_id: str, items: Sequence[Item], tier: str) -> None:
        """Set the storage tier of the units."""
        if not isinstance(tier, str) or not tier:
            msg = f"tier must be a non-empty string, got {tier!r}"
            raise StoreError(msg)
        self._merge(user_id, items, {"tier": tier})

    def set_scores(self, user_id: str, scores: Mapping[Item, Mapping[str, Scalar]]) -> None:
        """Set HMO's fields per unit (``importance``, ``priority``, ``scored_at``, ``tier`` (``""`` is the
        archive), ``session_key``, ``record_time``), keeping everything else. Like recalls, never a reinforcement:
        no snapshot is rebuilt for it.
        """
        allowed = {"importance", "priority", "scored_at", "tier", "session_key", "record_time"}
        rows = []
        for item, fields in scores.items():
            if not set(fields) <= allowed:
                msg = f"set_scores sets only {sorted(allowed)}, got {sorted(fields)}"
                raise StoreError(msg)
            [checked] = _items([item])
            rows.append(
                TableRow(
                    _key(tenant.check_user(user_id), checked),
                    user_id,
                    checked[0],
                    {"kind": checked[1], "unit_id": checked[2], **fields},
                )
            )
        if rows:
            with self._lock:
                self.table.merge(rows)

    def active(self, user_id: str, *, conversation_id: str | None = None) -> list[UnitCounters]:
        """The records in HMO's active tiers (cache and buffer) of the user."""
        return [
            _from_row(r)
            for tier in ("cache", "buffer")
            for r in self.table.get(user_id=user_id, conversation_id=conversation_id, match={"tier": tier})
        ]

    def delete(self, user_id: str, items: Sequence[Item]) -> int:
        """Delete the counters of these units; the number gone."""
        tenant.check_user(user_id)
        items = _items(items)
        with self._lock:
            self.reinforcements.bump(user_id, [item[0] for item in items])
        keys = [_key(user_id, item) for item in items]
        return self.table.delete(user_id=user_id, keys=keys) if keys else 0

    def delete_user(self, user_id: str) -> int:
        """Delete every counter of the user; the number gone."""
        with self._lock:
            self.reinforcements.bump(user_id, ["*"])
        return self.table.delete(user_id=user_id)

    def _merge(
        self, user_id: str, items: Sequence[Item], fields: Mapping[str, Scalar], add: Mapping[str, int] | None = None
    ) -> None:
        tenant.check_user(user_id)
        rows = [
            TableRow(_key(user_id, item), user_id, item[0], {"kind": item[1], "unit_id": item[2], **fields})
            for item in _items(items)
        ]
        if rows:
            with self._lock:
                self.table.merge(rows, add=add)
