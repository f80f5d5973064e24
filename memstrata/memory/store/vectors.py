"""The vector store: units and their vectors in Chroma, one collection per registered kind.

Every read builds its ``where`` clause with :func:`memstrata.memory.store.tenant.where`
and every write stamps ``user_id`` and derives the storage key from it with
:func:`memstrata.memory.store.tenant.storage_key`. No public method accepts a
query without a ``user_id``.

Example:
    >>> store = VectorStore(path="/tmp/memstrata-doc")  # doctest: +SKIP
    >>> store.count("turn", user_id="alice")  # doctest: +SKIP
    0
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from langchain_core.embeddings import Embeddings
from pydantic import BaseModel
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from memstrata.memory import levels
from memstrata.memory.embeddings import MiniLMEmbeddings, embedder_identity
from memstrata.memory.store import tenant
from memstrata.memory.store.encoded import EncodedTexts
from memstrata.memory.store.format import check_format
from memstrata.memory.store.tables import COLLECTION_PREFIX
from memstrata.memory.store.tenant import StoreError
from memstrata.memory.store.terms import MAX_POSTINGS, TERMS, query_terms, rank, tagged_terms
from memstrata.memory.store.words import WordIndex

logger = logging.getLogger(__name__)

_MAX_BATCH = 2000
_PAGE = 10_000  # records per page of a large get


class EmbedderMismatchError(StoreError):
    """A collection was built with another embedder than the one the store was opened with."""


@dataclass(frozen=True)
class Record:
    """One stored unit as read back: its id, text, metadata and, for queries, a similarity."""

    kind: str
    unit_id: str
    document: str
    metadata: dict[str, Any]
    similarity: float | None = None

    @property
    def payload(self) -> dict[str, Any]:
        """The full unit as it was written (lists and nested fields included)."""
        return json.loads(self.metadata.get("payload", "{}"))


@dataclass(frozen=True)
class Change:
    """One write of this process, as in-process search snapshots replay it.

    ``op`` is ``upsert`` (``units`` with their ``vectors``), ``delete`` (``unit_ids`` of one
    conversation) or ``reset`` (everything of the user may have changed: rebuild).
    """

    version: int
    kind: str
    op: str
    units: tuple[Any, ...] = ()
    vectors: tuple[Any, ...] = ()
    conversation_id: str | None = None
    unit_ids: tuple[str, ...] = ()


@dataclass
class WriteLog:
    """Per-user write versions and a bounded journal of the writes behind them.

    A search snapshot at version v asks for :meth:`since` (v) and applies those
    changes in place instead of rebuilding; when the journal no longer reaches back
    to v (more than ``max_rows`` units written since), it gets ``None`` and rebuilds.
    Only unit writes are logged; edge and counter writes never are.
    """

    max_rows: int = 20_000
    counts: dict[str, int] = field(default_factory=dict)
    journal: dict[str, list[Change]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, user_id: str, kind: str, op: str, **parts: Any) -> None:
        """Bump the user's version and journal the change, dropping the oldest entries beyond ``max_rows`` units."""
        with self.lock:
            version = self.counts.get(user_id, 0) + 1
            self.counts[user_id] = version
            entries = self.journal.setdefault(user_id, [])
            entries.append(Change(version=version, kind=kind, op=op, **parts))
            rows = sum(len(c.units) + len(c.unit_ids) for c in entries)
            while len(entries) > 1 and rows > self.max_rows:
                rows -= len(entries[0].units) + len(entries[0].unit_ids)
                entries.pop(0)

    def bump(self, user_id: str) -> None:
        """A write the journal cannot describe: snapshots of this user rebuild."""
        self.record(user_id, "", "reset")

    def get(self, user_id: str) -> int:
        """The user's current write version (0 before any write)."""
        return self.counts.get(user_id, 0)

    def bump_all(self) -> None:
        """Every user's snapshots rebuild (after a re-embedding)."""
        for user in list(self.counts):
            self.bump(user)

    def since(self, user_id: str, version: int) -> list[Change] | None:
        """The changes after ``version``, oldest first; ``None`` when they are no longer all known."""
        with self.lock:
            entries = [c for c in self.journal.get(user_id, []) if c.version > version]
            current = self.counts.get(user_id, 0)
        if current == version:
            return []
        if not entries or entries[0].version != version + 1 or any(c.op == "reset" for c in entries):
            return None
        return entries


