"""Reading an export back: every record checked against its shape, and the file as a whole, before anything is
written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from memstrata.errors import StoreError
from memstrata.memory.levels import DIMENSIONS
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.tables import check_name
from memstrata.portable.format import FORMAT, TABLES, VERSION, _counts, _side_tables, _user

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


@dataclass
class Export:
    """A validated export: its user and its records by type."""

    user_id: str
    turns: list[dict[str, Any]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    exclusions: list[dict[str, Any]] = field(default_factory=list)


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
