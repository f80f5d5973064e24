"""The export format's header and record counts, and what export and import both read of a store."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from memstrata.errors import StoreError
from memstrata.memory.levels import raw_kind
from memstrata.memory.store import MemoryStore, tenant
from memstrata.memory.store.tables import Table

FORMAT = "memstrata-export"
VERSION = 1
TABLES = ("items", "journal", "tombstones")
"""The side tables an export carries whole: what a store user put, what was changed, what stays deleted."""

_COUNTED = {"turn": "turns", "session": "sessions", "persona_exclusion": "persona_exclusions"}


def _turn_order(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["conversation_id"], r["session_id"], r["position"], r["id"]


def _counts(records: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(("turns", "sessions", *TABLES, "persona_exclusions"), 0)
    for r in records:
        counts[r["table"] if r["type"] == "row" else _COUNTED[r["type"]]] += 1
    return counts


def _side_tables(store: MemoryStore) -> dict[str, Table]:
    """The side tables an export carries."""
    return {"items": store.items, "journal": store.journal, "tombstones": store.tombstones.table}


def _holds(store: MemoryStore, user_id: str) -> bool:
    """Whether the user has any memory: a turn, or a row an export would carry or an ingest writes."""
    tables: Iterable[Table] = [store.sequences.table, *_side_tables(store).values()]
    return store.holds_more_than(raw_kind(), 0, user_id=user_id) or any(t.count(user_id=user_id) for t in tables)


def _user(value: Any, what: str) -> str:
    try:
        return tenant.check_user(value)
    except StoreError as exc:
        msg = f"{what}: {exc}"
        raise ValueError(msg) from exc
