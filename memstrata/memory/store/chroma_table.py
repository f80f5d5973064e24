"""The record table's server backend: rows in a Chroma collection of the store's server.

:class:`ChromaTable` is the :class:`~memstrata.memory.store.tables.Table` of a store on a Chroma server
(:func:`~memstrata.memory.store.tables.open_table` opens it), so every process and machine sees the same rows.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from memstrata.errors import StoreError
from memstrata.memory.store import tenant
from memstrata.memory.store.tables import (
    _RESERVED,
    COUNTER_FIELD,
    TABLE_PREFIX,
    MatchValue,
    Scalar,
    TableRow,
    _check_match,
    _chunks,
    _in_order,
    _merged,
    _stored,
    check_name,
)

_BATCH_CONVERSATIONS = 20  # conversations per read of several (Chroma binds each as an SQL variable)
CLAIM_FIELD = "claim_of"  # on a Chroma server, a reserved block's row names its counter here
_CLAIM_ATTEMPTS = 100_000

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
