"""Export and import: one user's memory as a JSON-lines file, and back into any store, under any user id.

Raw turns are the source of truth; everything else a store holds (turn contexts, episodes, summaries, facts,
entities, themes, persona versions, the tree, tiers, vectors) is rebuilt from them by the ingestion graph. An
export therefore carries only what no ingestion can rebuild, one JSON object a line:

- a header, ``{"format": "memstrata-export", "version": 1, "user_id": ...}``;
- every raw turn (``"type": "turn"``): its conversation, session, position, id, speaker, text, photo caption, the
  time as given (``time_raw``) and as read (``time``), and the metadata the app attached;
- every session (``"session"``): whether its episodes are all closed, and its position counter and latest time
  (:mod:`memstrata.memory.store.sequences`), so later appends land where they would have;
- the rows of the user's side tables (``"row"``): the LangGraph store's ``items``, the ``journal`` of updates and
  deletions, and the ``tombstones`` that keep deleted turns from coming back;
- the facts a user removed from a persona (``"persona_exclusion"``, :meth:`Memstrata.forget_persona_item`);
- a trailer (``"end"``) with the counts, so a cut-off file is refused.

Records are sorted and serialized with sorted keys, so exporting, importing into an empty store and exporting again
gives the same bytes. :func:`import_user` validates the whole file before it writes anything, then re-ingests the
turns in their places (as :func:`memstrata.memories.update` rebuilds a session) and restores the rest.

Example:
    >>> export_user(mem, "ann", "ann.jsonl")  # doctest: +SKIP
    {'turns': 12, 'sessions': 2, 'items': 0, 'journal': 1, 'tombstones': 1, 'persona_exclusions': 0}
    >>> import_user(Memstrata(path="/tmp/copy"), "ann.jsonl", user_id="ann-2")["turns"]  # doctest: +SKIP
    12
    >>> users(mem)  # doctest: +SKIP
    ['ann', 'bo']
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from memstrata.context import Context
from memstrata.memory.levels import DIMENSIONS, Turn, raw_kind
from memstrata.memory.normalize import IngestError, normalize_input
from memstrata.memory.store import MemoryStore, tenant
from memstrata.memory.store.reads import open_episodes
from memstrata.memory.store.tables import ChromaTable, SqliteTable, Table, TableRow, check_name, sqlite_connection
from memstrata.memory.store.tenant import StoreError
from memstrata.repair import Exclusion, persona_exclusions, reapply_exclusion

if TYPE_CHECKING:
    from memstrata.client import Memstrata

FORMAT = "memstrata-export"
VERSION = 1
TABLES = ("items", "journal", "tombstones")
"""The side tables an export carries whole: what a store user put, what was changed, what stays deleted."""

_REKEYED = {"items": "item", "tombstones": "tomb"}  # tables whose row keys are derived from the user (namespace)
_PAGE = 5000
_NONE = type(None)
_SHAPES: dict[str, dict[str, tuple[type, ...]]] = {
    "turn": {
        "conversation_id": (str,),
        "session_id": (str,),
        "position": (int,),
        "id": (str,),
        "speaker": (str,),
        "text": (str,),
        "image_caption": (str, _NONE),
        "time_raw": (str, _NONE),
        "time": (str, _NONE),
        "metadata": (dict,),
    },
    "session": {
        "conversation_id": (str,),
        "session_id": (str,),
        "closed": (bool,),
        "next": (int, _NONE),
        "latest": (float, int, _NONE),
    },
    "row": {"table": (str,), "conversation_id": (str,), "key": (str,), "fields": (dict,)},
    "persona_exclusion": {
        "conversation_id": (str,),
        "speaker": (str,),
        "dimension": (str,),
        "fact_id": (str,),
        "fact_text": (str, _NONE),
        "fact_turn_ids": (list,),
    },
    "end": {"counts": (dict,)},
}
_COUNTED = {"turn": "turns", "session": "sessions", "persona_exclusion": "persona_exclusions"}


# ---- export ---------------------------------------------------------------------------------------------------


def export_user(mem: Memstrata, user_id: str, out: str | Path | IO[str]) -> dict[str, int]:
    """Write everything of ``user_id``'s memory that cannot be rebuilt to ``out`` (a path or a text file).

    Returns:
        How many records of each kind were written: ``turns``, ``sessions``, ``items``, ``journal``,
        ``tombstones``, ``persona_exclusions``.

    Raises:
        LookupError: the store holds no memory of the user (:func:`users` lists those it does).
    """
    store = mem.store
    _user(user_id, "user_id")
    if not _holds(store, user_id):
        msg = f"no memory for user {user_id!r} in this store; users with memory: {users(mem)[:20]}"
        raise LookupError(msg)
    turns = [Turn.model_validate(r.payload) for r in store.get(raw_kind(), user_id=user_id)]
    body = [
        *sorted((_turn_record(t) for t in turns), key=_turn_order),
        *_session_records(store, user_id, turns),
        *_row_records(store, user_id),
        *_exclusion_records(store, user_id),
    ]
    counts = _counts(body)
    lines = [{"format": FORMAT, "version": VERSION, "user_id": user_id}, *body, {"type": "end", "counts": counts}]
    _write(out, "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in lines))
    return counts


def _turn_record(t: Turn) -> dict[str, Any]:
    return {
        "type": "turn",
        "conversation_id": t.conversation_id,
        "session_id": t.session_id,
        "position": t.position,
        "id": t.id,
        "speaker": t.speaker,
        "text": t.text,
        "image_caption": t.image_caption,
        "time_raw": t.timestamp_raw,
        "time": t.timestamp.isoformat() if t.timestamp is not None else None,
        "metadata": dict(t.meta),
    }


def _turn_order(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["conversation_id"], r["session_id"], r["position"], r["id"]


def _session_records(store: MemoryStore, user_id: str, turns: list[Turn]) -> list[dict[str, Any]]:
    """Every session with turns or a position counter: closed or not, its counter and latest time."""
    with_turns = {(t.conversation_id, t.session_id) for t in turns}
    convs = {c for c, _ in with_turns} | {r.conversation_id for r in store.sequences.table.get(user_id=user_id)}
    out = []
    for conv in sorted(convs):
        marks = store.sequences.sessions(user_id, conv)
        tails = {str(r.metadata.get("session_id")) for r in open_episodes(store, user_id, conv)}
        for session in sorted({s for c, s in with_turns if c == conv} | set(marks)):
            mark = marks.get(session)
            out.append(
                {
                    "type": "session",
                    "conversation_id": conv,
                    "session_id": session,
                    "closed": session not in tails,
                    "next": mark.next if mark is not None else None,
                    "latest": mark.latest if mark is not None else None,
                }
            )
    return out


def _row_records(store: MemoryStore, user_id: str) -> list[dict[str, Any]]:
    out = [
        {"type": "row", "table": name, "conversation_id": r.conversation_id, "key": r.key, "fields": r.fields}
        for name, table in _side_tables(store).items()
        for r in table.get(user_id=user_id)
    ]
    return sorted(out, key=lambda r: (r["table"], r["conversation_id"], r["key"]))


def _exclusion_records(store: MemoryStore, user_id: str) -> list[dict[str, Any]]:
    """The fact ids removed from a current persona version, with the fact's text and turns (to find it again when a
    re-ingest gives it another id): :func:`memstrata.repair.persona_exclusions`, as records.
    """
    return [
        {
            "type": "persona_exclusion",
            "conversation_id": e.conversation_id,
            "speaker": e.speaker,
            "dimension": e.dimension,
            "fact_id": e.fact_id,
            "fact_text": e.text,
            "fact_turn_ids": list(e.turn_ids),
        }
        for e in persona_exclusions(store, user_id)
    ]


def _counts(records: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(("turns", "sessions", *TABLES, "persona_exclusions"), 0)
    for r in records:
        counts[r["table"] if r["type"] == "row" else _COUNTED[r["type"]]] += 1
    return counts


def _write(out: str | Path | IO[str], text: str) -> None:
    if not isinstance(out, str | Path):
        out.write(text)
        return
    path = Path(out)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8", newline="\n")
    partial.replace(path)  # a reader never sees half a file


# ---- import ---------------------------------------------------------------------------------------------------


@dataclass
class Export:
    """A validated export: its user and its records by type."""

    user_id: str
    turns: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    exclusions: list[dict[str, Any]] = field(default_factory=list)


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
        mem.delete_user(target)
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


def load_export(source: str | Path | IO[str], *, store: MemoryStore | None = None) -> Export:
    """Read and check an export without writing anything (``store``: also check it has every table the file needs).

    Raises:
        ValueError: not a memstrata export, an unknown version, a malformed record, or a file cut off.
    """
    lines = _lines(source)
    header = _parse(next(lines, (1, "")), "the header")
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        msg = f'not a memstrata export: the first line must be a header with "format": {FORMAT!r}'
        raise ValueError(msg)
    if header.get("version") != VERSION:
        msg = f"memstrata export version {header.get('version')!r} is not supported: this memstrata reads {VERSION}"
        raise ValueError(msg)
    data = Export(_user(header.get("user_id"), "the header's user_id"))
    end = None
    for n, text in lines:
        if end is not None:
            msg = f"line {n}: a record after the end record"
            raise ValueError(msg)
        record = _parse((n, text), f"line {n}")
        _check_shape(record, n)
        if record["type"] == "end":
            end = record
            continue
        {"turn": data.turns, "session": data.sessions, "row": data.rows, "persona_exclusion": data.exclusions}[
            record["type"]
        ].append(_checked(record, n, store))
    _check_whole(data, end)
    return data


def _lines(source: str | Path | IO[str]) -> Iterator[tuple[int, str]]:
    lines: Iterable[str]
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_file():
            msg = f"{path}: no such file"
            raise ValueError(msg)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            msg = f"{path}: not UTF-8 text ({exc.reason})"
            raise ValueError(msg) from exc
        lines = iter(text.split("\n"))  # only "\n" ends a record (text may hold U+2028)
    else:
        lines = source
    return ((n, line) for n, line in enumerate(lines, 1) if line.strip() or n == 1)


def _parse(line: tuple[int, str], where: str) -> Any:
    try:
        return json.loads(line[1])
    except json.JSONDecodeError as exc:
        msg = f"{where} (line {line[0]}) is not JSON: {exc.msg} at column {exc.colno}"
        if line[0] == 1:
            msg = f"not a memstrata export: {msg}"
        raise ValueError(msg) from exc


def _check_shape(record: Any, n: int) -> None:
    kind = record.get("type") if isinstance(record, dict) else None
    shape = _SHAPES.get(kind) if isinstance(kind, str) else None
    if shape is None:
        msg = f"line {n}: expected a record of type {sorted(_SHAPES)}, got {str(record)[:80]!r}"
        raise ValueError(msg)
    if set(record) != {"type", *shape}:
        msg = f"line {n}: a {kind} record has the fields {sorted(shape)}, got {sorted(set(record) - {'type'})}"
        raise ValueError(msg)
    for name, types in shape.items():
        value = record[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            wanted = " or ".join("null" if t is _NONE else t.__name__ for t in types)
            msg = f"line {n}: {kind} field {name!r} must be {wanted}, got {value!r}"
            raise ValueError(msg)


def _checked(record: dict[str, Any], n: int, store: MemoryStore | None) -> dict[str, Any]:
    """The record, once what its shape does not say holds (a known table, scalar fields, a readable time)."""
    if record["type"] == "turn" and record["time"] is not None:
        try:
            datetime.fromisoformat(record["time"])
        except ValueError as exc:
            msg = f"line {n}: turn time {record['time']!r} is not an ISO 8601 time"
            raise ValueError(msg) from exc
    if record["type"] == "persona_exclusion" and record["dimension"] not in DIMENSIONS:
        msg = f"line {n}: persona dimension {record['dimension']!r} is not one of {list(DIMENSIONS)}"
        raise ValueError(msg)
    if record["type"] != "row":
        return record
    if record["table"] not in TABLES:
        msg = f"line {n}: unknown table {record['table']!r}; an export carries {list(TABLES)}"
        raise ValueError(msg)
    if store is not None and record["table"] not in _side_tables(store):
        msg = f"line {n}: this store has no {record['table']!r} table (the file needs a newer memstrata)"
        raise ValueError(msg)
    for name, value in record["fields"].items():
        try:
            check_name(name, "field name")
        except StoreError as exc:
            msg = f"line {n}: {exc}"
            raise ValueError(msg) from exc
        if not isinstance(value, str | int | float | bool):
            msg = f"line {n}: row field {name!r} must be a string, number or boolean, got {value!r}"
            raise ValueError(msg)
    return record


def _check_whole(data: Export, end: dict[str, Any] | None) -> None:
    """The records agree with each other and with the end record's counts."""
    if end is None:
        msg = "the export has no end record: the file was cut off"
        raise ValueError(msg)
    counts = _counts([*data.turns, *data.sessions, *data.rows, *data.exclusions])
    if end["counts"] != counts:
        msg = f"the end record counts {end['counts']} but the file holds {counts}: the file was changed or cut off"
        raise ValueError(msg)
    for what, keys in (
        ("turn id", [(t["conversation_id"], t["id"]) for t in data.turns]),
        ("turn place", [(t["conversation_id"], t["session_id"], t["position"]) for t in data.turns]),
        ("session", [(s["conversation_id"], s["session_id"]) for s in data.sessions]),
    ):
        if len(set(keys)) != len(keys):
            msg = f"the export holds a {what} twice, e.g. {_twice(keys)!r}"
            raise ValueError(msg)
    missing = {(t["conversation_id"], t["session_id"]) for t in data.turns} - {
        (s["conversation_id"], s["session_id"]) for s in data.sessions
    }
    if missing:
        msg = f"the export has turns of sessions it has no session record of, e.g. {sorted(missing)[0]!r}"
        raise ValueError(msg)


