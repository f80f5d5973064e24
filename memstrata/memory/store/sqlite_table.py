"""The record table's embedded backend: rows in one SQLite file of the data folder.

:class:`SqliteTable` is the :class:`~memstrata.memory.store.tables.Table` of an embedded store
(:func:`~memstrata.memory.store.tables.open_table` opens it). A store keeps each SQLite file's connections open
between calls (:class:`Connections`, the word index's too), since opening one costs more than most of the reads
made on it; :func:`sqlite_connection` opens one for a one-off use. Every connection has the same settings: WAL and
a 30 s busy timeout let several threads and processes read and write the file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from memstrata.errors import StoreError
from memstrata.memory.store import tenant
from memstrata.memory.store.tables import (
    COUNTER_FIELD,
    MatchValue,
    TableRow,
    _check_match,
    _chunks,
    _in_order,
    _merged,
    _stored,
    check_name,
)

BUSY_TIMEOUT_S = 30.0


@contextmanager
def sqlite_connection(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of its own to a SQLite file of the data folder, closed on leaving (a one-off use)."""
    db = _open(path)
    try:
        yield db
    finally:
        db.close()


def _open(path: Path) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions, so every write states its own BEGIN IMMEDIATE.
    # check_same_thread=False: a kept connection serves one thread at a time, not always the same one.
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    # With WAL, NORMAL survives a killed process intact and skips the fsync of every commit;
    # only a power cut can lose the last commits.
    db.execute("PRAGMA synchronous=NORMAL")
    return db


@contextmanager
def _in_transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction that takes the write lock up front (``BEGIN IMMEDIATE``) and waits for it."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


# Idle connections a file keeps: one per thread that reads at once (a new snapshot reads with 4).
KEEP_IDLE = 4


class Connections:
    """The connections to one SQLite file, kept open between uses and lent to one thread at a time.

    Opening a connection (and reading the file's schema on its first statement) cost 0.5-3 ms here, more than the
    reads a chat write or a user's first query makes on it. A connection is taken for one call and given back; at
    most :data:`KEEP_IDLE` wait, the others are closed. One that met an error, or is given back inside a transaction,
    is closed rather than kept. Every statement outside ``BEGIN`` sees the file's latest commit, as on a new
    connection. A forked child never uses its parent's connections; :meth:`close` closes the idle ones, and a later
    use opens new ones.

    Example:
        >>> import tempfile
        >>> files = Connections(Path(tempfile.mkdtemp()) / "t.sqlite3")
        >>> with files.transaction() as db:
        ...     _ = db.execute("CREATE TABLE t (x)")
        >>> with files.connection() as db:
        ...     db.execute("SELECT count(*) FROM t").fetchone()
        (0,)
        >>> files.idle()
        1
    """

    def __init__(self, path: Path, *, keep: int = KEEP_IDLE) -> None:
        self.path, self.keep = Path(path), keep
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for one call, given back (or closed) on leaving."""
        db = self._take()
        try:
            yield db
        except BaseException:
            db.close()
            raise
        self._give(db)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``) on a kept connection."""
        with self.connection() as db, _in_transaction(db) as open_db:
            yield open_db

    def idle(self) -> int:
        """How many connections wait unused."""
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        """Close the idle connections; one in use now is given back as any other (kept while fewer than ``keep``
        wait).
        """
        with self._lock:
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()

    def _take(self) -> sqlite3.Connection:
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's connections are the parent's
                self._idle, self._pid = [], os.getpid()
            if self._idle:
                return self._idle.pop()
        return _open(self.path)

    def _give(self, db: sqlite3.Connection) -> None:
        if not db.in_transaction:
            with self._lock:
                if self._pid == os.getpid() and len(self._idle) < self.keep:
                    self._idle.append(db)
                    return
        db.close()


