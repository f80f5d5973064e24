"""Ingestion stage 2: each touched session's turns with their neighbours (the ``turn_context`` view).

A write that only appended to a session's open tail reads just the tail's last turns and rewrites the views of the
appended turns and of the ``episodes.context_width`` turns before them.

A view's vector is its text encoded, or its turns' stored vectors pooled (``Context.episodes.context_vectors``).

The same sessions' turns longer than the encoder reads are stored as passages here too
(:mod:`memstrata.memory.levels.level2.passage`): a rebuild, which stores no new turn, rewrites them with the views.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from langgraph.graph import END
from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.levels.level2.passage import PASSAGE, long_turns, turn_passages
from memstrata.memory.levels.level2.turn_context import pooled_vectors, turn_contexts
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import by_conversation, read_session_ends, read_sessions
from memstrata.memory.tokens import TokenCounter
from memstrata.nodes.common import progress
from memstrata.runtime.node import open_node
from memstrata.state import IngestState


def route_contexts(state: IngestState) -> str:
    """A deferred write, or one that only appended to open tails, is done once the views are written; so is a
    ``complete`` that found nothing pending. Any other goes on.
    """
    done = state.get("defer") or (not state.get("sessions") and (state.get("appended") or state.get("complete")))
    return END if done else "segment_episodes"


async def write_turn_contexts(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Embed and store the contextual view of every turn of the touched sessions whose view changed, and the
    passages of their long turns.
    """
    ctx = runtime.context
    started = time.perf_counter()
    run = await open_node(runtime, "write_turn_contexts", ingest=True)
    store = run.store
    pooled = ctx.episodes.context_vectors == "pooled"
    sessions = await asyncio.to_thread(
        read_sessions, store, ctx.user_id, state.get("sessions", []), with_vectors=pooled
    )
    appended = state.get("appended", [])
    if appended:  # turns appended to an open tail: only their views and their predecessors' change
        sessions |= await asyncio.to_thread(
            read_session_ends, store, ctx.user_id, appended, back=2 * ctx.episodes.context_width, with_vectors=pooled
        )
    views = []
    vectors: dict[tuple[str, str], list[float]] = {}
    for turns, vecs in sessions.values():
        session_views = turn_contexts(turns, width=ctx.episodes.context_width)
        views += session_views
        if pooled:
            assert vecs is not None, "sessions are read with their vectors when contexts are pooled"
            vectors |= {
                (v.conversation_id, v.id): p
                for v, p in zip(
                    session_views, pooled_vectors(vecs, width=ctx.episodes.context_width).tolist(), strict=True
                )
            }
    stored = await asyncio.to_thread(_stored, store, ctx.user_id, state.get("sessions", []))
    stored |= await asyncio.to_thread(_stored_views, store, ctx.user_id, views if appended else [])
    # only what changed; of an appended tail's turns read for their neighbours only, no view is rewritten
    edge = {(c, str(s)): int(p) - ctx.episodes.context_width for c, s, p in appended}
    context_only = {
        (t.conversation_id, t.id)
        for turns, _ in sessions.values()
        for t in turns
        if t.position < edge.get((t.conversation_id, t.session_id), -1)
    }
    views = [
        v
        for v in views
        if stored.get((v.conversation_id, v.id)) != v.embed_text()
        and (v.conversation_id, v.turn_id) not in context_only
    ]
    first = {(c, str(s)): int(p) for c, s, p in appended}  # an appended tail's turns before these are stored
    long = [
        t
        for turns, _ in sessions.values()
        for t in long_turns(turns)
        if t.position >= first.get((t.conversation_id, t.session_id), 0)
    ]
    parts = await asyncio.to_thread(_write_passages, store, ctx, long, state.get("sessions", []))
    for start in range(0, len(views), ctx.episodes.embed_batch):
        batch = views[start : start + ctx.episodes.embed_batch]
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
            "passages_written": parts,
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


def _stored_views(store: MemoryStore, user_id: str, views: list[Any]) -> dict[tuple[str, str], str]:
    """The stored texts of these views, by (conversation, id)."""
    out: dict[tuple[str, str], str] = {}
    for conv_id, ids in by_conversation([[v.conversation_id, v.id] for v in views]).items():
        out |= {
            (conv_id, r.unit_id): r.document
            for r in store.get("turn_context", user_id=user_id, conversation_id=conv_id, unit_ids=ids)
        }
    return out


def _write_passages(store: MemoryStore, ctx: Context, long: list[Any], sessions: list[list[str]]) -> int:
    """Store the passages of these long turns whose text changed, and delete the touched sessions' passages that
    no turn has any more (a turn updated or deleted); how many were written.

    Only a write that touched whole sessions reads the stored passages; an append with no long turn costs nothing.
    """
    fresh = [p for t in long for p in turn_passages(t, TokenCounter())]
    stored: dict[tuple[str, str], str] = {}
    for conv_id, ids in by_conversation(sessions).items():
        stored |= {
            (conv_id, r.unit_id): r.document
            for r in store.get(
                PASSAGE.kind, user_id=ctx.user_id, conversation_id=conv_id, where={"session_id": {"$in": ids}}
            )
        }
    keep = {(p.conversation_id, p.id) for p in fresh}
    for conv_id, ids in by_conversation([[c, i] for c, i in stored if (c, i) not in keep]).items():
        store.delete(PASSAGE.kind, user_id=ctx.user_id, conversation_id=conv_id, unit_ids=ids)
    changed = [p for p in fresh if stored.get((p.conversation_id, p.id)) != p.embed_text()]
    for start in range(0, len(changed), ctx.episodes.embed_batch):
        batch = changed[start : start + ctx.episodes.embed_batch]
        store.upsert(
            PASSAGE.kind, batch, documents=[p.embed_text() for p in batch], extra=[p.metadata() for p in batch]
        )
    return len(changed)
