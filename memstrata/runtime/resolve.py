"""What a :class:`~memstrata.context.Context` names, made into objects: its store and its model.

A store is opened once per process for each location and embedder and kept; a graph that an app
compiled with a :class:`~memstrata.integrations.store.MemstrataStore` uses that store's memory instead
(LangGraph hands it to every node as ``runtime.store``).

Example:
    >>> ctx = Context(user_id="alice")
    >>> resolve_model(ctx) is None  # offline unless a model is configured
    True
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel

from memstrata.context import CHROMA_URL_ENV, Context, default_data_dir
from memstrata.memory.store import MemoryStore
from memstrata.runtime.llm import chat_model
from memstrata.runtime.process import limit_blas

StoreKey = tuple[str | None, str | None, int | None]  # (server url, folder, id of the embedder)

_STORES: dict[StoreKey, MemoryStore] = {}
_HOLDERS: dict[StoreKey, int] = {}  # the open Memstrata instances of each cached store
_STORES_LOCK = threading.Lock()


def resolve_store(ctx: Context) -> MemoryStore:
    """The :class:`MemoryStore` for this context, cached per location and embedder."""
    key = _store_key(ctx)
    url, path, _ = key
    with _STORES_LOCK:
        if key not in _STORES:
            limit_blas(ctx.blas_threads)
            _STORES[key] = MemoryStore(path=path, url=url, embeddings=ctx.embeddings)
        return _STORES[key]


def hold_store(ctx: Context) -> StoreKey:
    """Count one more user (a :class:`~memstrata.client.Memstrata` instance) of this context's store, so that
    :func:`release_store` closes it only once the last one lets go; the key to release it by.
    """
    key = _store_key(ctx)
    with _STORES_LOCK:
        _HOLDERS[key] = _HOLDERS.get(key, 0) + 1
    return key


def release_store(ctx: Context | StoreKey) -> None:
    """Let go of a store (named by a context, or by the key :func:`hold_store` gave). Once nobody holds it, forget it
    and close it: its search caches (``store.caches``) are emptied and an embedded store hands back what its Chroma
    client loaded (:meth:`MemoryStore.close`). A graph run still using it, or a later use, reads and opens again.
    """
    key = ctx if isinstance(ctx, tuple) else _store_key(ctx)
    with _STORES_LOCK:
        left = _HOLDERS.get(key, 0) - 1
        if left > 0:  # another instance on the same folder (or server) and embedder still uses it
            _HOLDERS[key] = left
            return
        _HOLDERS.pop(key, None)
        store = _STORES.pop(key, None)
    if store is not None:
        store.close()


def _store_key(ctx: Context) -> StoreKey:
    url = ctx.chroma_url or os.environ.get(CHROMA_URL_ENV)
    path = None if url else str(Path(ctx.data_dir).expanduser() if ctx.data_dir else default_data_dir())
    return url, path, id(ctx.embeddings) if ctx.embeddings is not None else None


async def aresolve_store(ctx: Context, app_store: Any = None) -> MemoryStore:
    """The store a node works on: the memory behind ``app_store`` (LangGraph's ``runtime.store``) when the
    app compiled the graph with a memstrata store, else :func:`resolve_store`, off the event loop (opening
    a store creates folders and a Chroma client). An already-open store is returned at once.
    """
    app_memory = getattr(getattr(app_store, "memory", None), "store", None)
    if isinstance(app_memory, MemoryStore):
        return app_memory
    store = open_store(ctx)
    return store if store is not None else await asyncio.to_thread(resolve_store, ctx)


def open_store(ctx: Context) -> MemoryStore | None:
    """The store this process already opened for the context, if any."""
    with _STORES_LOCK:
        return _STORES.get(_store_key(ctx))


def resolve_model(ctx: Context, *, ingest: bool = False) -> BaseChatModel | None:
    """The chat model retrieval (or, with ``ingest``, ingestion) calls, or ``None`` offline.

    See :func:`memstrata.runtime.llm.chat_model`: a model object is used as is; a name (``Context.model``,
    ``Context.ingest_model`` or their environment variables) builds a ``ChatOpenAI`` at ``Context.base_url``.
    """
    return chat_model(ctx, ingest=ingest)
