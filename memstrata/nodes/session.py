"""Per-query access to the search snapshot, query vectors and fusion weights."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from datetime import datetime
from typing import Any

import numpy as np

from memstrata.context import Context, aresolve_store
from memstrata.memory.ranking import Weights
from memstrata.memory.search import MemoryIndex

_VECTORS: OrderedDict[tuple[int, str], np.ndarray] = OrderedDict()
_VECTORS_LOCK = threading.Lock()
_VECTOR_CACHE_SIZE = 2048


async def open_index(ctx: Context) -> MemoryIndex:
    """The user's search snapshot (loaded once per process, refreshed after writes)."""
    store = await aresolve_store(ctx)
    cached = MemoryIndex.fresh(store, user_id=ctx.user_id, conversation_id=ctx.conversation_id)
    if cached is not None:
        return cached
    return await asyncio.to_thread(MemoryIndex.load, store, user_id=ctx.user_id, conversation_id=ctx.conversation_id)


async def embed_queries(ctx: Context, texts: list[str]) -> np.ndarray:
    """Query vectors in one batch; repeated texts come from a small in-process cache."""
    store = await aresolve_store(ctx)
    key_of = id(store.embeddings)
    with _VECTORS_LOCK:
        missing = [t for t in dict.fromkeys(texts) if (key_of, t) not in _VECTORS]
    if missing:
        vecs = await asyncio.to_thread(store.embeddings.embed_documents, missing)
        with _VECTORS_LOCK:
            for text, vec in zip(missing, vecs, strict=True):
                _VECTORS[(key_of, text)] = np.asarray(vec, dtype=np.float32)
            while len(_VECTORS) > _VECTOR_CACHE_SIZE:
                _VECTORS.popitem(last=False)
    with _VECTORS_LOCK:
        return np.stack([_VECTORS[(key_of, t)] for t in texts]) if texts else np.zeros((0, 1))


async def query_vectors(ctx: Context, queries: list[dict[str, Any]]) -> np.ndarray:
    """One vector per query dict; a query may name another text to embed (``dense_text``).

    Offline rewrites (pseudo-relevance-feedback terms, the missing-info keywords)
    are bags of words: they search BM25 with their own words and the dense index
    with the question they came from, whose vector is already cached. That saves a
    model call per rewrite without losing what the rewrite adds.
    """
    return await embed_queries(ctx, [q.get("dense_text") or q["text"] for q in queries])


def weights(ctx: Context) -> Weights:
    return Weights(semantic=ctx.w_semantic, temporal=ctx.w_temporal, robustness=ctx.w_robustness,
                   tau_days=ctx.decay_tau_days, eta=ctx.decay_eta, episode_prior=ctx.episode_prior,
                   neighbour=ctx.neighbour_share, speaker=ctx.speaker_prior)


def reference_now(ctx: Context, index: MemoryIndex) -> datetime | None:
    """``Context.now``, else the namespace's latest turn, so results never depend on the day they run."""
    return ctx.now or index.latest


def active_queries(state: dict[str, Any]) -> list[dict[str, Any]]:
    return list(state.get("active") or [])


__all__ = ["active_queries", "embed_queries", "open_index", "query_vectors", "reference_now", "weights"]
