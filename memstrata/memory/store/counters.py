"""Per-unit usage data beside the units: reinforcement (H-Mem's n_m, r_m), recall count, last access, tier.

These change when memory is used, not when it is written, so they live apart
from the vectors: updating them never invalidates a search snapshot, and a
query that records an access stays cheap. Increments are read-modify-write
under one lock per store, which makes them exact within a process; across
processes the last writer wins.

Example:
    >>> counters = CounterStore(open_table("counters", path=Path("/tmp/memstrata-doc"), client=None))  # doctest: +SKIP
    >>> counters.record_recall("alice", [("c1", "turn", "s1:t0")], at=time.time())                    # doctest: +SKIP
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

from memstrata.memory.store import tenant
from memstrata.memory.store.tables import Table, TableRow

Item = tuple[str, str, str]  # (conversation_id, kind, unit_id)


@dataclass
class UnitCounters:
    """What memstrata knows about one unit's use."""

    conversation_id: str
    kind: str
    unit_id: str
    reinforcement_count: int = 0
    reinforced_at: float | None = None
    recall_count: int = 0
    last_access: float | None = None
    tier: str | None = None


def _key(user_id: str, item: Item) -> str:
    conversation_id, kind, unit_id = item
    return tenant.storage_key(user_id, conversation_id, f"{kind}\x1f{unit_id}", namespace="counter")


def _from_row(row: TableRow) -> UnitCounters:
    f = row.fields
    return UnitCounters(conversation_id=row.conversation_id, kind=str(f["kind"]), unit_id=str(f["unit_id"]),
                        reinforcement_count=int(f.get("reinforcement_count") or 0),
                        reinforced_at=f.get("reinforced_at"), recall_count=int(f.get("recall_count") or 0),
                        last_access=f.get("last_access"), tier=f.get("tier"))  # type: ignore[arg-type]


class CounterStore:
    """Per-user counters on a :class:`~memstrata.memory.store.tables.Table`."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._lock = threading.Lock()

    def get(self, user_id: str, items: Sequence[Item]) -> dict[Item, UnitCounters]:
        """Counters of the given units; units never counted come back with zeros."""
        keys = {_key(user_id, i): i for i in items}
        found = {r.key: _from_row(r) for r in self.table.get(user_id=user_id, keys=list(keys))}
        return {item: found.get(key) or UnitCounters(*item) for key, item in keys.items()}

    def all(self, user_id: str, *, kind: str | None = None) -> list[UnitCounters]:
        """Every counted unit of one user, optionally of one kind."""
        return [_from_row(r) for r in self.table.get(user_id=user_id, match={"kind": kind} if kind else None)]

    def record_recall(self, user_id: str, items: Sequence[Item], *, at: float) -> None:
        """The units were returned as evidence (HMO's recall count)."""
        self._update(user_id, items, lambda c: replace(c, recall_count=c.recall_count + 1, last_access=at))

    def reinforce(self, user_id: str, items: Sequence[Item], *, at: float) -> None:
        """The units were consolidated again (H-Mem's n_m and r_m)."""
        self._update(user_id, items,
                     lambda c: replace(c, reinforcement_count=c.reinforcement_count + 1, reinforced_at=at))

    def set_tier(self, user_id: str, items: Sequence[Item], tier: str) -> None:
        self._update(user_id, items, lambda c: replace(c, tier=tier))

    def delete_user(self, user_id: str) -> int:
        """Every counter of one user."""
        return self.table.delete(user_id=user_id)

    def _update(self, user_id: str, items: Sequence[Item], change: Callable[[UnitCounters], UnitCounters]) -> None:
        if not items:
            return
        with self._lock:
            current = self.get(user_id, list(dict.fromkeys(items)))
            rows = []
            for item, counters in current.items():
                data = asdict(change(counters))
                conversation_id = data.pop("conversation_id")
                rows.append(TableRow(_key(user_id, item), user_id, conversation_id, data))
            self.table.upsert(rows)
