"""Ingestion stage 2: each touched session's turns with their neighbours (the ``turn_context`` view).

A view's vector is its text encoded, or its turns' stored vectors pooled (``Context.context_vectors``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.levels.level2.turn_context import pooled_vectors, turn_contexts
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import by_conversation, read_sessions
from memstrata.nodes.common import progress
from memstrata.runtime.node import open_node
from memstrata.state import IngestState


async def write_turn_contexts(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Embed and store the contextual view of every turn of the touched sessions whose view changed."""
    ctx = runtime.context
    started = time.perf_counter()
    run = await open_node(runtime, "write_turn_contexts", ingest=True)
    store = run.store
    pooled = ctx.context_vectors == "pooled"
    sessions = await asyncio.to_thread(
        read_sessions, store, ctx.user_id, state.get("sessions", []), with_vectors=pooled
    )
    views, vectors = [], {}
    for turns, vecs in sessions.values():
        session_views = turn_contexts(turns, width=ctx.context_width)
        views += session_views
        if pooled:
            vectors |= {
                (v.conversation_id, v.id): p
                for v, p in zip(session_views, pooled_vectors(vecs, width=ctx.context_width).tolist(), strict=True)
            }
    stored = await asyncio.to_thread(_stored, store, ctx.user_id, state.get("sessions", []))
    views = [v for v in views if stored.get((v.conversation_id, v.id)) != v.embed_text()]  # only what changed
    for start in range(0, len(views), ctx.embed_batch):
        batch = views[start : start + ctx.embed_batch]
        await asyncio.to_thread(
            store.upsert,
            "turn_context",
            batch,
            documents=[v.embed_text() for v in batch],
            vectors=[vectors[(v.conversation_id, v.id)] for v in batch] if pooled else None,
            extra=[v.metadata() for v in batch],
        )
        progress("contexts", f"embedded {start + len(batch)}/{len(views)} turn contexts", done=len(batch))
    return {
        "stats": {
            "contexts_written": len(views),
            "stage_seconds": {"contexts": round(time.perf_counter() - started, 3)},
        }
    }


def _stored(store: MemoryStore, user_id: str, pairs: list[list[str]]) -> dict[tuple[str, str], str]:
    """The stored contextual views of the given sessions, by (conversation, id)."""
    return {
        (conv_id, r.unit_id): r.document
        for conv_id, sessions in by_conversation(pairs).items()
        for r in store.get(
            "turn_context", user_id=user_id, conversation_id=conv_id, where={"session_id": {"$in": sessions}}
        )
    }