def _twice(keys: list[Any]) -> Any:
    seen: set[Any] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return None


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


# ---- import: writing ------------------------------------------------------------------------------------------


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
    return reapply_exclusion(mem, user_id, exclusion)


# ---- users ----------------------------------------------------------------------------------------------------


def users(mem: Memstrata) -> list[str]:
    """Every user id with memory in the store, sorted.

    Read from the side tables, not the turns: every ingest writes its sessions' position counters
    (:mod:`memstrata.memory.store.sequences`), and the items, journal and tombstones hold the rest of what an export
    carries. On an embedded store that is one ``SELECT DISTINCT`` per table; on a Chroma server, a read of the
    counter rows' metadata.
    """
    store = mem.store
    found: set[str] = set()
    for name, table in {"sequences": store.sequences.table, **_side_tables(store)}.items():
        found |= _table_users(table, sessions_only=name == "sequences")
    return sorted(found)


def _table_users(table: Table, *, sessions_only: bool) -> set[str]:
    if isinstance(table, SqliteTable):
        with sqlite_connection(table.path) as db:
            return {u for (u,) in db.execute(f'SELECT DISTINCT user_id FROM "{table.name}"')}
    if isinstance(table, ChromaTable):
        # The sequences collection also holds one row per reservation and per claimed message: the session
        # counters (one row per session) name every user as well.
        where = {"kind": "session"} if sessions_only else None
        found: set[str] = set()
        offset = 0
        while metas := table.collection.get(where=where, include=["metadatas"], limit=_PAGE, offset=offset)[
            "metadatas"
        ]:
            found |= {str(m["user_id"]) for m in metas}
            offset += _PAGE
        return found
    msg = f"users: unknown table backend {type(table).__name__}"
    raise TypeError(msg)


# ---- shared ---------------------------------------------------------------------------------------------------


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


__all__ = ["FORMAT", "TABLES", "VERSION", "Export", "export_user", "import_user", "load_export", "users"]