class VectorStore:
    """Chroma-backed storage for every memory unit and its vector.

    Args:
        path: folder of an embedded ``PersistentClient`` (the default mode).
        url: a Chroma server, e.g. ``http://127.0.0.1:8000``; used instead of ``path``.
        embeddings: any LangChain ``Embeddings``; the packaged MiniLM by default.
        client: an already-built Chroma client (tests, custom settings).

    Raises:
        StoreFormatError: the store was written in another format (:mod:`memstrata.memory.store.format`).
    """

    def __init__(
        self,
        *,
        path: str | Path | None = None,
        url: str | None = None,
        embeddings: Embeddings | None = None,
        client: Any = None,
    ) -> None:
        self.embeddings = embeddings or MiniLMEmbeddings()
        self.encoded = EncodedTexts(self.embeddings)  # a re-sent or unchanged text is never encoded twice
        self.embedder_name, self._dim = (
            getattr(self.embeddings, "name", None),
            getattr(self.embeddings, "dimension", None),
        )
        self._client: Any = client or _make_client(path=path, url=url)
        self._path = None if client is not None or url else path
        self.location = str(url or path or "<client>")
        check_format(self._client, location=self.location, folder=Path(path) if path is not None and not url else None)
        self._collections: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.versions = WriteLog()
        # the lexical index: an embedded store's word index (memstrata.memory.store.words); on a server, each unit's
        # tagged terms (memstrata.memory.store.terms)
        self.words = WordIndex(Path(self._path)) if self._path is not None else None  # ``path``, when it is used

    # ---- the tenant scope (memstrata.memory.store.tenant) ----------------------
    @staticmethod
    def storage_key(user_id: str, conversation_id: str, unit_id: str) -> str:
        """The Chroma id: derived from the tenant, so two users never share a record."""
        return tenant.storage_key(user_id, conversation_id, unit_id)

    # ---- collections -----------------------------------------------------------
    def _identity(self) -> tuple[str, int]:
        if self.embedder_name is None or self._dim is None:
            self.embedder_name, self._dim = embedder_identity(self.embeddings)
        assert self._dim is not None, "embedder_identity always gives the dimension"
        return str(self.embedder_name), int(self._dim)

    def collection(self, kind: str) -> Any:
        """The collection of one unit kind, checked against this store's embedder."""
        with self._lock:
            if kind not in self._collections:
                self._collections[kind] = self._open(kind)
            return self._collections[kind]

    def _open(self, kind: str) -> Any:
        name, dim = self._identity()
        meta = {"embedder": name, "dimension": dim, "hnsw:space": "cosine"}
        if kind in {lv.kind for lv in levels.levels()}:
            col = self.client.get_or_create_collection(COLLECTION_PREFIX + kind, metadata=meta, embedding_function=None)
        else:  # an unregistered kind is read only if it was stored before; never a new stray collection
            try:
                col = self.client.get_collection(COLLECTION_PREFIX + kind, embedding_function=None)
            except Exception as exc:
                msg = f"unknown unit kind {kind!r}; registered kinds: {[lv.kind for lv in levels.levels()]}"
                raise StoreError(msg) from exc
        found = col.metadata or {}
        if found.get("embedder") != name or int(found.get("dimension", -1)) != dim:
            msg = (
                f"collection {col.name!r} at {self.location} was built with embedder "
                f"{found.get('embedder')!r} (dimension {found.get('dimension')}), but this store was opened with "
                f"{name!r} (dimension {dim}). Open it with the same embedder, or re-embed everything with "
                f"`memstrata reindex` (MemoryStore.reindex())."
            )
            raise EmbedderMismatchError(msg)
        return col

    def _word_index(self, kind: str) -> WordIndex | None:
        """The word index, when this store has one and it holds the kind."""
        return self.words if self.words is not None and indexes_words(kind) else None

    def _carries_terms(self, kind: str) -> bool:
        """Whether each unit of the kind carries its tagged word terms: a searched kind of a server store."""
        return self.words is None and indexes_words(kind)

    @property
    def client(self) -> Any:
        """The Chroma client. After :meth:`close`, an embedded store's next use opens a new one."""
        client = self._client
        if client is None:
            client = self._client = _make_client(path=self._path, url=None)
        return client

    def close(self) -> None:
        """Hand back what an embedded store's Chroma client holds (its collections' HNSW indexes, loaded whole on
        the first search: 10 GB for a 1M-turn user) once no other client of this process uses the same folder.
        A later use of the store opens a new client (a call already inside Chroma when it closes may fail). A server
        store, or a client passed in, is left open. A store that reopened its client because another process wrote
        (:meth:`_reopen`) hands nothing back: chromadb still counts the client it replaced.
        """
        close = getattr(self._client, "close", None)  # chromadb >= 1.5: Client.close() releases the shared system
        if self._path is not None and close is not None:
            with self._lock:
                close()
                self._collections.clear()
                self._client = None

    def _reopen(self) -> None:
        """A new embedded client, whose index readers load what other processes wrote since.

        Embedded Chroma keeps each collection's HNSW index in memory and does not see another process's
        writes to it (metadata and documents it does see); a read that meets a new record then fails with
        "Error finding id" (chroma-core/chroma#3792). Chroma caches one system per path, so that entry is dropped first.
        A Chroma server (``url``) has no such problem and is the supported way to share a store.
        """
        from chromadb.api.shared_system_client import SharedSystemClient

        logger.info("reopening the embedded Chroma client at %s: another process wrote", self.location)
        with self._lock:
            identifier = getattr(self._client, "_identifier", None)
            if identifier is not None:  # a client without one has no cached system to drop
                SharedSystemClient._identifier_to_system.pop(identifier, None)
            self._client = _make_client(path=self._path, url=None)
            self._collections.clear()

    # ---- writes ----------------------------------------------------------------
    def upsert(
        self,
        kind: str,
        units: Sequence[BaseModel],
        *,
        documents: Sequence[str],
        vectors: Sequence[Sequence[float]] | None = None,
        extra: Sequence[dict[str, Any]] | None = None,
        keep_tokens: bool = False,
    ) -> int:
        """Write units (idempotent: the same unit always lands on the same key).

        Args:
            kind: the collection.
            units: pydantic units with ``id``, ``user_id`` and ``conversation_id``.
            documents: the text stored (and embedded unless ``vectors`` is given).
            vectors: precomputed embeddings, one per unit.
            extra: scalar metadata per unit, for filtering (session, episode, time...).
            keep_tokens: keep the documents' token vectors in :attr:`encoded` (the turns, whose facts and summaries
                pool their vectors from them: :mod:`memstrata.memory.late_chunking`).
        """
        if not units:
            return 0
        if len(documents) != len(units) or (vectors is not None and len(vectors) != len(units)):
            msg = "upsert: units, documents and vectors must have the same length"
            raise StoreError(msg)
        vecs = list(vectors) if vectors is not None else self.encoded.embed(list(documents), keep_tokens=keep_tokens)
        ids, metas = [], []
        for i, unit in enumerate(units):
            data = unit.model_dump(mode="json")
            meta = {k: v for k, v in (extra[i] if extra else {}).items() if v is not None}
            meta.update(tenant.stamp(data["user_id"], data["conversation_id"]))
            meta.update(unit_id=data["id"], kind=kind, payload=json.dumps(data, ensure_ascii=False))
            ids.append(self.storage_key(data["user_id"], data["conversation_id"], data["id"]))
            metas.append(meta)
        col = self.collection(kind)
        if self._carries_terms(kind):
            for meta, terms in zip(metas, tagged_terms([m["user_id"] for m in metas], documents), strict=True):
                if terms:  # Chroma refuses an empty list
                    meta[TERMS] = terms
        with self._write_lock:  # parallel ingestion branches share one client
            for start in range(0, len(ids), _MAX_BATCH):
                stop = start + _MAX_BATCH
                col.upsert(
                    ids=ids[start:stop],
                    embeddings=[np.asarray(v, dtype=np.float32) for v in vecs[start:stop]],
                    documents=list(documents[start:stop]),
                    metadatas=metas[start:stop],
                )
            if (words := self._word_index(kind)) is not None:
                words.put(
                    kind,
                    [
                        (m["user_id"], m["conversation_id"], m["unit_id"], doc)
                        for m, doc in zip(metas, documents, strict=True)
                    ],
                )
        for user in dict.fromkeys(m["user_id"] for m in metas):
            rows = [i for i, m in enumerate(metas) if m["user_id"] == user]
            # float32 arrays: the journal holds a vector in 1.5 kB instead of 12 kB of Python floats
            self.versions.record(
                user,
                kind,
                "upsert",
                units=tuple(units[i] for i in rows),
                vectors=tuple(np.asarray(vecs[i], dtype=np.float32) for i in rows),
            )
        return len(ids)

    def delete(self, kind: str, *, user_id: str, conversation_id: str, unit_ids: Sequence[str]) -> None:
        """Delete some units of one user."""
        if unit_ids:
            # The keys are derived from the tenant, so they name only this user's records; Chroma 1.5 is very
            # slow when ids and a where clause come together (tens of seconds on a 50k-record collection).
            keys = [self.storage_key(user_id, conversation_id, u) for u in unit_ids]
            self.collection(kind).delete(ids=keys)
            if (words := self._word_index(kind)) is not None:
                words.delete(kind, user_id=user_id, conversation_id=conversation_id, unit_ids=unit_ids)
            self.versions.record(user_id, kind, "delete", conversation_id=conversation_id, unit_ids=tuple(unit_ids))

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Remove every unit of a user from every unit collection present (registered here or not)."""
        where = tenant.where(user_id)
        removed = {}
        kinds = self.stored_kinds()
        for kind in kinds:
            col = self.collection(kind)
            keys = col.get(where=where, include=[])["ids"]
            for start in range(0, len(keys), _MAX_BATCH):
                col.delete(ids=keys[start : start + _MAX_BATCH])
            removed[kind] = len(keys)
        if self.words is not None:
            self.words.delete_user(user_id, [k for k in kinds if indexes_words(k)])
        self.versions.bump(user_id)
        return removed

    def stored_kinds(self) -> list[str]:
        """Every unit kind with a collection here: the registered ones and any a plugin left behind."""
        names = [c if isinstance(c, str) else c.name for c in self.client.list_collections()]
        found = {n.removeprefix(COLLECTION_PREFIX) for n in names if n.startswith(COLLECTION_PREFIX)}
        found = {k for k in found if not k.startswith("_")}  # edge and counter tables are not unit kinds
        return sorted(found | {lv.kind for lv in levels.levels()})

    # ---- reads -----------------------------------------------------------------
    def get(
        self,
        kind: str,
        *,
        user_id: str,
        conversation_id: str | None = None,
        unit_ids: Sequence[str] | None = None,
        where: dict[str, Any] | None = None,
        with_vectors: bool = False,
        selective: bool = False,
    ) -> list[Record]:
        """Read units of one user, optionally by id (ids need ``conversation_id``).

        ``selective``: ``where`` alone matches few records (a few sessions, the year nodes). Chroma then
        gets it without the tenant clause, which it would evaluate over every record of the collection,
        and the tenant is checked on what comes back (:func:`_owned`), as for reads by key.
        """
        scope = tenant.where(user_id, conversation_id, where)
        include = ["documents", "metadatas"] + (["embeddings"] if with_vectors else [])
        if unit_ids is not None:
            if where:
                msg = "get: give unit_ids or where, not both"
                raise StoreError(msg)
            if conversation_id is None:
                return self._get_ids_any_conversation(kind, user_id, unit_ids, where)
            keys = [self.storage_key(user_id, conversation_id, u) for u in unit_ids]
            if not keys:
                return []
            res = _owned(self._read(kind, "get", ids=keys, include=include), user_id, conversation_id)
        elif selective and where:
            res = _owned(self._read(kind, "get", where=where, include=include), user_id, conversation_id)
        else:
            res = _owned(self._paged(kind, where=scope, include=include), user_id, conversation_id)
        return _records(kind, res, with_vectors)

    def _paged(self, kind: str, **ask: Any) -> dict[str, Any]:
        """A ``get`` of any size, read in pages: Chroma 1.5 fails a single read of more than about 32k
        records with metadata ("too many SQL variables", SQLite's limit; seen on 50k facts of one user).
        """
        parts: list[dict[str, Any]] = []
        offset = 0
        while not parts or len(parts[-1]["ids"]) == _PAGE:
            parts.append(self._read(kind, "get", **ask, limit=_PAGE, offset=offset))
            offset += _PAGE
        return _concat(parts)

    def get_keys(
        self, kind: str, *, user_id: str, keys: Sequence[tuple[str, str]], with_vectors: bool = False
    ) -> list[Record]:
        """Read units of one user by (conversation, unit id) pairs, across conversations, in one call."""
        ids = list(dict.fromkeys(self.storage_key(user_id, conv, unit) for conv, unit in keys))
        if not ids:
            return []
        include = ["documents", "metadatas"] + (["embeddings"] if with_vectors else [])
        found = _concat(
            _owned(self._read(kind, "get", ids=ids[start : start + _MAX_BATCH], include=include), user_id, None)
            for start in range(0, len(ids), _MAX_BATCH)
        )
        return _records(kind, found, with_vectors)

    def recheck(
        self,
        kind: str,
        *,
        user_id: str,
        where: dict[str, Any],
        known: Collection[str],
        conversation_id: str | None = None,
    ) -> tuple[set[str], list[Record]]:
        """Which ``known`` storage keys of one user still match ``where``, and the user's matching units not known.

        A consistency check for cached reads: ids only, unless something new matches. The ``where`` goes to
        Chroma without the tenant clause, which would make Chroma evaluate ``user_id`` over every record
        (measured on 20k turns, 1,800 ids: 0.04 s without it, 0.2 s with it); ids that are not known are
        then read by key and kept to the tenant (:func:`_owned`), so no other tenant's unit leaves here.
        """
        now = set(self._read(kind, "get", where=where, include=[])["ids"])
        known = set(known)
        new = sorted(now - known)
        found: list[Record] = []
        for start in range(0, len(new), _MAX_BATCH):
            found += _records(
                kind,
                _owned(
                    self._read(kind, "get", ids=new[start : start + _MAX_BATCH], include=["documents", "metadatas"]),
                    user_id,
                    conversation_id,
                ),
                False,
            )
        return now & known, found

    def _get_ids_any_conversation(
        self, kind: str, user_id: str, unit_ids: Sequence[str], where: dict[str, Any] | None
    ) -> list[Record]:
        if not unit_ids:
            return []
        scope = tenant.where(user_id, None, {**(where or {}), "unit_id": {"$in": list(unit_ids)}})
        return _records(kind, self.collection(kind).get(where=scope, include=["documents", "metadatas"]), False)

    def query(
        self,
        kind: str,
        *,
        user_id: str,
        text: str | None = None,
        vector: Sequence[float] | None = None,
        k: int = 10,
        conversation_id: str | None = None,
        where: dict[str, Any] | None = None,
    ) -> list[Record]:
        """Dense top-``k`` of one user's units, most similar first (similarity = 1 - cosine distance)."""
        scope = tenant.where(user_id, conversation_id, where)
        if vector is None:
            if text is None:
                msg = "query: give text or vector"
                raise StoreError(msg)
            vector = self.embeddings.embed_query(text)
        col = self.collection(kind)
        res = col.query(
            query_embeddings=[list(vector)],
            n_results=max(1, k),
            where=scope,
            include=["documents", "metadatas", "distances"],
        )
        # the filter named the tenant; what comes back is checked all the same
        page = _owned(
            {name: res[name][0] for name in ("ids", "documents", "metadatas", "distances")}, user_id, conversation_id
        )
        return [
            Record(kind, meta["unit_id"], doc or "", dict(meta), 1.0 - float(dist))
            for doc, meta, dist in zip(page["documents"], page["metadatas"], page["distances"], strict=True)
        ]

    def nearest(
        self,
        kind: str,
        *,
        user_id: str,
        vectors: Sequence[Sequence[float] | np.ndarray],
        k: int,
        conversation_id: str | None = None,
    ) -> list[list[Record]]:
        """Each vector's dense top-``k`` of one user's units through Chroma's HNSW index, vectors included.

        The bounded search path (:mod:`memstrata.memory.index.bounded`) reads candidates this way instead of
        holding every vector in memory. ``Record.similarity`` is the cosine similarity. See :meth:`_tenant_read`
        for how the tenant filter is applied.
        """
        if not len(vectors):
            return []
        ask: dict[str, Any] = {
            "query_embeddings": [np.asarray(v, dtype=np.float32) for v in vectors],
            "n_results": max(1, k),
            "include": ["documents", "metadatas", "distances", "embeddings"],
        }

        def read(where: dict[str, Any] | None) -> list[tuple[dict[str, Any], bool]]:
            res = self._read(kind, "query", **ask, **({"where": where} if where else {}))
            out = []
            for i in range(len(vectors)):
                page = {name: res[name][i] for name in ("ids", "documents", "metadatas", "distances", "embeddings")}
                out.append((_owned(page, user_id, conversation_id), len(page["ids"]) >= ask["n_results"]))
            return out

        pages = self._tenant_read(kind, read, user_id, conversation_id, k)
        return [
            [
                dataclasses.replace(r, similarity=1.0 - float(d))
                for r, d in zip(_records(kind, page, True), page["distances"], strict=True)
            ]
            for page in pages
        ]

    def _read(self, kind: str, method: str, **ask: Any) -> dict[str, Any]:
        """A Chroma read (``get`` or ``query``), repeated once on a fresh client when this one is stale."""
        try:
            return getattr(self.collection(kind), method)(**ask)
        except Exception as exc:
            if self._path is None or "Error finding id" not in str(exc):
                raise
            self._reopen()  # another process wrote: this process's in-memory index readers are stale
            return getattr(self.collection(kind), method)(**ask)

    def _tenant_read(
        self,
        kind: str,
        read: Callable[[dict[str, Any] | None], list[tuple[dict[str, Any], bool]]],
        user_id: str,
        conversation_id: str | None,
        k: int,
    ) -> list[dict[str, Any]]:
        """Pages of a top-``k`` read, each kept to the tenant.

        Chroma evaluates a ``where`` clause over every record it matches before searching, which costs
        hundreds of milliseconds on a collection of tens of thousands of units (measured: 4 ms unfiltered
        against 240-450 ms with ``user_id`` as the filter, 20k-44k units). So the read first runs without
        it and keeps only this tenant's units (:func:`_owned`); when that leaves fewer than ``k`` of a full
        page (other users' or conversations' units took places), it runs again with the tenant's ``where``.
        Either way no other tenant's unit leaves this method.
        """
        first = read(None)
        if all(len(page["ids"]) >= k or not full for page, full in first):
            return [page for page, _ in first]
        return [page for page, _ in read(tenant.where(user_id, conversation_id))]

    def matching(
        self, kind: str, *, user_id: str, words: Sequence[str], limit: int, conversation_id: str | None = None
    ) -> list[Record]:
        """Up to ``limit`` of one user's units holding the words, best BM25 match first, vectors included.

        The lexical index ranks them: an embedded store's word index (:mod:`memstrata.memory.store.words`), a server
        store's tagged terms (:meth:`_matching_terms`). Their records are then read from Chroma by key in one call
        and checked against the tenant like every read by key.
        """
        if self.words is None:
            return self._matching_terms(
                kind, words=words, limit=limit, user_id=user_id, conversation_id=conversation_id
            )
        pairs = self.words.search(kind, words, user_id=user_id, limit=limit, conversation_id=conversation_id)
        records = {
            (r.metadata["conversation_id"], r.unit_id): r
            for r in self.get_keys(kind, user_id=user_id, keys=pairs, with_vectors=True)
        }
        return [records[p] for p in pairs if p in records]

    def _matching_terms(
        self, kind: str, *, user_id: str, words: Sequence[str], limit: int, conversation_id: str | None
    ) -> list[Record]:
        """:meth:`matching` on a server store: each term's postings (ids only) read under the tenant filter,
        ranked by :func:`memstrata.memory.store.terms.rank`, then the best ``limit`` records read by key.
        """
        # the user is named by the tag in each term, a conversation by its scope clause (terms.py says why)
        scope = tenant.where(user_id, conversation_id) if conversation_id is not None else None
        terms = query_terms(words)

        def ids(term: str) -> list[str]:
            holds = {TERMS: {"$contains": tenant.term_key(user_id, term)}}
            where = {"$and": [scope, holds]} if scope else holds
            return self._read(kind, "get", where=where, include=[], limit=MAX_POSTINGS)["ids"]

        with ThreadPoolExecutor(max_workers=min(4, max(1, len(terms)))) as pool:  # one HTTP read per term
            postings = dict(zip(terms, pool.map(ids, terms), strict=True))
        best = rank(postings, total=self.collection(kind).count(), limit=limit)
        if not best:
            return []
        found = _owned(
            self._read(kind, "get", ids=best, include=["documents", "metadatas", "embeddings"]),
            user_id,
            conversation_id,
        )
        order = {key: i for i, key in enumerate(best)}
        records = sorted(zip(found["ids"], _records(kind, found, True), strict=True), key=lambda p: order[p[0]])
        return [r for _, r in records]

    def index_words(self, *, progress: Any = None) -> dict[str, int]:
        """Rebuild the lexical index from the stored text of every kind it holds (``memstrata reindex --words``),
        e.g. after ``memstrata check`` found it out of step with the units.

        On a server store the index is each unit's ``terms`` metadata (:mod:`memstrata.memory.store.terms`): every
        unit gets them again.
        """
        if self.words is None:
            return self._index_terms(progress=progress)
        counts = {}
        for kind in (k for k in self.stored_kinds() if indexes_words(k)):
            self.words.clear(kind)
            data = self._paged(kind, include=["documents", "metadatas"])
            rows = [
                (m["user_id"], m["conversation_id"], m["unit_id"], d or "")
                for d, m in zip(data["documents"], data["metadatas"], strict=True)
            ]
            for start in range(0, len(rows), _MAX_BATCH):
                self.words.put(kind, rows[start : start + _MAX_BATCH])
                if progress:
                    progress(kind, min(start + _MAX_BATCH, len(rows)), len(rows))
            counts[kind] = len(rows)
        return counts

    def terms_problems(self, kind: str, *, user_id: str, conversation_id: str | None = None) -> list[tuple[str, str]]:
        """On a server store: the ``(conversation, unit)`` keys of a searched kind whose terms are not those of their
        stored text (``memstrata check``); ``[]`` otherwise.
        """
        if not self._carries_terms(kind):
            return []
        data = self._paged(kind, where=tenant.where(user_id, conversation_id), include=["documents", "metadatas"])
        expected = tagged_terms([m["user_id"] for m in data["metadatas"]], [d or "" for d in data["documents"]])
        return [
            (m["conversation_id"], m["unit_id"])
            for m, want in zip(data["metadatas"], expected, strict=True)
            if list(m.get(TERMS) or []) != want
        ]

    def _index_terms(self, *, progress: Any = None) -> dict[str, int]:
        counts = {}
        for kind in (k for k in self.stored_kinds() if indexes_words(k)):
            col = self.collection(kind)
            data = self._paged(kind, include=["documents", "metadatas"])
            metas = [dict(m) for m in data["metadatas"]]
            users = [m["user_id"] for m in metas]
            for meta, terms in zip(metas, tagged_terms(users, [d or "" for d in data["documents"]]), strict=True):
                meta.pop(TERMS, None)
                if terms:
                    meta[TERMS] = terms
            with self._write_lock:
                for start in range(0, len(metas), _MAX_BATCH):
                    col.update(ids=data["ids"][start : start + _MAX_BATCH], metadatas=metas[start : start + _MAX_BATCH])
                    if progress:
                        progress(kind, min(start + _MAX_BATCH, len(metas)), len(metas))
            counts[kind] = len(metas)
        return counts

    def holds_more_than(self, kind: str, n: int, *, user_id: str, conversation_id: str | None = None) -> bool:
        """Whether one user has more than ``n`` units of a kind (reads at most ``n + 1`` ids).

        On an embedded store whose word index holds the kind, the index answers: its rows are the stored units,
        and its tag posting list is read in milliseconds where Chroma's filtered read of the same ids took
        minutes on a cold 1M-turn store (the first query's size check, :mod:`memstrata.runtime.search`).
        """
        if (words := self._word_index(kind)) is not None:
            return words.holds_more_than(kind, n, user_id=user_id, conversation_id=conversation_id)
        found = self.collection(kind).get(where=tenant.where(user_id, conversation_id), limit=n + 1, include=[])
        return len(found["ids"]) > n

    def count(self, kind: str, *, user_id: str, conversation_id: str | None = None) -> int:
        """How many units of a kind one user has."""
        return len(self.collection(kind).get(where=tenant.where(user_id, conversation_id), include=[])["ids"])

    def users(self) -> list[str]:
        """Every user id with at least one turn (an operator view, for the CLI)."""
        metas = self._paged(levels.raw_kind(), include=["metadatas"])["metadatas"]
        return sorted({m["user_id"] for m in metas})

    def reindex(self, *, progress: Any = None) -> dict[str, int]:
        """Re-embed every collection with this store's embedder (after a model change)."""
        name, dim = self._identity()
        counts = {}
        for kind in self.stored_kinds():
            cname = COLLECTION_PREFIX + kind
            try:
                old = self.client.get_collection(cname, embedding_function=None)
            except Exception:  # noqa: BLE001 - a missing collection is nothing to reindex
                continue
            data = old.get(include=["documents", "metadatas"])
            self.client.delete_collection(cname)
            self._collections.pop(kind, None)
            col = self.collection(kind)
            texts = [m.get("embed_text") or d for d, m in zip(data["documents"], data["metadatas"], strict=True)]
            for start in range(0, len(texts), 256):
                stop = start + 256
                col.add(
                    ids=data["ids"][start:stop],
                    documents=data["documents"][start:stop],
                    metadatas=data["metadatas"][start:stop],
                    embeddings=self.embeddings.embed_documents(texts[start:stop]),
                )
                if progress:
                    progress(kind, min(stop, len(texts)), len(texts))
            counts[kind] = len(texts)
        self.versions.bump_all()
        logger.info("reindexed %s with %s (%d)", self.location, name, dim)
        return counts


def indexes_words(kind: str) -> bool:
    """Whether the word index holds a kind: the raw turns and every searched event kind."""
    try:
        level = levels.get_level(kind)
    except KeyError:  # an unregistered kind left behind by a plugin
        return False
    return level.searched and level.role in ("raw", "event")


def _owned(res: dict[str, Any], user_id: str, conversation_id: str | None) -> dict[str, Any]:
    """A by-key read, kept to the tenant: keys are derived from the user, and the stored stamp must agree.

    Reads by key pass no ``where`` to Chroma (1.5 scans every record per key when both come together);
    this check keeps the tenant guarantee without it.
    """
    keep = [
        i
        for i, m in enumerate(res.get("metadatas") or [])
        if m.get("user_id") == user_id and (conversation_id is None or m.get("conversation_id") == conversation_id)
    ]
    out = {"ids": [res["ids"][i] for i in keep]}
    for name in ("documents", "metadatas", "embeddings", "distances"):
        values = res.get(name)
        if values is not None and len(values) == len(res["ids"]):  # a field not read comes back empty or None
            out[name] = [values[i] for i in keep]
    return out


def _concat(parts: Iterable[dict[str, Any]]) -> dict[str, list[Any]]:
    """Chroma ``get`` results of several reads (batches, pages) as one."""
    out: dict[str, list[Any]] = {"ids": [], "documents": [], "metadatas": [], "embeddings": []}
    for part in parts:
        for name in out:
            values = part.get(name)
            out[name] += list(values) if values is not None else []
    return out


def _records(kind: str, res: dict[str, Any], with_vectors: bool) -> list[Record]:
    out = []
    vectors = res.get("embeddings") if with_vectors else None
    for i, (doc, meta) in enumerate(zip(res["documents"], res["metadatas"], strict=True)):
        meta = dict(meta)
        meta.pop(TERMS, None)  # the lexical index's, not the unit's
        if vectors is not None:
            meta["_vector"] = np.asarray(vectors[i], dtype=np.float32)
        out.append(Record(kind, meta["unit_id"], doc or "", meta))
    return out


def _make_client(*, path: str | Path | None, url: str | None) -> Any:
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False, allow_reset=False)
    if url:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        if not parsed.hostname:
            msg = f"bad Chroma server URL {url!r}: expected http://host:port"
            raise StoreError(msg)
        try:
            client = chromadb.HttpClient(
                host=parsed.hostname, port=parsed.port or 8000, ssl=parsed.scheme == "https", settings=settings
            )
        except Exception as exc:
            msg = f"cannot reach the Chroma server at {url}: {exc}"
            raise StoreError(msg) from exc
        return ServerGuard(client, url)
    if path is None:
        msg = "MemoryStore needs a path (embedded Chroma) or a url (Chroma server)"
        raise StoreError(msg)
    Path(path).mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def _transport_errors() -> tuple[type[BaseException], ...]:
    import httpx

    return (httpx.TransportError, ConnectionError)


