"""Ingestion stage 1: read and validate the input, place its messages, then store its new or changed raw turns.

Everything is validated before anything is written. A message a user deleted, or updated away, is dropped here
whoever sends it again (:mod:`memstrata.memory.store.tombstones`); one without a time gets the write's time (unless
``Context.stamp_untimed`` is off). A message without a position is
appended after the stored turns of its session (:mod:`memstrata.memory.placement`).
Later stages read the turns back from the store by session (:mod:`memstrata.memory.store.reads`), so the
state carries ids, not conversations.

A deferred write (``defer``) stores the same turns and reports the same sessions, and the graph ends once their
views are written (:func:`~memstrata.nodes.ingest.contexts.route_contexts`). A write with no new message
(``complete``) starts at :func:`find_pending` instead: the sessions deferred or stopped writes of the conversation
left underived (:mod:`memstrata.memory.pending`).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.conversation import Conversation
from memstrata.memory.levels.level2.turn import Turn, changed_turns
from memstrata.memory.normalize import load_path, normalize_input
from memstrata.memory.pending import pending_sessions, unfinished_before
from memstrata.memory.placement import place_turns, stored_tail
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import (
    appended_to_open_tail,
    ended_tails,
    incomplete_sessions,
    stored_turn_texts,
)
from memstrata.memory.store.tombstones import drop_buried
from memstrata.nodes.common import progress
from memstrata.runtime.node import open_node
from memstrata.state import IngestState


def route_input(state: IngestState) -> Literal["store_turns", "find_pending"]:
    """A write of messages stores them first; one with no new message (``complete``) finds what is pending."""
    return "find_pending" if state.get("complete") else "store_turns"


async def store_turns(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Normalize the input, embed and store new or changed turns; report the sessions later stages must redo."""
    ctx = runtime.context
    started = time.perf_counter()
    run = await open_node(runtime, "store_turns", ingest=True)
    store = run.store
    clock = _naive(ctx.now) or datetime.now(UTC).replace(tzinfo=None)  # turns keep naive UTC times
    convs, buried = await asyncio.to_thread(_normalize, state, ctx, store, clock)
    total = sum(c.turn_count for c in convs)
    progress("load", f"read {len(convs)} conversation(s), {total} turns", total_turns=total)
    present = _present(ctx, convs, clock)
    sessions: list[list[str]] = []
    appended: list[list[Any]] = []  # [conversation, session, first position]: only appended to an open tail
    repaired: list[str] = []  # conversations with a session an earlier write left unfinished
    added = waiting = deferrable = 0
    changed = False  # a stored message changed: no later read tells its episode is stale, so it is derived now
    for conv in convs:
        stored = await asyncio.to_thread(stored_turn_texts, store, conv)
        fresh = changed_turns([t for s in conv.sessions for t in s.turns], stored)
        new = [t for t in fresh if t.id not in stored]
        changed = changed or len(new) != len(fresh)
        first = None
        if len(new) == len(fresh) and not state.get("close"):
            first = await asyncio.to_thread(
                appended_to_open_tail,
                store,
                conv,
                fresh,
                present=present,
                max_turns=ctx.episodes.max_turns,
                quiet=timedelta(minutes=ctx.episodes.quiet_minutes),
                max_gap=timedelta(minutes=ctx.episodes.max_gap_minutes),
            )
        for start in range(0, len(fresh), ctx.episodes.embed_batch):
            batch = fresh[start : start + ctx.episodes.embed_batch]
            await asyncio.to_thread(
                store.upsert,
                "turn",
                batch,
                documents=[t.embed_text() for t in batch],
                extra=[t.metadata() for t in batch],
                # the facts and summaries cut from these turns pool their vectors from them (late chunking, when on)
                keep_tokens=ctx.episodes.span_vectors != "encoded",
            )
            added += len(batch)
            progress(
                "turns",
                f"{conv.conversation_id}: embedded {start + len(batch)}/{len(fresh)} new turns",
                conversation_id=conv.conversation_id,
                done=len(batch),
            )
        if first is not None:  # closes nothing: the turns wait raw in the open tail, nothing derived changes
            appended.append([conv.conversation_id, fresh[0].session_id, first])
            waiting += len(fresh)
            continue
        redo, unfinished = await asyncio.to_thread(_redo, store, conv, fresh)
        sessions += [[conv.conversation_id, s] for s in redo]
        repaired += [conv.conversation_id] if unfinished else []
        deferrable += len(fresh)
    # A deferred write ends once the views are written; one that closes or changes a stored message cannot defer.
    defer = bool(state.get("defer")) and not state.get("close") and not changed
    return {
        "defer": defer,
        "present": present.isoformat(),
        "conversations": [c.conversation_id for c in convs],
        "sessions": sessions,
        "appended": appended,
        "repaired": repaired,
        "stats": {
            **_zero_stats(),
            "conversations": len(convs),
            "turns_seen": total,
            "turns_added": added,
            "turns_buried": buried,
            "turns_waiting": waiting,
            "turns_deferred": deferrable if defer else 0,
            "deferred": sessions if defer else [],
            "sessions_touched": len(sessions),
            "warnings": [w for c in convs for w in c.warnings],
            "stage_seconds": {"turns": round(time.perf_counter() - started, 3)},
        },
    }


