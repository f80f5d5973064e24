"""Ingestion stage 1: read and validate the input, place its messages, then store its new or changed raw turns.

Everything is validated before anything is written. A message without a position is
appended after the stored turns of its session (:mod:`memstrata.memory.placement`).
Later stages read the turns back from the store by session, so the state carries ids,
not conversations.
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
from langgraph.runtime import Runtime
from langgraph.types import Send

from memstrata.context import Context
from memstrata.memory.conversation import Conversation
from memstrata.memory.levels import Episode, Turn
from memstrata.memory.levels.turn import changed_turns
from memstrata.memory.normalize import load_path, normalize_input
from memstrata.memory.placement import place_turns, stored_tail
from memstrata.memory.store import MemoryStore
from memstrata.nodes.common import progress
from memstrata.resources import aresolve_store
from memstrata.state import IngestState


async def store_turns(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Normalize the input, embed and store new or changed turns; report the sessions later stages must redo."""
    ctx = runtime.context
    started = time.perf_counter()
    store = await aresolve_store(ctx)
    convs = await asyncio.to_thread(_normalize, state, ctx, store)
    total = sum(c.turn_count for c in convs)
    progress("load", f"read {len(convs)} conversation(s), {total} turns", total_turns=total)
    sessions: list[list[str]] = []
    repaired: list[str] = []  # conversations with a session an earlier write left unfinished
    added = 0
    for conv in convs:
        stored = await asyncio.to_thread(_stored_turns, store, conv)
        fresh = changed_turns([t for s in conv.sessions for t in s.turns], stored)
        for start in range(0, len(fresh), ctx.embed_batch):
            batch = fresh[start:start + ctx.embed_batch]
            await asyncio.to_thread(store.upsert, "turn", batch, documents=[t.embed_text() for t in batch],
                                    extra=[t.metadata() for t in batch])
            added += len(batch)
            progress("turns", f"{conv.conversation_id}: embedded {start + len(batch)}/{len(fresh)} new turns",
                     conversation_id=conv.conversation_id, done=len(batch))
        unfinished = await asyncio.to_thread(incomplete_sessions, store, conv, {t.id for t in fresh})
        ended = await asyncio.to_thread(_ended_tails, store, conv, {t.session_id for t in fresh})
        sessions += [[conv.conversation_id, s]
                     for s in dict.fromkeys([*(t.session_id for t in fresh), *unfinished, *ended])]
        repaired += [conv.conversation_id] if unfinished else []
    return {"conversations": [c.conversation_id for c in convs], "sessions": sessions, "repaired": repaired,
            # Every count starts at zero, so stages that had nothing to do still report it.
            "stats": {"contexts_written": 0, "episodes_written": 0, "episodes_replaced": 0, "summaries_written": 0,
                      "facts_written": 0, "facts_fallbacks": 0, "entities_written": 0, "relations_written": 0,
                      "facts_superseded": 0,
                      "conversations": len(convs), "turns_seen": total, "turns_added": added,
                      "sessions_touched": len(sessions), "warnings": [w for c in convs for w in c.warnings],
                      "stage_seconds": {"turns": round(time.perf_counter() - started, 3)}}}


def _normalize(state: IngestState, ctx: Context, store: MemoryStore) -> list[Conversation]:
    """The input as conversations whose every turn has its final place (appended ones included)."""
    source = state.get("source")
    name = "<input>"
    if isinstance(source, (str, Path)):
        name = str(source)
        source = load_path(source)
    convs = normalize_input(source, user_id=ctx.user_id,
                            conversation_id=state.get("conversation_id") or ctx.conversation_id, source=name,
                            only_conversation=state.get("only_conversation"),
                            session_gap=timedelta(hours=ctx.session_gap_hours),
                            tail=lambda conv_id: stored_tail(store, ctx.user_id, conv_id))
    return [place_turns(store, c) for c in convs]


def _sessions_of(conv: Conversation) -> dict[str, Any]:
    """The ``where`` clause for the input's sessions: a write of one session reads only that session."""
    return {"session_id": {"$in": [s.session_id for s in conv.sessions]}}


def _stored_turns(store: MemoryStore, conv: Conversation) -> dict[str, str]:
    records = store.get("turn", user_id=conv.user_id, conversation_id=conv.conversation_id, where=_sessions_of(conv))
    return {r.unit_id: r.document for r in records}


