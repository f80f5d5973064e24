"""Importing an export into a store: checked first, then the turns re-ingested in their places and the rest restored."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memstrata.context import Context
from memstrata.errors import IngestError
from memstrata.memory.normalize import normalize_input
from memstrata.memory.store import MemoryStore, tenant
from memstrata.memory.store.tables import TableRow
from memstrata.portable.format import TABLES, _counts, _holds, _side_tables, _turn_order, _user
from memstrata.portable.load import Export, load_export
from memstrata.repair import Exclusion, reapply_exclusion

if TYPE_CHECKING:
    from memstrata.client import Memstrata

_REKEYED = {"items": "item", "tombstones": "tomb"}  # tables whose row keys are derived from the user (namespace)


def import_user(
    mem: Memstrata, source: str | Path | IO[str], *, user_id: str | None = None, replace: bool = False
) -> dict[str, int]:
    """Read an export into the store, under its own user id or ``user_id``.

    The turns are ingested again in their sessions and places, with their ids, times and metadata; the sessions
    that were closed are closed; items, journal, tombstones, position counters and persona exclusions are restored.

    Args:
        mem: the memory to write into.
        source: a file written by :func:`export_user` (a path or a text file).
        user_id: the user to import as (default: the one the file names).
        replace: delete the user's memory first (:meth:`Memstrata.delete_user`) when there is some.

    Returns:
        The records restored of each kind (as :func:`export_user` counts them), ``conversations``, and
        ``persona_exclusions_unplaced``: exclusions with no persona version to hold them.

    Raises:
        ValueError: the file is not a memstrata export, has a version this code does not read, is malformed or cut
            off, or the user already has memory and ``replace`` is false. Nothing is written then.
    """
    data = load_export(source, store=mem.store)
    target = _user(user_id if user_id is not None else data.user_id, "user_id")
    _check_moves(data, target)
    _check_messages(data, target)
    if _holds(mem.store, target):
        if not replace:
            msg = f"user {target!r} already has memory in this store: pass replace=True to delete it first"
            raise ValueError(msg)
        mem.delete_user(user_id=target)
    for conv, batch in _batches(data):
        _ingest(mem, target, conv, batch)
    _restore_sessions(mem.store, target, data.sessions)
    _restore_rows(mem.store, data, target)
    placed = sum(_exclude(mem, target, e) for e in data.exclusions)
    counts = _counts([*data.turns, *data.sessions, *data.rows])
    return {
        **counts,
        "conversations": len({t["conversation_id"] for t in data.turns}),
        "persona_exclusions": placed,
        "persona_exclusions_unplaced": len(data.exclusions) - placed,
    }


def _check_moves(data: Export, target: str) -> None:
    """Rows move to another user only when their user-derived parts are what this memstrata derives (nothing is
    written).
    """
    if target == data.user_id:
        return
    for row in data.rows:
        if row["table"] in _REKEYED and _row_key(row, data.user_id) != row["key"]:
            msg = (
                f"cannot import as another user: a {row['table']} row's key {row['key']!r} is not derived the way "
                "this memstrata derives it; import it under its own user id"
            )
            raise ValueError(msg)
        try:
            _moved(row, data.user_id, target)
        except (ValueError, TypeError, IndexError) as exc:
            msg = f"cannot import as another user: an items row's namespace {row['fields'].get('namespace')!r} ({exc})"
            raise ValueError(msg) from exc


def _check_messages(data: Export, target: str) -> None:
    """Every conversation's messages pass the ingestion's own validation (nothing is written)."""
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for t in data.turns:
        by_conv.setdefault(t["conversation_id"], []).append(_message(t))
    for conv, messages in by_conv.items():
        try:
            normalize_input(messages, user_id=target, conversation_id=conv, source="the export")
        except IngestError as exc:
            raise ValueError(str(exc)) from exc


# ---- writing --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    """Turns that go in one ingest: of one conversation, of closed or of open sessions, of one write time."""

    closed: bool
    stamp: datetime | None  # the write's time the turns got, having none of their own (``Context.stamp_untimed``)
    now: datetime | None  # the write's clock: an open session's tail must not count as quiet
    turns: list[dict[str, Any]]


def _batches(data: Export) -> Iterator[tuple[str, _Batch]]:
    """The ingests that rebuild the turns: within a session in position order, one per run of turns of one stamp.

    A turn stored with a time but no raw time got its write's time; it is written again without a time, in a write
    stamped with that time, so it comes back the same. Every other turn says its own time, or has none.
    """
    closed = {(s["conversation_id"], s["session_id"]): s["closed"] for s in data.sessions}
    runs = _runs(data.turns)
    latest: dict[tuple[str, str], datetime | None] = {}  # per session, the latest time written so far
    while runs:
        picked: dict[tuple[str, bool, datetime | None], list[tuple[str, str]]] = {}
        for key in sorted(runs):
            picked.setdefault((key[0], closed[key], _stamp(runs[key][0][0])), []).append(key)
        for (conv, shut, stamp), keys in sorted(picked.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
            turns = [t for key in keys for t in runs[key].pop(0)]
            for key in keys:
                latest[key] = _latest([latest.get(key), *(_time(t) for t in turns if t["session_id"] == key[1])])
            tails = [when for key in keys if (when := latest[key]) is not None]
            now = stamp or (min(tails) if tails and not shut else None)  # at or before every tail's latest message
            yield conv, _Batch(shut, stamp, now, turns)
        runs = {k: v for k, v in runs.items() if v}


def _runs(turns: list[dict[str, Any]]) -> dict[tuple[str, str], list[list[dict[str, Any]]]]:
    """Per session, its turns in position order, cut where the stamp changes."""
    runs: dict[tuple[str, str], list[list[dict[str, Any]]]] = {}
    for t in sorted(turns, key=_turn_order):
        session = runs.setdefault((t["conversation_id"], t["session_id"]), [])
        if not session or _stamp(session[-1][0]) != _stamp(t):
            session.append([])
        session[-1].append(t)
    return runs


def _stamp(t: dict[str, Any]) -> datetime | None:
    return datetime.fromisoformat(t["time"]) if t["time_raw"] is None and t["time"] is not None else None


def _message(t: dict[str, Any]) -> dict[str, Any]:
    """A turn as ingestion reads it, in its own session and place, with its id."""
    when = t["time_raw"]
    return {
        "speaker": t["speaker"],
        "text": t["text"],
        "session": t["session_id"],
        "position": t["position"],
        "id": t["id"],
        **({"timestamp": when} if when is not None else {}),
        **({"image_caption": t["image_caption"]} if t["image_caption"] else {}),
        **({"metadata": t["metadata"]} if t["metadata"] else {}),
    }


def _ingest(mem: Memstrata, user_id: str, conv: str, batch: _Batch) -> None:
    """One write: a closed session is closed again; an open one stays open."""
    overrides: dict[str, Any] = {"now": batch.now} if batch.now is not None else {}
    if "stamp_untimed" in {f.name for f in fields(Context)}:
        overrides["stamp_untimed"] = batch.stamp is not None  # a message untimed at export stays untimed
    messages = [_message(t) for t in batch.turns]
    mem.ingest(messages, user_id=user_id, conversation_id=conv, close=batch.closed, **overrides)


def _time(t: dict[str, Any]) -> datetime | None:
    return datetime.fromisoformat(t["time"]) if t["time"] is not None else None


def _latest(times: Iterable[datetime | None]) -> datetime | None:
    return max((t for t in times if t is not None), default=None)


def _restore_sessions(store: MemoryStore, user_id: str, sessions: list[dict[str, Any]]) -> None:
    """Each session's counter and latest time as exported (appends after a deleted last turn keep their place)."""
    for s in sessions:
        if s["next"] is not None:
            latest = datetime.fromtimestamp(s["latest"]) if s["latest"] is not None else None
            store.sequences.advance(user_id, s["conversation_id"], s["session_id"], s["next"], latest)