# Three read races of a Chroma server (1.5.x) with another client's writes; in each the next try succeeds,
# so these calls are repeated a bounded number of times before the error is raised:
# - "Error creating hnsw segment reader: Nothing found on disk" (chroma-core/chroma#4212): a read of a
#   collection another client is writing for the first time; its vector segment is not flushed yet.
# - "Error finding id": a read that found a row in the metadata and not in the vectors, because another
#   client deleted it in between (in CI, two processes appending to one conversation: one failed a read while
#   consolidating the tree, as the other wrote). Measured on a loopback server, one client upserting and deleting
#   20 rows at a time, another reading them with their vectors: 32 of 1,230 reads failed, each repeat succeeded.
# - "Error getting embedding": the same race, met when the row is gone from the vectors' store rather than their
#   index (seen once in CI, in the test above's loop of 1,200 reads).
_TRANSIENT = ("Error creating hnsw segment reader", "Error finding id", "Error getting embedding")
_TRANSIENT_ATTEMPTS = 6


class PartialReadError(StoreError):
    """A Chroma server returned rows without their vectors: seen once in a test right after a collection's first
    write, with no error from the server. Repeated like a transient error; raised only if it lasts.
    """


def _vectors_missing(out: Any, include: Sequence[str] | None) -> bool:
    """Whether a ``get`` or ``query`` that asked for vectors returned fewer of them than ids."""
    if not isinstance(out, dict) or "embeddings" not in (include or ()) or not out.get("ids"):
        return False
    ids, vectors = out["ids"], out.get("embeddings")
    if vectors is None or (isinstance(vectors, np.ndarray) and vectors.ndim == 0):  # none (chromadb may wrap it)
        return True
    if isinstance(ids[0], list):  # a query: one list per query vector
        return len(vectors) != len(ids) or any(len(v) != len(i) for v, i in zip(vectors, ids, strict=False))
    return len(vectors) != len(ids)


