"""The vector store: units and their vectors in Chroma, one collection per registered kind.

Every read builds its ``where`` clause with :func:`memstrata.memory.store.tenant.where`
and every write stamps ``user_id`` and derives the storage key from it with
:func:`memstrata.memory.store.tenant.storage_key`. No public method accepts a
query without a ``user_id``.

:class:`VectorStore` writes and reads the units. It is made of parts:
:mod:`~memstrata.memory.store.unit_collections` (the Chroma client and the collection of each kind, opened by
:mod:`~memstrata.memory.store.chroma_client`), :mod:`~memstrata.memory.store.lexical` (the lexical index, one
back-end per mode), :mod:`~memstrata.memory.store.encoded` (texts already encoded) and
:mod:`~memstrata.memory.store.write_log` (the :class:`WriteLog` search snapshots replay); a read gives back
:class:`Record` (:mod:`~memstrata.memory.store.records`).

Example:
    >>> store = VectorStore(path="/tmp/memstrata-doc")  # doctest: +SKIP
    >>> store.count("turn", user_id="alice")  # doctest: +SKIP
    0
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from pydantic import BaseModel

from memstrata.errors import EmbedderMismatchError, PartialReadError, StoreError
from memstrata.memory import levels
from memstrata.memory.embeddings import MiniLMEmbeddings
from memstrata.memory.store import tenant
from memstrata.memory.store.chroma_client import ServerGuard, _make_client
from memstrata.memory.store.encoded import EncodedTexts
from memstrata.memory.store.format import check_format
from memstrata.memory.store.lexical import MAX_BATCH, Lexicon, TermLexicon, WordLexicon, indexes_words
from memstrata.memory.store.records import Record, _concat, _owned, _records
from memstrata.memory.store.unit_collections import UnitCollections
from memstrata.memory.store.words import WordIndex
from memstrata.memory.store.write_log import Change, WriteLog

__all__ = [
    "Change",
    "EmbedderMismatchError",
    "PartialReadError",
    "Record",
    "ServerGuard",
    "VectorStore",
    "WriteLog",
    "indexes_words",
]


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
        built = client or _make_client(path=path, url=url)
        self.location = str(url or path or "<client>")
        check_format(built, location=self.location, folder=Path(path) if path is not None and not url else None)
        folder = None if client is not None or url else path
        self.chroma = UnitCollections(embeddings=self.embeddings, client=built, path=folder, location=self.location)
        self._write_lock = threading.Lock()
        self.versions = WriteLog()
        # the lexical index: an embedded store's word index in ``path``; on a server, each unit's tagged terms
        self.lexicon: Lexicon = (
            WordLexicon(WordIndex(Path(folder)), self.chroma)
            if folder is not None
            else TermLexicon(self.chroma, self._write_lock)
        )

    # ---- the Chroma side (memstrata.memory.store.unit_collections) -------------
    @property
    def client(self) -> Any:
        """The Chroma client. After :meth:`close`, an embedded store's next use opens a new one."""
        return self.chroma.client

    @property
    def words(self) -> WordIndex | None:
        """An embedded store's word index (:mod:`memstrata.memory.store.words`); ``None`` on a server."""
        return self.lexicon.words

    def collection(self, kind: str) -> Any:
        """The Chroma collection of one unit kind, checked against this store's embedder."""
        return self.chroma.collection(kind)

    def stored_kinds(self) -> list[str]:
        """Every unit kind with a collection here: the registered ones and any a plugin left behind."""
        return self.chroma.stored_kinds()

    def close(self) -> None:
        """Hand back what an embedded store's Chroma client holds (:meth:`UnitCollections.close`) and close its word
        index's idle connections.
        """
        self.chroma.close()
        if self.words is not None:
            self.words.close()

    def reindex(self, *, progress: Any = None) -> dict[str, int]:
        """Re-embed every collection with this store's embedder (after a model change)."""
        counts = self.chroma.reindex(progress=progress)
        self.versions.bump_all()
        return counts

    def _read(self, kind: str, method: str, **ask: Any) -> dict[str, Any]:
        return self.chroma.read(kind, method, **ask)

    # ---- the tenant scope (memstrata.memory.store.tenant) ----------------------
    @staticmethod
    def storage_key(user_id: str, conversation_id: str, unit_id: str) -> str:
        """The Chroma id: derived from the tenant, so two users never share a record."""
        return tenant.storage_key(user_id, conversation_id, unit_id)

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
        self.lexicon.stamp(kind, metas, documents)
        with self._write_lock:  # parallel ingestion branches share one client
            for start in range(0, len(ids), MAX_BATCH):
                stop = start + MAX_BATCH
                col.upsert(
                    ids=ids[start:stop],
                    embeddings=[np.asarray(v, dtype=np.float32) for v in vecs[start:stop]],
                    documents=list(documents[start:stop]),
                    metadatas=metas[start:stop],
                )
            self.lexicon.put(kind, metas, documents)
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
            self.lexicon.delete(kind, user_id=user_id, conversation_id=conversation_id, unit_ids=unit_ids)
            self.versions.record(user_id, kind, "delete", conversation_id=conversation_id, unit_ids=tuple(unit_ids))

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Remove every unit of a user from every unit collection present (registered here or not)."""
        where = tenant.where(user_id)
        removed = {}
        kinds = self.stored_kinds()
        for kind in kinds:
            col = self.collection(kind)
            keys = col.get(where=where, include=[])["ids"]
            for start in range(0, len(keys), MAX_BATCH):
                col.delete(ids=keys[start : start + MAX_BATCH])
            removed[kind] = len(keys)
        self.lexicon.delete_user(user_id, kinds)
        self.versions.bump(user_id)
        return removed

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
            res = _owned(self.chroma.paged(kind, where=scope, include=include), user_id, conversation_id)
        return _records(kind, res, with_vectors)

    def read_all(
        self, kind: str, *, user_id: str, conversation_id: str | None = None, with_vectors: bool = False
    ) -> list[Record]:
        """Every unit of one user's kind (of one conversation, when named), as :meth:`get` without ids or ``where``.

        Read by the storage keys the lexical index lists when it can (an embedded store's word index holds every
        unit of the kinds it covers): Chroma's read by key costs what it returns, its filtered read grows with the
        collection (a user's 58 turns among 1,000 users: 6.5 against 35.5 ms). Else Chroma's filtered read.
        """
        keys = self.lexicon.keys(kind, user_id=user_id, conversation_id=conversation_id)
        if keys is None:
            return self.get(kind, user_id=user_id, conversation_id=conversation_id, with_vectors=with_vectors)
        include = ["documents", "metadatas"] + (["embeddings"] if with_vectors else [])
        return _records(kind, self._by_keys(kind, keys, include, user_id, conversation_id), with_vectors)

    def get_keys(
        self, kind: str, *, user_id: str, keys: Sequence[tuple[str, str]], with_vectors: bool = False
    ) -> list[Record]:
        """Read units of one user by (conversation, unit id) pairs, across conversations, in one call."""
        ids = list(dict.fromkeys(self.storage_key(user_id, conv, unit) for conv, unit in keys))
        if not ids:
            return []
        include = ["documents", "metadatas"] + (["embeddings"] if with_vectors else [])
        return _records(kind, self._by_keys(kind, ids, include, user_id, None), with_vectors)

    def vectors_by_key(
        self, kind: str, *, user_id: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], np.ndarray]:
        """The vectors of one user's units by (conversation, unit id), and nothing else (no text, no metadata).

        For a reader that holds what it needs of the units but their vectors (a turn's search view, whose turn it
        has). Chroma's metadata is most of the cost of a read by key: a user's 58 turn contexts among 1,000 users
        took 23.7 ms with it and 3.6 ms without. No record leaves here, so no stamp is checked: the keys are derived
        from the user (:func:`~memstrata.memory.store.tenant.storage_key`) and only the keys asked are kept.
        A unit not stored is missing from the answer.
        """
        asked = {self.storage_key(user_id, conv, unit): (conv, unit) for conv, unit in keys}
        ids = list(asked)
        res = _concat(
            self._read(kind, "get", ids=ids[start : start + MAX_BATCH], include=["embeddings"])
            for start in range(0, len(ids), MAX_BATCH)
        )
        return {
            asked[key]: np.asarray(vec, dtype=np.float32)
            for key, vec in zip(res["ids"], res["embeddings"], strict=True)
            if key in asked
        }

    def _by_keys(
        self, kind: str, ids: Sequence[str], include: list[str], user_id: str, conversation_id: str | None
    ) -> dict[str, Any]:
        """A read by storage key, in batches Chroma accepts, kept to the tenant (:func:`_owned`)."""
        return _concat(
            _owned(
                self._read(kind, "get", ids=list(ids[start : start + MAX_BATCH]), include=include),
                user_id,
                conversation_id,
            )
            for start in range(0, len(ids), MAX_BATCH)
        )

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
        found = _records(kind, self._by_keys(kind, new, ["documents", "metadatas"], user_id, conversation_id), False)
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
        vectors: Sequence[Sequence[float] | np.ndarray] | np.ndarray,
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

        The lexical index ranks them (:mod:`memstrata.memory.store.lexical`: an embedded store's word index, a server
        store's tagged terms). Their records are then read from Chroma by key and checked against the tenant like
        every read by key.
        """
        best = self.lexicon.ranked(kind, user_id=user_id, words=words, limit=limit, conversation_id=conversation_id)
        if not best:
            return []
        found = self._by_keys(kind, best, ["documents", "metadatas", "embeddings"], user_id, conversation_id)
        order = {key: i for i, key in enumerate(best)}
        records = sorted(zip(found["ids"], _records(kind, found, True), strict=True), key=lambda p: order[p[0]])
        return [r for _, r in records]

    def index_words(self, *, progress: Any = None) -> dict[str, int]:
        """Rebuild the lexical index from the stored text of every kind it holds (``memstrata reindex --words``),
        e.g. after ``memstrata check`` found it out of step with the units.

        On a server store the index is each unit's ``terms`` metadata (:mod:`memstrata.memory.store.terms`): every
        unit gets them again.
        """
        return self.lexicon.rebuild(progress=progress)

    def terms_problems(self, kind: str, *, user_id: str, conversation_id: str | None = None) -> list[tuple[str, str]]:
        """On a server store: the ``(conversation, unit)`` keys of a searched kind whose terms are not those of their
        stored text (``memstrata check``); ``[]`` otherwise.
        """
        return self.lexicon.problems(kind, user_id=user_id, conversation_id=conversation_id)

    def holds_more_than(self, kind: str, n: int, *, user_id: str, conversation_id: str | None = None) -> bool:
        """Whether one user has more than ``n`` units of a kind (reads at most ``n + 1`` ids).

        On an embedded store whose word index holds the kind, the index answers: its rows are the stored units,
        and its tag posting list is read in milliseconds where Chroma's filtered read of the same ids took
        minutes on a cold 1M-turn store (the first query's size check, :mod:`memstrata.runtime.search`).
        """
        known = self.lexicon.holds_more_than(kind, n, user_id=user_id, conversation_id=conversation_id)
        if known is not None:
            return known
        found = self.collection(kind).get(where=tenant.where(user_id, conversation_id), limit=n + 1, include=[])
        return len(found["ids"]) > n

    def count(self, kind: str, *, user_id: str, conversation_id: str | None = None) -> int:
        """How many units of a kind one user has."""
        return len(self.collection(kind).get(where=tenant.where(user_id, conversation_id), include=[])["ids"])

    def users(self) -> list[str]:
        """Every user id with at least one turn (an operator view, for the CLI)."""
        metas = self.chroma.paged(levels.raw_kind(), include=["metadatas"])["metadatas"]
        return sorted({m["user_id"] for m in metas})
