"""The vector store's Chroma side: its client, and one collection per unit kind checked against its embedder.

:class:`UnitCollections` is a part of :class:`~memstrata.memory.store.vectors.VectorStore`: it holds the Chroma
client, opens each kind's collection on first use, and repeats a read that met another process's write. A
collection is made only for a registered kind, and one built with another embedder is an
:class:`EmbedderMismatchError`.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from memstrata.errors import EmbedderMismatchError, StoreError
from memstrata.memory import levels
from memstrata.memory.embeddings import embedder_identity
from memstrata.memory.store.chroma_client import _make_client
from memstrata.memory.store.records import _concat
from memstrata.memory.store.tables import COLLECTION_PREFIX

logger = logging.getLogger(f"{__package__}.vectors")  # a logging setup naming the vector store's logger gets these

PAGE = 10_000  # records per page of a large get
# Records written to a collection before Chroma saves its HNSW index (what it saves is what changed). Chroma keeps
# every write in its log until the index holding it is saved, and each later write pays for the log it keeps: at
# Chroma's 1,000, a chat message that closes nothing cost 66 ms at the start of LoCoMo's conv-26 and 150 ms 300
# messages in (3,052 log entries); at 100 it cost 85 ms there (320 entries), and a bulk ingest of conv-30 the same.
HNSW_SYNC = 100


class UnitCollections:
    """The Chroma client of a vector store and its collections, one per unit kind, opened on first use.

    Args:
        embeddings: the store's embedder; a collection built with another is refused.
        client: the Chroma client.
        path: the embedded store's folder, or ``None`` (a server, or a client passed in): only an embedded client is
            closed by :meth:`close` and reopened when another process wrote.
        location: where the store is, for messages.
    """

    def __init__(self, *, embeddings: Embeddings, client: Any, path: str | Path | None, location: str) -> None:
        self.embeddings = embeddings
        self.embedder_name: str | None = getattr(embeddings, "name", None)
        self._dim: int | None = getattr(embeddings, "dimension", None)
        self._client = client
        self.path = path
        self.location = location
        self._collections: dict[str, Any] = {}
        self._lock = threading.Lock()

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
        meta = {"embedder": name, "dimension": dim, "hnsw:space": "cosine", "hnsw:sync_threshold": HNSW_SYNC}
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
        _save_index_often(col)
        return col

    @property
    def client(self) -> Any:
        """The Chroma client. After :meth:`close`, an embedded store's next use opens a new one."""
        client = self._client
        if client is None:
            client = self._client = _make_client(path=self.path, url=None)
        return client

    def close(self) -> None:
        """Hand back what an embedded store's Chroma client holds (its collections' HNSW indexes, loaded whole on
        the first search: 10 GB for a 1M-turn user) once no other client of this process uses the same folder.
        A later use of the store opens a new client (a call already inside Chroma when it closes may fail). A server
        store, or a client passed in, is left open. A store that reopened its client because another process wrote
        (:meth:`reopen`) hands nothing back: chromadb still counts the client it replaced.
        """
        close = getattr(self._client, "close", None)  # chromadb >= 1.5: Client.close() releases the shared system
        if self.path is not None and close is not None:
            with self._lock:
                close()
                self._collections.clear()
                self._client = None

    def reopen(self) -> None:
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
            self._client = _make_client(path=self.path, url=None)
            self._collections.clear()

    def read(self, kind: str, method: str, **ask: Any) -> dict[str, Any]:
        """A Chroma read (``get`` or ``query``), repeated once on a fresh client when this one is stale."""
        try:
            return getattr(self.collection(kind), method)(**ask)
        except Exception as exc:
            if self.path is None or "Error finding id" not in str(exc):
                raise
            self.reopen()  # another process wrote: this process's in-memory index readers are stale
            return getattr(self.collection(kind), method)(**ask)

    def paged(self, kind: str, **ask: Any) -> dict[str, Any]:
        """A ``get`` of any size, read in pages: Chroma 1.5 fails a single read of more than about 32k
        records with metadata ("too many SQL variables", SQLite's limit; seen on 50k facts of one user).
        """
        parts: list[dict[str, Any]] = []
        offset = 0
        while not parts or len(parts[-1]["ids"]) == PAGE:
            parts.append(self.read(kind, "get", **ask, limit=PAGE, offset=offset))
            offset += PAGE
        return _concat(parts)

    def stored_kinds(self) -> list[str]:
        """Every unit kind with a collection here: the registered ones and any a plugin left behind."""
        names = [c if isinstance(c, str) else c.name for c in self.client.list_collections()]
        found = {n.removeprefix(COLLECTION_PREFIX) for n in names if n.startswith(COLLECTION_PREFIX)}
        found = {k for k in found if not k.startswith("_")}  # edge and counter tables are not unit kinds
        return sorted(found | {lv.kind for lv in levels.levels()})

    def reindex(self, *, progress: Any = None) -> dict[str, int]:
        """Re-embed every collection with this store's embedder (after a model change); the count per kind."""
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
        logger.info("reindexed %s with %s (%d)", self.location, name, dim)
        return counts


def _save_index_often(col: Any) -> None:
    """A collection made before :data:`HNSW_SYNC` saves its index every :data:`HNSW_SYNC` records from now on (a
    change of its configuration, kept by Chroma). A store that cannot be changed (read-only) keeps its setting:
    only its writes' speed depends on it.
    """
    config = getattr(col, "configuration", None) or {}
    sync = (config.get("hnsw") or {}).get("sync_threshold")
    if sync is None or sync <= HNSW_SYNC:
        return
    try:
        col.modify(configuration={"hnsw": {"sync_threshold": HNSW_SYNC}})
    except Exception as exc:  # noqa: BLE001 - any failure leaves the collection as it was, which still works
        logger.info("collection %s keeps saving its index every %s records: %s", col.name, sync, exc)