def _is_transient(exc: BaseException) -> bool:
    from chromadb.errors import ChromaError

    return isinstance(exc, PartialReadError) or (
        isinstance(exc, ChromaError) and any(text in str(exc) for text in _TRANSIENT)
    )


class ServerGuard:
    """A Chroma server client, or one of its collections, whose lost connections are :class:`StoreError`.

    chromadb lets ``httpx`` errors through when the server stops or restarts; a caller
    (the CLI above all) should hear which server went away and what to do, not get a
    traceback from deep inside an HTTP library. A call the server fails with a known
    transient error (see ``_TRANSIENT``) is repeated, at most ``_TRANSIENT_ATTEMPTS`` times, and so is a read that
    asked for vectors and got fewer than its ids (:class:`PartialReadError`, raised if it lasts).
    Attributes pass through unchanged; collections a call returns come back guarded too.

    Args:
        target: a ``chromadb.HttpClient`` or a collection of one.
        url: the server's address, for the message.

    Example:
        >>> client = ServerGuard(chromadb.HttpClient(port=1), "http://127.0.0.1:1")  # doctest: +SKIP
        >>> client.list_collections()  # doctest: +SKIP
        Traceback (most recent call last):
        StoreError: the Chroma server at http://127.0.0.1:1 stopped answering (ConnectError: ...); ...
    """

    def __init__(self, target: Any, url: str) -> None:
        self._target, self._url = target, url

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        return self._guarded(value) if callable(value) else value

    def _guarded(self, method: Callable[..., Any]) -> Callable[..., Any]:
        from chromadb.api.models.Collection import Collection

        def checked(*args: Any, **kwargs: Any) -> Any:
            out = method(*args, **kwargs)
            if _vectors_missing(out, kwargs.get("include")):
                msg = (
                    f"the Chroma server at {self._url} returned rows without all their vectors "
                    f"({_TRANSIENT_ATTEMPTS} tries); re-run the same command"
                )
                raise PartialReadError(msg)
            return out

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            retrying = Retrying(
                retry=retry_if_exception(_is_transient),
                stop=stop_after_attempt(_TRANSIENT_ATTEMPTS),
                wait=wait_exponential(multiplier=0.05, max=2.0),
                reraise=True,
            )
            try:
                out = retrying(checked, *args, **kwargs)
            except _transport_errors() as exc:
                msg = (
                    f"the Chroma server at {self._url} stopped answering ({type(exc).__name__}: {exc}); "
                    "start it again and re-run the same command: what was stored is kept, the rest is redone"
                )
                raise StoreError(msg) from exc
            return ServerGuard(out, self._url) if isinstance(out, Collection) else out

        return call