class SqliteTable:
    """Rows in a SQLite file, safe from several threads and processes.

    Each call takes a connection of its own from ``connections`` (no two threads use one at once);
    writes run inside ``BEGIN IMMEDIATE``, so they take the write lock up front and
    wait for it (up to the busy timeout) instead of failing when another process writes.

    Args:
        path: the SQLite file (created with its folder when missing).
        name: the table inside it (an identifier).
        indexed: fields a ``match`` often selects few rows by (the counters' ``tier``): each gets an index on the
            user and the field, so such a read costs what it returns, not a scan of the user's rows.
        scoped: fields a ``match`` within one conversation often selects few rows by (the edges' ``src_kind``):
            each gets an index on the user, the conversation and the field, so such a read costs what it returns,
            not a scan of the conversation's rows.
        connections: the file's kept connections, shared by the tables of one file (a store's); by default the
            table keeps its own.
    """

    def __init__(
        self,
        path: Path,
        name: str,
        *,
        indexed: Sequence[str] = (),
        scoped: Sequence[str] = (),
        connections: Connections | None = None,
    ) -> None:
        self.path, self.name = Path(path), check_name(name)
        self.connections = connections if connections is not None else Connections(self.path)
        if self.connections.path != self.path:
            msg = f"table {name!r} is in {self.path}, but its connections are to {self.connections.path}"
            raise StoreError(msg)
        self.indexed = frozenset(check_name(f, "field name") for f in indexed)
        self.scoped = frozenset(check_name(f, "field name") for f in scoped)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")  # persistent in the file: readers never block the writer
        with self._write() as db:
            db.execute(
                f'CREATE TABLE IF NOT EXISTS "{name}" (key TEXT PRIMARY KEY, user_id TEXT NOT NULL, '
                "conversation_id TEXT NOT NULL, data TEXT NOT NULL)"
            )
            db.execute(f'CREATE INDEX IF NOT EXISTS "{name}_tenant" ON "{name}" (user_id, conversation_id)')
            for field in sorted(self.indexed):  # the same expression as _wheres writes, or SQLite will not use it
                value = f"json_extract(data, '$.{field}')"
                db.execute(f'CREATE INDEX IF NOT EXISTS "{name}_{field}" ON "{name}" (user_id, {value})')
            for field in sorted(self.scoped):  # the same expression too, after the user and the conversation
                value = f"json_extract(data, '$.{field}')"
                columns = f"user_id, conversation_id, {value}"
                db.execute(f'CREATE INDEX IF NOT EXISTS "{name}_scoped_{field}" ON "{name}" ({columns})')

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.connection()

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.transaction()

    def upsert(self, rows: Sequence[TableRow]) -> int:
        """Write whole rows in one transaction, replacing a stored row with the same key (not another user's)."""
        data = [(r.key, r.user_id, r.conversation_id, json.dumps(_stored(r))) for r in rows]
        with self._write() as db:
            # The WHERE keeps a key that somehow belongs to another user from being taken over.
            db.executemany(
                f'INSERT INTO "{self.name}" VALUES (?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET '
                "conversation_id=excluded.conversation_id, data=excluded.data "
                "WHERE user_id=excluded.user_id",
                data,
            )
        return len(data)

    def merge(self, rows: Sequence[TableRow], *, add: Mapping[str, int] | None = None) -> int:
        """One statement per row, so an increment is atomic even across processes.

        The update sets the row's fields with ``json_patch`` and then adds each ``add``
        amount to the stored value (``data`` is the old row throughout the SET clause).
        """
        add = {check_name(k, "field name"): int(v) for k, v in (add or {}).items()}
        latest = {r.key: r for r in rows}  # a key given twice counts once, as on Chroma
        data = [
            (r.key, r.user_id, r.conversation_id, json.dumps(_merged({}, _stored(r), add))) for r in latest.values()
        ]
        patched = "json_patch(data, excluded.data)"
        for name in add:
            path = f"'$.{name}'"  # a checked identifier, safe inside the literal
            patched = (
                f"json_set({patched}, {path}, "
                f"COALESCE(json_extract(data, {path}), 0) + json_extract(excluded.data, {path}))"
            )
        with self._write() as db:
            db.executemany(
                f'INSERT INTO "{self.name}" VALUES (?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET '
                f"data={patched} WHERE user_id=excluded.user_id",
                data,
            )
        return len(data)

    def reserve(self, row: TableRow, n: int, *, floor: int = 0) -> int:
        """Read and advance the counter inside one ``BEGIN IMMEDIATE`` transaction (the write lock is held)."""
        fields = _stored(row)
        with self._write() as db:
            found = db.execute(f'SELECT user_id, data FROM "{self.name}" WHERE key = ?', (row.key,)).fetchone()
            if found is not None and found[0] != row.user_id:
                msg = f"counter {row.key!r} belongs to another user"
                raise StoreError(msg)
            old = json.loads(found[1]) if found is not None else {}
            start = max(int(old.get(COUNTER_FIELD) or 0), int(floor))
            data = {**old, **fields, COUNTER_FIELD: start + n}
            db.execute(
                f'INSERT INTO "{self.name}" VALUES (?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET '
                "conversation_id=excluded.conversation_id, data=excluded.data",
                (row.key, row.user_id, row.conversation_id, json.dumps(data)),
            )
        return start

    def claim(self, rows: Sequence[TableRow]) -> list[TableRow]:
        """Insert each row only if its key is free; the rows stored under the keys, in the order given."""
        data = [(r.key, r.user_id, r.conversation_id, json.dumps(_stored(r))) for r in rows]
        with self._write() as db:
            db.executemany(f'INSERT INTO "{self.name}" VALUES (?, ?, ?, ?) ON CONFLICT(key) DO NOTHING', data)
        return _in_order(rows, self.get(user_id=rows[0].user_id, keys=[r.key for r in rows]) if rows else [])

    def get(
        self,
        *,
        user_id: str,
        conversation_id: str | None = None,
        match: dict[str, MatchValue] | None = None,
        keys: Sequence[str] | None = None,
        conversations: Sequence[str] | None = None,
    ) -> list[TableRow]:
        """A user's rows (optionally of one conversation or any of ``conversations``, with equal fields, or with
        given keys), sorted by key.
        """
        tenant.check_conversations(conversation_id, conversations)
        if conversations is not None:
            found = [
                r
                for c in dict.fromkeys(conversations)
                for r in self.get(user_id=user_id, conversation_id=c, match=match, keys=keys)
            ]
            return sorted(found, key=lambda r: r.key)
        wheres = list(self._wheres(user_id, conversation_id, match, keys, self.indexed | self.scoped))
        rows: list[tuple[str, str, str, str]] = []
        with self._connect() as db:
            for sql, args in wheres:
                rows += db.execute(f'SELECT key, user_id, conversation_id, data FROM "{self.name}"{sql}', args)
        return sorted((TableRow(k, u, c, json.loads(d)) for k, u, c, d in rows), key=lambda r: r.key)

    def delete(self, *, user_id: str, keys: Sequence[str] | None = None) -> int:
        """Delete a user's rows with the given keys (``None``: all of them) in one transaction; the number deleted."""
        wheres, removed = list(self._wheres(user_id, None, None, keys)), 0
        if wheres:
            with self._write() as db:  # one transaction, however many chunks of keys
                for sql, args in wheres:
                    removed += db.execute(f'DELETE FROM "{self.name}"{sql}', args).rowcount
        return removed

    def count(self, *, user_id: str | None = None) -> int:
        """The rows of one user, or of everyone (``None``)."""
        sql, args = next(self._wheres(user_id, None, None, None)) if user_id is not None else ("", [])
        with self._connect() as db:
            return int(db.execute(f'SELECT COUNT(*) FROM "{self.name}"{sql}', args).fetchone()[0])

    @staticmethod
    def _wheres(
        user_id: str,
        conversation_id: str | None,
        match: dict[str, MatchValue] | None,
        keys: Sequence[str] | None,
        indexed: frozenset[str] = frozenset(),
    ) -> Iterator[tuple[str, list[Any]]]:
        """The WHERE clause and its arguments: one per chunk of ``keys`` (SQLite caps bound variables). An
        ``indexed`` field's path is written out (a checked name), so the clause matches its index's expression.

        A read by keys looks each key up in the primary key's index: the unary ``+`` keeps SQLite from reading
        through an index that starts with the user instead, which it picked for a few hundred keys (no
        statistics are kept) and which visits every row of the user, 150 ms for 300 keys of a 1M-turn user
        against 4 ms by key. The user and conversation are still compared on every row found.
        """
        by_key = "+" if keys is not None else ""
        clauses = [f"{by_key}user_id = ?"]
        args: list[MatchValue] = [tenant.check_user(user_id)]
        if conversation_id is not None:
            clauses.append(f"{by_key}conversation_id = ?")
            args.append(conversation_id)
        for name, value in _check_match(match).items():
            if name in indexed:
                clauses.append(f"json_extract(data, '$.{name}') = ?")
                args.append(value)
            else:
                clauses.append("json_extract(data, ?) = ?")
                args.extend([f"$.{name}", value])
        if keys is None:
            yield " WHERE " + " AND ".join(clauses), args
            return
        for chunk in _chunks(list(keys)):
            yield " WHERE " + " AND ".join([*clauses, f"key IN ({','.join('?' * len(chunk))})"]), [*args, *chunk]
