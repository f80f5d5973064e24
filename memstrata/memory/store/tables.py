"""A small keyed record table with two backends: the home of edges, counters and stored items.

Embedded mode keeps the rows in one SQLite file inside the data folder (WAL and a
30 s busy timeout, so several threads and processes can read and write it); server
mode keeps them in a Chroma collection of the same server, so every process and
machine sees the same rows. Rows are never only in process memory. Every read and
delete goes through the tenant scope (:mod:`memstrata.memory.store.tenant`), so it
always names its user.

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

import json
import re
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memstrata.memory.store import tenant
from memstrata.memory.store.tenant import StoreError

Scalar = str | int | float | bool | None
MatchValue = str | int | float | bool
COLLECTION_PREFIX = "memstrata_"  # every collection memstrata makes: a unit kind's is ``memstrata_<kind>``
TABLE_PREFIX = "memstrata__"  # two underscores: never clashes with the unit collections ``memstrata_<kind>``
SQLITE_FILE = "memstrata_tables.sqlite3"
BUSY_TIMEOUT_S = 30.0
_BATCH_CONVERSATIONS = 20  # conversations per read of several (Chroma binds each as an SQL variable)
_MAX_BATCH = 2000
_RESERVED = frozenset({"user_id", "conversation_id", tenant.SCOPE_FIELD})
COUNTER_FIELD = "next"  # the field :meth:`Table.reserve` advances
CLAIM_FIELD = "claim_of"  # on a Chroma server, a reserved block's row names its counter here
_CLAIM_ATTEMPTS = 100_000
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


@contextmanager
def sqlite_connection(path: Path) -> Iterator[sqlite3.Connection]:
    """A connection of its own to a SQLite file of the data folder (never shared between threads)."""
    # isolation_level=None: no implicit transactions, so every write states its own BEGIN IMMEDIATE.
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        # With WAL, NORMAL survives a killed process intact and skips the fsync of every commit;
        # only a power cut can lose the last commits.
        db.execute("PRAGMA synchronous=NORMAL")
        yield db
    finally:
        db.close()


@contextmanager
def sqlite_transaction(path: Path) -> Iterator[sqlite3.Connection]:
    """A write transaction that takes the write lock up front (``BEGIN IMMEDIATE``) and waits for it."""
    with sqlite_connection(path) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


class SqliteTable:
    """Rows in a SQLite file, safe from several threads and processes.

    Each call opens its own connection (no connection is shared between threads);
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
    """

    def __init__(self, path: Path, name: str, *, indexed: Sequence[str] = (), scoped: Sequence[str] = ()) -> None:
        self.path, self.name = Path(path), check_name(name)
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
        return sqlite_connection(self.path)

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return sqlite_transaction(self.path)

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


_COLLECTION_LOCKS: dict[str, threading.Lock] = {}
_COLLECTION_LOCKS_GUARD = threading.Lock()


def _collection_lock(collection_id: str) -> threading.Lock:
    """One lock per Chroma collection in this process, shared by every table object opened on it."""
    with _COLLECTION_LOCKS_GUARD:
        return _COLLECTION_LOCKS.setdefault(collection_id, threading.Lock())


class ChromaTable:
    """Rows in a Chroma collection (``memstrata__<name>``), for stores on a Chroma server.

    The rows mean nothing as vectors; Chroma needs one, so each gets the constant
    ``[1.0]`` and an empty document, and the fields go into its metadata. Every write
    reads the stored rows first (Chroma merges metadata on upsert, so a replaced row
    must name the fields it drops, and :meth:`merge` needs the old counts) under one
    lock per collection: exact within a process, last writer wins across processes.

    Every row also carries its tenant's ``scope`` stamp (:func:`tenant.stamp`), so a read naming a conversation
    filters by that one field. Chroma evaluates each clause of a filter over every record it matches, and the user's
    clause matches all of the user's rows: on a 100,413-turn user behind ``chroma run``, one conversation's edges
    took 3.4 s by user and conversation (1.35M edge rows).

    Args:
        client: a Chroma client (``HttpClient`` in server mode; any client works).
        name: the table (an identifier).
    """

    def __init__(self, client: Any, name: str) -> None:
        self.name = check_name(name)
        self.collection = client.get_or_create_collection(
            TABLE_PREFIX + name, metadata={"memstrata_table": name}, embedding_function=None
        )
        self._lock = _collection_lock(str(self.collection.id))

    def upsert(self, rows: Sequence[TableRow]) -> int:
        """Write whole rows, replacing the stored rows with the same keys; the number written."""
        return self._write(rows, {}, replace=True)

    def merge(self, rows: Sequence[TableRow], *, add: Mapping[str, int] | None = None) -> int:
        """Write some fields of rows: set the named ones, add to the ``add`` ones, keep the rest."""
        return self._write(rows, {check_name(k, "field name"): int(v) for k, v in (add or {}).items()}, replace=False)

    def reserve(self, row: TableRow, n: int, *, floor: int = 0) -> int:
        """Claim a block of numbers with Chroma's ``add``, which keeps the first record written under an id.

        Blocks form a chain: the block that starts at ``s`` is the row ``<key>@s`` and records its length.
        A caller starts at the counter row's ``next`` (a hint: the end of some block) and tries to add the
        block at the first free start; if another process added it first, the caller reads that block's
        length, moves past it and tries again. The counter row is then moved forward (last writer wins:
        a stale hint costs only extra reads, never a shared number). Blocks are kept (one small row per
        reservation) and go with the user.
        """
        fields = _stored(row)
        stored = self.get(user_id=row.user_id, keys=[row.key])
        start = max(int(stored[0].fields.get(COUNTER_FIELD) or 0) if stored else 0, int(floor))
        if n > 0:
            token = uuid.uuid4().hex
            for _ in range(_CLAIM_ATTEMPTS):
                claim = f"{row.key}@{start}"
                meta = {
                    CLAIM_FIELD: row.key,
                    "n": n,
                    "owner": token,
                    **tenant.stamp(row.user_id, row.conversation_id),
                }
                self.collection.add(ids=[claim], embeddings=[[1.0]], documents=[""], metadatas=[meta])
                found = self.collection.get(ids=[claim], include=["metadatas"])["metadatas"][0] or {}
                if found.get("owner") == token:
                    break
                if found.get("user_id") != row.user_id:
                    msg = f"counter {row.key!r} belongs to another user"
                    raise StoreError(msg)
                start += max(1, int(found.get("n") or 1))  # type: ignore[arg-type]
            else:  # pragma: no cover - a chain this long means something else writes these ids
                msg = f"could not reserve numbers of {row.key!r} after {_CLAIM_ATTEMPTS} attempts"
                raise StoreError(msg)
        current = int(stored[0].fields.get(COUNTER_FIELD) or 0) if stored else 0
        self.merge(
            [TableRow(row.key, row.user_id, row.conversation_id, {**fields, COUNTER_FIELD: max(current, start + n)})]
        )
        return start

    def claim(self, rows: Sequence[TableRow]) -> list[TableRow]:
        """Chroma's ``add`` keeps the first record written under an id, even when two processes race."""
        for chunk in _chunks(list(rows)):
            self.collection.add(
                ids=[r.key for r in chunk],
                embeddings=[[1.0]] * len(chunk),
                documents=[""] * len(chunk),
                metadatas=[{**_stored(r), **tenant.stamp(r.user_id, r.conversation_id)} for r in chunk],
            )
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
        given keys), sorted by key. Several conversations are one read per ``_BATCH_CONVERSATIONS`` of them (on a
        server store, one read of many is much cheaper than many reads of one).
        """
        tenant.check_conversations(conversation_id, conversations)
        if conversations is not None:
            names = list(dict.fromkeys(conversations))
            return sorted(
                (
                    r
                    for start in range(0, len(names), _BATCH_CONVERSATIONS)
                    for r in self._get(user_id, None, match, keys, names[start : start + _BATCH_CONVERSATIONS])
                ),
                key=lambda r: r.key,
            )
        return self._get(user_id, conversation_id, match, keys, None)

    def _get(
        self,
        user_id: str,
        conversation_id: str | None,
        match: dict[str, MatchValue] | None,
        keys: Sequence[str] | None,
        conversations: list[str] | None,
    ) -> list[TableRow]:
        where = tenant.where(user_id, conversation_id, _check_match(match), conversations=conversations)
        batches = [None] if keys is None else [list(c) for c in _chunks(list(keys))]
        out = []
        wanted: dict[str, MatchValue] = {
            k: v for k, v in (("user_id", user_id), ("conversation_id", conversation_id)) if v is not None
        }
        wanted.update(_check_match(match))
        for ids in batches:
            # By key, no where: Chroma 1.5 scans every record per key when both come together. The keys are
            # derived from the tenant, and the stored fields are checked here instead.
            found = (
                self.collection.get(where=where, include=["metadatas"])
                if ids is None
                else self.collection.get(ids=ids, include=["metadatas"])
            )
            for key, meta in zip(found["ids"], found["metadatas"] or [], strict=True):
                fields = dict(meta or {})
                if any(fields.get(k) != v for k, v in wanted.items()) or (
                    conversations is not None and fields.get("conversation_id") not in conversations
                ):
                    continue
                fields.pop(tenant.SCOPE_FIELD, None)
                out.append(TableRow(key, str(fields.pop("user_id")), str(fields.pop("conversation_id")), fields))
        return sorted(out, key=lambda r: r.key)

    def delete(self, *, user_id: str, keys: Sequence[str] | None = None) -> int:
        """Delete a user's rows with the given keys (``None``: all of them); the number deleted."""
        found = [r.key for r in self.get(user_id=user_id, keys=keys)]
        for chunk in _chunks(found):
            self.collection.delete(ids=list(chunk))  # keys read back above under this user's where
        return len(found)

    def count(self, *, user_id: str | None = None) -> int:
        """The rows of one user, or of the whole collection (``None``)."""
        if user_id is None:
            return int(self.collection.count())
        return len(self.collection.get(where=tenant.where(user_id), include=[])["ids"])

    def _write(self, rows: Sequence[TableRow], add: Mapping[str, int], *, replace: bool) -> int:
        """Read the stored rows, then write each one whole (replaced, or merged with ``add``)."""
        new = {r.key: (r, _stored(r)) for r in rows}
        with self._lock:
            for chunk in _chunks(list(new)):
                found = self.collection.get(ids=list(chunk), include=["metadatas"])
                stored = {k: dict(m or {}) for k, m in zip(found["ids"], found["metadatas"] or [], strict=True)}
                metas: dict[str, dict[str, Scalar]] = {}
                for key in chunk:
                    row, fields = new[key]
                    old = stored.get(key, {})
                    if old and old.get("user_id") != row.user_id:
                        continue  # never take over another user's row
                    old = {k: v for k, v in old.items() if k not in _RESERVED}
                    # Chroma merges metadata on upsert and drops a field named as None: that is how a row is replaced.
                    fields = {**dict.fromkeys(old), **fields} if replace else _merged(old, fields, add)
                    metas[key] = {**fields, **tenant.stamp(row.user_id, row.conversation_id)}
                if metas:
                    self.collection.upsert(
                        ids=list(metas),
                        embeddings=[[1.0]] * len(metas),
                        documents=[""] * len(metas),
                        metadatas=list(metas.values()),
                    )
        return len(new)


_OPEN_LOCK = threading.Lock()


def open_table(
    name: str, *, path: Path | None, client: Any, indexed: Sequence[str] = (), scoped: Sequence[str] = ()
) -> Table:
    """The table ``name`` of a store.

    Args:
        name: the table (an identifier), e.g. ``"edges"``.
        path: the data folder of an embedded store: the rows go to ``path / "memstrata_tables.sqlite3"``,
            beside Chroma's own files.
        client: the Chroma client of a server store, used when ``path`` is ``None``.
        indexed: fields a ``match`` often selects few rows by (:class:`SqliteTable`; Chroma indexes every
            metadata field itself).
        scoped: fields a ``match`` within one conversation often selects few rows by (:class:`SqliteTable`).

    Returns:
        A :class:`SqliteTable` (embedded mode) or a :class:`ChromaTable` (server mode).
    """
    if path is not None:
        with _OPEN_LOCK:  # two stores of one process opening the same file create its schema one after the other
            return SqliteTable(Path(path) / SQLITE_FILE, name, indexed=indexed, scoped=scoped)
    if client is None:
        msg = f"table {name!r} needs a data folder or a Chroma client"
        raise StoreError(msg)
    return ChromaTable(client, name)
