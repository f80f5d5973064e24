"""A small keyed record table with two backends: the home of edges and counters.

Embedded mode keeps the rows in one SQLite file inside the data folder (WAL,
so several processes can read and write); server mode keeps them in a Chroma
collection of the same server, so every process and machine sees the same
rows. Rows are never only in process memory. Every filter goes through the
tenant scope, so a read always names its user.

Example:
    >>> table = open_table("edges", path=Path("/tmp/memstrata-doc"), client=None)    # doctest: +SKIP
    >>> table.upsert([TableRow("k1", "alice", "c1", {"src": "a", "dst": "b"})])        # doctest: +SKIP
    1
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memstrata.memory.store import tenant
from memstrata.memory.store.tenant import StoreError

Scalar = str | int | float | bool | None
_MAX_BATCH = 2000
TABLE_PREFIX = "memstrata__"
SQLITE_FILE = "memstrata_tables.sqlite3"


@dataclass(frozen=True)
class TableRow:
    """One record: its storage key, its tenant, and scalar fields (``None`` fields are not stored)."""

    key: str
    user_id: str
    conversation_id: str
    fields: dict[str, Scalar] = field(default_factory=dict)


class Table(Protocol):
    name: str

    def upsert(self, rows: Sequence[TableRow]) -> int: ...

    def get(self, *, user_id: str, conversation_id: str | None = None, match: dict[str, Scalar] | None = None,
            keys: Sequence[str] | None = None) -> list[TableRow]: ...

    def delete(self, *, user_id: str, keys: Sequence[str] | None = None) -> int: ...

    def count(self, *, user_id: str | None = None) -> int: ...


def _fields(row: TableRow) -> dict[str, Scalar]:
    return {k: v for k, v in row.fields.items() if v is not None}


class SqliteTable:
    """Rows in a SQLite file; each call opens its own connection, so threads and processes can share it."""

    def __init__(self, path: Path, name: str) -> None:
        if not name.isidentifier():
            msg = f"table name must be an identifier, got {name!r}"
            raise StoreError(msg)
        self.path, self.name = Path(path), name
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as db, db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"CREATE TABLE IF NOT EXISTS {name} (key TEXT PRIMARY KEY, user_id TEXT NOT NULL, "
                       "conversation_id TEXT NOT NULL, data TEXT NOT NULL)")
            db.execute(f"CREATE INDEX IF NOT EXISTS {name}_tenant ON {name} (user_id, conversation_id)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30.0)

    def upsert(self, rows: Sequence[TableRow]) -> int:
        data = [(r.key, tenant.check_user(r.user_id), r.conversation_id, json.dumps(_fields(r))) for r in rows]
        with closing(self._connect()) as db, db:
            db.executemany(f"INSERT INTO {self.name} VALUES (?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
                           "user_id=excluded.user_id, conversation_id=excluded.conversation_id, data=excluded.data",
                           data)
        return len(data)

    def get(self, *, user_id: str, conversation_id: str | None = None, match: dict[str, Scalar] | None = None,
            keys: Sequence[str] | None = None) -> list[TableRow]:
        sql, args = self._where(user_id, conversation_id, match, keys)
        with closing(self._connect()) as db:
            found = db.execute(f"SELECT key, user_id, conversation_id, data FROM {self.name}{sql}", args).fetchall()
        return [TableRow(k, u, c, json.loads(d)) for k, u, c, d in found]

    def delete(self, *, user_id: str, keys: Sequence[str] | None = None) -> int:
        sql, args = self._where(user_id, None, None, keys)
        with closing(self._connect()) as db, db:
            return db.execute(f"DELETE FROM {self.name}{sql}", args).rowcount

    def count(self, *, user_id: str | None = None) -> int:
        sql, args = self._where(user_id, None, None, None) if user_id is not None else ("", [])
        with closing(self._connect()) as db:
            return int(db.execute(f"SELECT COUNT(*) FROM {self.name}{sql}", args).fetchone()[0])

    @staticmethod
    def _where(user_id: str, conversation_id: str | None, match: dict[str, Scalar] | None,
               keys: Sequence[str] | None) -> tuple[str, list[Any]]:
        clauses, args = ["user_id = ?"], [tenant.check_user(user_id)]
        if conversation_id is not None:
            clauses.append("conversation_id = ?")
            args.append(conversation_id)
        for name, value in (match or {}).items():
            if not name.isidentifier():
                msg = f"bad field name {name!r}"
                raise StoreError(msg)
            clauses.append(f"json_extract(data, '$.{name}') = ?")
            args.append(value)
        if keys is not None:
            clauses.append(f"key IN ({','.join('?' * len(keys))})" if keys else "0")
            args.extend(keys)
        return " WHERE " + " AND ".join(clauses), args


class ChromaTable:
    """Rows in a Chroma collection (``memstrata__<name>``), for stores on a Chroma server."""

    def __init__(self, client: Any, name: str) -> None:
        self.name = name
        self.collection = client.get_or_create_collection(TABLE_PREFIX + name, metadata={"memstrata_table": name},
                                                          embedding_function=None)

    def upsert(self, rows: Sequence[TableRow]) -> int:
        rows = list(rows)
        for start in range(0, len(rows), _MAX_BATCH):
            chunk = rows[start:start + _MAX_BATCH]
            metas = [{**_fields(r), "user_id": tenant.check_user(r.user_id), "conversation_id": r.conversation_id}
                     for r in chunk]
            # The rows mean nothing as vectors; Chroma needs one, so each gets the same constant.
            self.collection.upsert(ids=[r.key for r in chunk], embeddings=[[1.0]] * len(chunk),
                                   documents=[""] * len(chunk), metadatas=metas)
        return len(rows)

    def get(self, *, user_id: str, conversation_id: str | None = None, match: dict[str, Scalar] | None = None,
            keys: Sequence[str] | None = None) -> list[TableRow]:
        if keys is not None and not keys:
            return []
        found = self.collection.get(where=tenant.where(user_id, conversation_id, match),
                                    ids=list(keys) if keys is not None else None, include=["metadatas"])
        out = []
        for key, meta in zip(found["ids"], found["metadatas"] or [], strict=True):
            meta = dict(meta)
            out.append(TableRow(key, meta.pop("user_id"), meta.pop("conversation_id"), meta))
        return out

    def delete(self, *, user_id: str, keys: Sequence[str] | None = None) -> int:
        found = [r.key for r in self.get(user_id=user_id, keys=keys)]
        for start in range(0, len(found), _MAX_BATCH):
            self.collection.delete(ids=found[start:start + _MAX_BATCH])
        return len(found)

    def count(self, *, user_id: str | None = None) -> int:
        if user_id is None:
            return int(self.collection.count())
        return len(self.collection.get(where=tenant.where(user_id), include=[])["ids"])


_SQLITE_LOCK = threading.Lock()


def open_table(name: str, *, path: Path | None, client: Any) -> Table:
    """The SQLite table in ``path`` (embedded mode), else a Chroma collection of ``client`` (server mode)."""
    if path is not None:
        with _SQLITE_LOCK:  # two stores opening the same file create its schema once
            return SqliteTable(Path(path) / SQLITE_FILE, name)
    if client is None:
        msg = f"table {name!r} needs a data folder or a Chroma client"
        raise StoreError(msg)
    return ChromaTable(client, name)
