"""Ingestion writes: raw turns, Level-2 episodes, Level-1 summaries, each idempotent."""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context, aresolve_store
from memstrata.memory.episodes import changed_turns, episode_vector, turn_contexts, turn_metadata
from memstrata.memory.models import Conversation, Episode, EventSummary, UnitKind
from memstrata.memory.store import MemoryStore
from memstrata.nodes.common import progress
from memstrata.state import IngestState

_EMBED_BATCH = 256


async def write_turns(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Embed and store new or changed turns; report which sessions they touch."""
    store = await aresolve_store(runtime.context)
    touched: list[list[str]] = []
    added = contexts = 0
    for raw in state["conversations"]:
        conv = Conversation.model_validate(raw)
        stored = await asyncio.to_thread(_stored_turns, store, conv)
        fresh = changed_turns([t for s in conv.sessions for t in s.turns], stored)
        for start in range(0, len(fresh), _EMBED_BATCH):
            batch = fresh[start:start + _EMBED_BATCH]
            await asyncio.to_thread(
                store.upsert, UnitKind.TURN, batch, documents=[t.render() for t in batch],
                extra=[turn_metadata(t) for t in batch],
            )
            added += len(batch)
            progress("turns", f"{conv.conversation_id}: embedded {start + len(batch)}/{len(fresh)} new turns",
                     conversation_id=conv.conversation_id, done=len(batch))
        unfinished = await asyncio.to_thread(incomplete_sessions, store, conv)
        sessions = dict.fromkeys([*(t.session_id for t in fresh), *unfinished])
        contexts += await _write_contexts(store, conv, set(sessions))
        touched += [[conv.conversation_id, s] for s in sessions]
    return {"touched": touched, "stats": {"turns_added": added, "sessions_touched": len(touched),
                                          "contexts_written": contexts}}


async def _write_contexts(store: MemoryStore, conv: Conversation, sessions: set[str]) -> int:
    """Embed every turn of the touched sessions in its neighbours' company (the contextual view)."""
    views = [v for s in conv.sessions if s.session_id in sessions for v in turn_contexts(s)]
    for start in range(0, len(views), _EMBED_BATCH):
        batch = views[start:start + _EMBED_BATCH]
        await asyncio.to_thread(store.upsert, UnitKind.CONTEXT, batch, documents=[v.text for v in batch],
                                extra=[{"session_id": v.session_id, "turn_id": v.turn_id} for v in batch])
        progress("contexts", f"{conv.conversation_id}: embedded {start + len(batch)}/{len(views)} turn contexts",
                 conversation_id=conv.conversation_id, done=len(batch))
    return len(views)


def incomplete_sessions(store: MemoryStore, conv: Conversation) -> list[str]:
    """Sessions whose episodes do not cover every turn, lack a summary or lack turn contexts.

    That is an interrupted ingest, or a store written before turn contexts existed; either way
    re-ingesting the same input repairs it.
    """
    key = {"user_id": conv.user_id, "conversation_id": conv.conversation_id}
    episodes = store.get(UnitKind.EPISODE, **key)
    summaries = {r.unit_id for r in store.get(UnitKind.SUMMARY, **key)}
    covered: dict[str, set[str]] = {}
    for ep in episodes:
        p = ep.payload
        if p["summary_id"] in summaries:
            covered.setdefault(p["session_id"], set()).update(p["turn_ids"])
    viewed: dict[str, set[str]] = {}
    for r in store.get(UnitKind.CONTEXT, **key):
        viewed.setdefault(str(r.metadata.get("session_id")), set()).add(str(r.metadata.get("turn_id")))
    return [s.session_id for s in conv.sessions
            if not covered.get(s.session_id, set()) == viewed.get(s.session_id, set()) == {t.id for t in s.turns}]


def _stored_turns(store: MemoryStore, conv: Conversation) -> dict[str, str]:
    records = store.get(UnitKind.TURN, user_id=conv.user_id, conversation_id=conv.conversation_id)
    return {r.unit_id: r.document for r in records}


async def write_episodes(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Store Level-2 episodes of the touched sessions and drop any they replace."""
    ctx = runtime.context
    store = await aresolve_store(ctx)
    episodes = [Episode.model_validate(e) for e in state.get("episodes", [])]
    by_session: dict[tuple[str, str], list[Episode]] = {}
    for ep in episodes:
        by_session.setdefault((ep.conversation_id, ep.session_id), []).append(ep)
    removed = 0
    for (conv_id, session_id), eps in by_session.items():
        removed += await asyncio.to_thread(_drop_stale, store, ctx.user_id, conv_id, session_id, eps)
        vectors = await asyncio.to_thread(_turn_vectors, store, ctx.user_id, conv_id, session_id)
        await asyncio.to_thread(
            store.upsert, UnitKind.EPISODE, eps, documents=[e.text for e in eps],
            vectors=[episode_vector([vectors[t] for t in e.turn_ids]) for e in eps],
            extra=[_episode_meta(e) for e in eps],
        )
    progress("episodes", f"stored {len(episodes)} episodes (Level-2)", done=len(episodes))
    return {"stats": {"episodes_written": len(episodes), "episodes_replaced": removed}}


def _episode_meta(ep: Episode | EventSummary) -> dict[str, Any]:
    return {"session_id": ep.session_id, "ts": ep.timestamp.timestamp() if ep.timestamp else None,
            "episode_id": ep.id if isinstance(ep, Episode) else ep.episode_id}


def _turn_vectors(store: MemoryStore, user_id: str, conv_id: str, session_id: str) -> dict[str, list[float]]:
    records = store.get(UnitKind.TURN, user_id=user_id, conversation_id=conv_id,
                        where={"session_id": session_id}, with_vectors=True)
    return {r.unit_id: r.metadata["_vector"] for r in records}


def _drop_stale(store: MemoryStore, user_id: str, conv_id: str, session_id: str, keep: list[Episode]) -> int:
    """Delete a session's episodes and summaries that a re-segmentation replaced."""
    keep_ids = {e.id for e in keep}
    old = store.get(UnitKind.EPISODE, user_id=user_id, conversation_id=conv_id, where={"session_id": session_id})
    stale = [r.unit_id for r in old if r.unit_id not in keep_ids]
    store.delete(UnitKind.EPISODE, user_id=user_id, conversation_id=conv_id, unit_ids=stale)
    store.delete(UnitKind.SUMMARY, user_id=user_id, conversation_id=conv_id,
                 unit_ids=[r.payload.get("summary_id", "") for r in old if r.unit_id in stale])
    return len(stale)


async def write_summaries(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Embed and store the Level-1 summaries, each linked to its episode."""
    store = await aresolve_store(runtime.context)
    summaries = [EventSummary.model_validate(s) for s in state.get("summaries", [])]
    for start in range(0, len(summaries), _EMBED_BATCH):
        batch = summaries[start:start + _EMBED_BATCH]
        await asyncio.to_thread(
            store.upsert, UnitKind.SUMMARY, batch, documents=[s.text for s in batch],
            extra=[_episode_meta(s) for s in batch],
        )
    progress("summaries", f"stored {len(summaries)} summaries (Level-1)", done=len(summaries))
    return {"stats": {"summaries_written": len(summaries)}}
