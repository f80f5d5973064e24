"""Ingestion, last stage: every registered kind that declares ``derive`` (kinds without a stage of their own).

For each conversation with touched sessions, the kind's ``derive`` function
gets all of the conversation's turns in order and returns its units; they are
embedded and stored, and units of that kind the conversation no longer yields
are deleted, so re-ingesting adds nothing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.levels import Level, Turn, levels
from memstrata.memory.models import Unit
from memstrata.memory.store import MemoryStore
from memstrata.nodes.common import progress
from memstrata.runtime.node import open_node
from memstrata.state import IngestState


async def derive_units(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Build and store the units of every deriving kind for the touched conversations."""
    ctx = runtime.context
    started = time.perf_counter()
    derived = [lv for lv in levels() if lv.derive is not None]
    if not derived:
        return {}
    run = await open_node(runtime, "derive_units", ingest=True)
    store = run.store
    # Touched conversations, and any whose derived units are missing (an ingest killed before this stage).
    missing = await asyncio.to_thread(_missing, store, ctx.user_id, state.get("conversations", []), derived)
    conversations = list(dict.fromkeys([*(c for c, _ in state.get("sessions", [])), *missing]))
    written: dict[str, int] = {}
    for conv_id in conversations:
        turns = await asyncio.to_thread(_all_turns, store, ctx.user_id, conv_id)
        for level in derived:
            assert level.derive is not None  # the kinds chosen above
            units = level.derive(turns)
            written[level.kind] = written.get(level.kind, 0) + await asyncio.to_thread(
                _replace, store, level, ctx.user_id, conv_id, units
            )
    progress("derived", ", ".join(f"{k}: {n}" for k, n in written.items()), **written)
    return {
        "stats": {"derived_written": written, "stage_seconds": {"derived": round(time.perf_counter() - started, 3)}}
    }


def _missing(store: MemoryStore, user_id: str, conversations: list[str], derived: list[Level]) -> list[str]:
    return [
        c for c in conversations if any(store.count(lv.kind, user_id=user_id, conversation_id=c) == 0 for lv in derived)
    ]


def _all_turns(store: MemoryStore, user_id: str, conv_id: str) -> list[Turn]:
    turns = [Turn.model_validate(r.payload) for r in store.get("turn", user_id=user_id, conversation_id=conv_id)]
    return sorted(
        turns, key=lambda t: (int(t.session_id) if t.session_id.isdigit() else 1 << 30, t.session_id, t.position)
    )


def _replace(store: MemoryStore, level: Level, user_id: str, conv_id: str, units: list[Unit]) -> int:
    """Store a conversation's units of one kind, deleting the ones it no longer yields."""
    old = {r.unit_id for r in store.get(level.kind, user_id=user_id, conversation_id=conv_id)}
    store.delete(level.kind, user_id=user_id, conversation_id=conv_id, unit_ids=sorted(old - {u.id for u in units}))
    return store.upsert(
        level.kind, units, documents=[u.embed_text() for u in units], extra=[u.metadata() for u in units]
    )
