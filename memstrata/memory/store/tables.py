"""A small keyed record table with two backends: the home of edges, counters and stored items.

Embedded mode keeps the rows in one SQLite file inside the data folder (WAL and a
30 s busy timeout, so several threads and processes can read and write it); server
mode keeps them in a Chroma collection of the same server, so every process and
machine sees the same rows. Rows are never only in process memory. Every read and
delete goes through the tenant scope (:mod:`memstrata.memory.store.tenant`), so it
always names its user.

This module holds what both backends share: the row (:class:`TableRow`), the protocol (:class:`Table`), the checks
of names and fields, and :func:`open_table`, which picks the backend: ``SqliteTable``
(:mod:`~memstrata.memory.store.sqlite_table`) or ``ChromaTable`` (:mod:`~memstrata.memory.store.chroma_table`).

Example:
    >>> table = open_table("edges", path=Path("/tmp/memstrata-doc"), client=None)
    >>> table.upsert([TableRow("k1", "alice", "c1", {"src": "a", "dst": "b"})])
    1
    >>> [r.fields["dst"] for r in table.get(user_id="alice", match={"src": "a"})]
    ['b']
    >>> table.delete(user_id="alice")
    1
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memstrata.errors import StoreError
from memstrata.memory.store import tenant

if TYPE_CHECKING:  # sqlite_table builds on this module: imported at run time inside open_table only
    from memstrata.memory.store.sqlite_table import Connections

__all__ = [
    "COLLECTION_PREFIX",
    "COUNTER_FIELD",
    "SQLITE_FILE",
    "TABLE_PREFIX",
    "MatchValue",
    "Scalar",
    "Table",
    "TableRow",
    "WriteCounts",
    "check_name",
    "open_table",
]

Scalar = str | int | float | bool | None
MatchValue = str | int | float | bool
COLLECTION_PREFIX = "memstrata_"  # every collection memstrata makes: a unit kind's is ``memstrata_<kind>``
TABLE_PREFIX = "memstrata__"  # two underscores: never clashes with the unit collections ``memstrata_<kind>``
SQLITE_FILE = "memstrata_tables.sqlite3"
_MAX_BATCH = 2000  # rows per write, and keys per read, of either backend (:func:`_chunks`)
_RESERVED = frozenset({"user_id", "conversation_id", tenant.SCOPE_FIELD})
COUNTER_FIELD = "next"  # the field :meth:`Table.reserve` advances
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class TableRow:
    """One record: its storage key, its tenant, and scalar fields (``None`` fields are not stored)."""

    key: str
    user_id: str
    conversation_id: str
    fields: dict[str, Scalar] = field(default_factory=dict)


class WriteCounts(dict[str, dict[str, int]]):
    """This process's writes to a table, per user and conversation (``"*"``: any conversation).

    A reader that keeps what it read per conversation compares these counts and reads again only the
    conversations whose count moved (:mod:`memstrata.memory.index.held`). Other processes' writes are not
    counted; their unit writes rebuild a snapshot, which then reads everything.
    """

    def bump(self, user_id: str, conversations: Sequence[str]) -> None:
        """Count one write of the user in each of ``conversations`` (a conversation given twice counts once)."""
        counts = self.setdefault(user_id, {})
        for conv in set(conversations):
            counts[conv] = counts.get(conv, 0) + 1


class Table(Protocol):
    """What the edge, counter and item stores need from a backend."""

    name: str

    def upsert(self, rows: Sequence[TableRow]) -> int:
        """Write whole rows (a stored row with the same key is replaced); the number written."""
        ...

    def merge(self, rows: Sequence[TableRow], *, add: Mapping[str, int] | None = None) -> int:
        """Write some fields of rows: set the named ones, add to the ``add`` ones, keep the rest."""
        ...

    def reserve(self, row: TableRow, n: int, *, floor: int = 0) -> int:
        """Take ``n`` consecutive numbers from the counter ``row`` (at ``floor`` or later); the first one.

        Atomic across processes: two callers never get overlapping numbers. ``row.fields`` are set too.
        """
        ...

    def claim(self, rows: Sequence[TableRow]) -> list[TableRow]:
        """Write each row only if its key is free; the rows stored under the keys (the first writer's win)."""
        ...

    def get(
        self,
        *,
        user_id: str,
        conversation_id: str | None = None,
        match: dict[str, MatchValue] | None = None,
        keys: Sequence[str] | None = None,
        conversations: Sequence[str] | None = None,
    ) -> list[TableRow]:
        """A user's rows, optionally of one conversation (or any of ``conversations``), with equal fields, or with
        given keys.
        """
        ...

    def delete(self, *, user_id: str, keys: Sequence[str] | None = None) -> int:
        """Delete a user's rows with the given keys (``None``: all of them); the number deleted."""
        ...

    def count(self, *, user_id: str | None = None) -> int:
        """The rows of one user, or of everyone (``None``: the operator's view)."""
        ...


def check_name(name: str, what: str = "table name") -> str:
    """``name`` when it is a plain identifier (it ends up in SQL, JSON paths and collection names)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        msg = f"{what} must be an identifier ([A-Za-z_][A-Za-z0-9_]*), got {name!r}"
        raise StoreError(msg)
    return name


def _stored(row: TableRow) -> dict[str, Scalar]:
    """The fields of a row as stored: checked names, ``None`` values left out."""
    tenant.check_user(row.user_id)
    if not isinstance(row.conversation_id, str):
        msg = f"conversation_id must be a string, got {row.conversation_id!r}"
        raise StoreError(msg)
    out: dict[str, Scalar] = {}
    for name, value in row.fields.items():
        if check_name(name, "field name") in _RESERVED:
            msg = f"field {name!r} is reserved for the tenant scope"
            raise StoreError(msg)
        if value is not None and not isinstance(value, str | int | float | bool):
            msg = f"field {name!r} must be a scalar, got {type(value).__name__}"
            raise StoreError(msg)
        if value is not None:
            out[name] = value
    return out


def _check_match(match: Mapping[str, MatchValue] | None) -> dict[str, MatchValue]:
    for name, value in (match or {}).items():
        check_name(name, "field name")
        if not isinstance(value, str | int | float | bool):
            msg = f"match value of {name!r} must be a non-null scalar, got {value!r}"
            raise StoreError(msg)
    return dict(match or {})


def _in_order(rows: Sequence[TableRow], stored: Sequence[TableRow]) -> list[TableRow]:
    """The stored row of each key, in the order the rows were given (a key another user holds is an error)."""
    by_key = {r.key: r for r in stored}
    missing = [r.key for r in rows if r.key not in by_key]
    if missing:
        msg = f"claim: {len(missing)} key(s) belong to another user, e.g. {missing[0]!r}"
        raise StoreError(msg)
    return [by_key[r.key] for r in rows]


def _chunks(items: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), _MAX_BATCH):
        yield items[start : start + _MAX_BATCH]


def _merged(old: Mapping[str, Scalar], new: Mapping[str, Scalar], add: Mapping[str, int]) -> dict[str, Scalar]:
    """``old`` with ``new`` set and ``add`` added on top (a missing number counts as 0)."""
    out = {**old, **new}
    for name, amount in add.items():
        out[name] = (old.get(name) or 0) + amount  # type: ignore[operator]
    return out


_OPEN_LOCK = threading.Lock()


def open_table(
    name: str,
    *,
    path: Path | None,
    client: Any,
    indexed: Sequence[str] = (),
    scoped: Sequence[str] = (),
    connections: Connections | None = None,
) -> Table:
    """The table ``name`` of a store.

    Args:
        name: the table (an identifier), e.g. ``"edges"``.
        path: the data folder of an embedded store: the rows go to ``path / "memstrata_tables.sqlite3"``,
            beside Chroma's own files.
        client: the Chroma client of a server store, used when ``path`` is ``None``.
        indexed: fields a ``match`` often selects few rows by (``SqliteTable``; Chroma indexes every
            metadata field itself).
        scoped: fields a ``match`` within one conversation often selects few rows by (``SqliteTable``).
        connections: the SQLite file's kept connections (a
            :class:`~memstrata.memory.store.sqlite_table.Connections`), shared by a store's tables.

    Returns:
        A :class:`~memstrata.memory.store.sqlite_table.SqliteTable` (embedded mode) or a
        :class:`~memstrata.memory.store.chroma_table.ChromaTable` (server mode).
    """
    # the backends build on the row and the checks of this module: imported here, not at its top
    from memstrata.memory.store.chroma_table import ChromaTable
    from memstrata.memory.store.sqlite_table import SqliteTable

    if path is not None:
        with _OPEN_LOCK:  # two stores of one process opening the same file create its schema one after the other
            return SqliteTable(Path(path) / SQLITE_FILE, name, indexed=indexed, scoped=scoped, connections=connections)
    if client is None:
        msg = f"table {name!r} needs a data folder or a Chroma client"
        raise StoreError(msg)
    return ChromaTable(client, name)