async def find_pending(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """No new message: report the sessions of the conversation that deferred or stopped writes left underived."""
    ctx = runtime.context
    started = time.perf_counter()
    run = await open_node(runtime, "find_pending", ingest=True)
    conv_id = state.get("conversation_id") or ctx.conversation_id
    if not conv_id:
        msg = "complete needs conversation_id: the conversation whose deferred writes to derive"
        raise ValueError(msg)
    found = await asyncio.to_thread(
        pending_sessions,
        run.store,
        ctx.user_id,
        conv_id,
        state.get("pending"),
        now=_naive(ctx.now),
        max_turns=ctx.episodes.max_turns,
        quiet=timedelta(minutes=ctx.episodes.quiet_minutes),
        max_gap=timedelta(minutes=ctx.episodes.max_gap_minutes),
    )
    progress("pending", f"{conv_id}: {len(found.sessions)} session(s) to derive", conversation_id=conv_id)
    return {
        "defer": False,
        "present": found.present.isoformat(),
        "conversations": [conv_id],
        "sessions": [[conv_id, s] for s in found.sessions],
        "appended": [],
        "repaired": [conv_id] if found.unfinished else [],
        "stats": {
            **_zero_stats(),
            "conversations": 1,
            "sessions_touched": len(found.sessions),
            "stage_seconds": {"turns": round(time.perf_counter() - started, 3)},
        },
    }


def _zero_stats() -> dict[str, Any]:
    """Every count a write reports, at zero, so stages that had nothing to do still report it."""
    counts = ("contexts_written", "episodes_written", "episodes_replaced", "summaries_written", "facts_written")
    more = ("facts_fallbacks", "vectors_pooled", "entities_written", "relations_written", "facts_superseded")
    return dict.fromkeys((*counts, *more), 0)


def _redo(store: MemoryStore, conv: Conversation, fresh: list[Turn]) -> tuple[list[str], bool]:
    """The sessions a write that goes on past the views redoes, and whether an earlier write left one unfinished.

    Its own sessions; those of them an earlier write left unfinished (stopped, or deferred by a process that died
    before deriving it); earlier sessions whose tail is open, now over; and, when the write starts a session, the
    unfinished sessions just before it (:func:`~memstrata.memory.pending.unfinished_before`, one session's reads).
    """
    written = {t.session_id for t in fresh}
    unfinished = incomplete_sessions(store, conv, {t.id for t in fresh})
    starts = any(t.position == 0 for t in fresh)
    underived = unfinished_before(store, conv, written) if starts else []
    ended = ended_tails(store, conv, written)
    redo = dict.fromkeys([*(t.session_id for t in fresh), *unfinished, *underived, *ended])
    return list(redo), bool(unfinished or underived)


def _naive(when: datetime | None) -> datetime | None:
    """A time as turns keep it: naive UTC."""
    return when.astimezone(UTC).replace(tzinfo=None) if when is not None and when.tzinfo else when


def _present(ctx: Context, convs: list[Conversation], clock: datetime) -> datetime:
    """The write's present: ``Context.now``, else the newest time among its messages, else the clock (``clock`` is
    the first or the last, in naive UTC).

    Episodes close on message time: a backfill of past-dated messages, one call each, does not find each earlier
    message quiet by the wall clock; a live message (stamped with the clock when it has no time) brings the clock.
    """
    if ctx.now is not None:
        return clock
    return max((t.timestamp for c in convs for s in c.sessions for t in s.turns if t.timestamp), default=clock)


def _normalize(state: IngestState, ctx: Context, store: MemoryStore, clock: datetime) -> tuple[list[Conversation], int]:
    """The input as conversations whose every turn has its final place (appended ones included), without the
    messages a user deleted or updated away (their tombstones), and how many of those the input held.
    """
    source = state.get("source")
    name = "<input>"
    if isinstance(source, (str, Path)):
        name = str(source)
        source = load_path(source)
    convs = normalize_input(
        source,
        user_id=ctx.user_id,
        conversation_id=state.get("conversation_id") or ctx.conversation_id,
        source=name,
        only_conversation=state.get("only_conversation"),
        session_gap=timedelta(hours=ctx.episodes.session_gap_hours),
        tail=lambda conv_id: stored_tail(store, ctx.user_id, conv_id),
        metadata=state.get("metadata"),
        stamp=clock if ctx.stamp_untimed else None,
    )
    kept = [drop_buried(c, store.tombstones.graves(c.user_id, c.conversation_id)) for c in convs]
    # A conversation whose every message was buried has nothing left to write.
    return [place_turns(store, c) for c, _ in kept if c.sessions], sum(n for _, n in kept)
