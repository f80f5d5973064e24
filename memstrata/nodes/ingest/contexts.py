"""Ingestion stage 2: each touched session's turns embedded with their neighbours (the ``turn_context`` view)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.levels.turn_context import turn_contexts
from memstrata.nodes.common import progress
from memstrata.nodes.ingest.turns import read_sessions
from memstrata.resources import aresolve_store
from memstrata.state import IngestState


async def write_turn_contexts(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Embed and store the contextual view of every turn of the touched sessions."""
    ctx = runtime.context
    started = time.perf_counter()
    store = await aresolve_store(ctx)
    sessions = await asyncio.to_thread(read_sessions, store, ctx.user_id, state.get("sessions", []))
    views = [v for turns, _ in sessions.values() for v in turn_contexts(turns, width=ctx.context_width)]
    for start in range(0, len(views), ctx.embed_batch):
        batch = views[start:start + ctx.embed_batch]
        await asyncio.to_thread(store.upsert, "turn_context", batch, documents=[v.embed_text() for v in batch],
                                extra=[v.metadata() for v in batch])
        progress("contexts", f"embedded {start + len(batch)}/{len(views)} turn contexts", done=len(batch))
    return {"stats": {"contexts_written": len(views),
                      "stage_seconds": {"contexts": round(time.perf_counter() - started, 3)}}}