def incomplete_sessions(store: MemoryStore, conv: Conversation, fresh: set[str] = frozenset()) -> list[str]:
    """Sessions of the input whose finished episodes do not cover every stored turn (but the ``fresh`` ones this
    write adds), or that lack turn contexts.

    An episode is finished when its summary and all its facts are stored (they are written
    summary, episode, facts). Anything less is an interrupted ingest, a deletion of turns, or
    a store written before turn contexts existed; re-ingesting the same input repairs it.
    """
    key = {"user_id": conv.user_id, "conversation_id": conv.conversation_id, "where": _sessions_of(conv)}
    turns: dict[str, set[str]] = {}
    for r in store.get("turn", **key):
        if r.unit_id not in fresh:
            turns.setdefault(str(r.metadata.get("session_id")), set()).add(r.unit_id)
    episodes = store.get("episode", **key)
    covered: dict[str, set[str]] = {}
    for ep in finished_episodes(store, conv.user_id, conv.conversation_id, episodes):
        covered.setdefault(ep.payload["session_id"], set()).update(ep.payload["turn_ids"])
    viewed: dict[str, set[str]] = {}
    for r in store.get("turn_context", **key):
        viewed.setdefault(str(r.metadata.get("session_id")), set()).add(str(r.metadata.get("turn_id")))
    return [s.session_id for s in conv.sessions if s.session_id in turns
            and not covered.get(s.session_id, set()) == viewed.get(s.session_id, set()) == turns[s.session_id]]


def finished_episodes(store: MemoryStore, user_id: str, conv_id: str, records: list[Any]) -> list[Any]:
    """The stored episode records whose summary and every fact are stored too."""
    if not records:
        return []
    wanted = [r.payload.get("summary_id", "") for r in records]
    summaries = {r.unit_id for r in store.get("summary", user_id=user_id, conversation_id=conv_id, unit_ids=wanted)}
    fact_ids = [f for r in records for f in r.payload.get("fact_ids", [])]
    facts = {r.unit_id for r in store.get("fact", user_id=user_id, conversation_id=conv_id, unit_ids=fact_ids)} \
        if fact_ids else set()
    return [r for r in records if r.payload.get("summary_id") in summaries
            and all(f in facts for f in r.payload.get("fact_ids", []))]


def _ended_tails(store: MemoryStore, conv: Conversation, written: set[str]) -> list[str]:
    """Earlier sessions with an open tail, when this write starts a later one: they are over, so they close."""
    numbers = [int(s) for s in written if s.isdigit()]
    if not numbers:
        return []
    tails = {str(r.payload["session_id"]) for r in open_episodes(store, conv.user_id, conv.conversation_id)}
    return sorted(s for s in tails if s.isdigit() and int(s) < max(numbers))


def open_episodes(store: MemoryStore, user_id: str, conv_id: str) -> list[Any]:
    """The stored episodes of a conversation that are still open (session tails)."""
    return store.get("episode", user_id=user_id, conversation_id=conv_id, where={"open": True})


def by_conversation(pairs: list[list[str]]) -> dict[str, list[str]]:
    """``[conversation_id, id]`` pairs grouped by conversation, in order (one store read per conversation)."""
    grouped: dict[str, list[str]] = {}
    for conv_id, unit_id in pairs:
        grouped.setdefault(conv_id, []).append(unit_id)
    return grouped


def read_sessions(store: MemoryStore, user_id: str, pairs: list[list[str]], *,
                  with_vectors: bool = False) -> dict[tuple[str, str], tuple[list[Turn], np.ndarray | None]]:
    """The stored turns of some ``[conversation_id, session_id]`` pairs, in position order (with vectors)."""
    out: dict[tuple[str, str], tuple[list[Turn], np.ndarray | None]] = {}
    for conv_id, session_ids in by_conversation(pairs).items():
        records = store.get("turn", user_id=user_id, conversation_id=conv_id,
                            where={"session_id": {"$in": session_ids}}, with_vectors=with_vectors)
        groups: dict[str, list[Any]] = {}
        for r in records:
            groups.setdefault(str(r.metadata.get("session_id")), []).append(r)
        for session_id, recs in groups.items():
            recs.sort(key=lambda r: r.metadata.get("position", 0))
            vecs = np.asarray([r.metadata["_vector"] for r in recs], dtype=float) if with_vectors else None
            out[(conv_id, session_id)] = ([Turn.model_validate(r.payload) for r in recs], vecs)
    return out


def read_episode_turns(store: MemoryStore, user_id: str, episodes: list[Episode]) -> dict[tuple[str, str], Turn]:
    """Every stored turn the episodes hold, by ``(conversation_id, turn_id)``."""
    turns: dict[tuple[str, str], Turn] = {}
    for conv_id, ids in by_conversation([[e.conversation_id, t] for e in episodes for t in e.turn_ids]).items():
        for r in store.get("turn", user_id=user_id, conversation_id=conv_id, unit_ids=sorted(set(ids))):
            turns[(conv_id, r.unit_id)] = Turn.model_validate(r.payload)
    return turns


def episode_sends(node: str, drafts: list[dict[str, Any]], max_fanout: int) -> list[Send]:
    """New episodes cut into at most ``max_fanout`` batches, one ``Send`` to ``node`` per batch."""
    size = math.ceil(len(drafts) / min(max_fanout, len(drafts)))
    return [Send(node, {"drafts": drafts[i:i + size]}) for i in range(0, len(drafts), size)]