def _restore_rows(store: MemoryStore, data: Export, user_id: str) -> None:
    """The side tables' rows, after the turns (a tombstone must not keep a live turn that reuses its id out)."""
    tables = _side_tables(store)
    for name in TABLES:
        rows = [_moved(r, data.user_id, user_id) for r in data.rows if r["table"] == name]
        if rows:
            tables[name].upsert(rows)


def _moved(row: dict[str, Any], source: str, target: str) -> TableRow:
    """The row as ``target`` holds it: a key derived from the user is derived again, and an item's namespace as put
    (``prefix + (user,)`` or ``prefix + (user, conversation)``) names the new user.
    """
    if target == source:
        return TableRow(row["key"], target, row["conversation_id"], row["fields"])
    values = dict(row["fields"])
    if row["table"] == "items" and isinstance(values.get("namespace"), str):
        parts = json.loads(values["namespace"])
        at = len(parts) - (2 if parts[-1:] == [row["conversation_id"]] and parts[-2:-1] == [source] else 1)
        if parts[at] == source:
            values["namespace"] = json.dumps([*parts[:at], target, *parts[at + 1 :]])
    key = _row_key(row, target) if row["table"] in _REKEYED else row["key"]
    return TableRow(key, target, row["conversation_id"], values)


def _row_key(row: dict[str, Any], user_id: str) -> str:
    """The storage key of an items or tombstones row for ``user_id`` (as the store adapter and tombstones make it)."""
    values = row["fields"]
    part = str(values.get("key")) if row["table"] == "items" else f"{values.get('turn_id')}\x1f{values.get('said')}"
    return tenant.storage_key(user_id, row["conversation_id"], part, namespace=_REKEYED[row["table"]])


def _exclude(mem: Memstrata, user_id: str, e: dict[str, Any]) -> bool:
    """Remove the fact from the speaker's persona again (:func:`memstrata.repair.reapply_exclusion`)."""
    exclusion = Exclusion(
        e["conversation_id"], e["speaker"], e["dimension"], e["fact_id"], e["fact_text"], tuple(e["fact_turn_ids"])
    )
    return reapply_exclusion(mem, exclusion, user_id=user_id)
