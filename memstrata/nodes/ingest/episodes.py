"""Ingestion stage 3: cut the touched sessions into HyMem's Level-2 episodes.

Offline cuts (topic shifts, time gaps, a length cap), or the model's boundaries
in LLM mode. Episodes a re-segmentation replaced are deleted with their summaries
and facts (facts first, summaries last, so no reader ever meets a unit whose parent
is gone). New episodes are not stored here: :mod:`.distill` stores each one after
its summary, so a stored episode always has one.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.llm import GOOD_OUTCOMES
from memstrata.memory.levels import Episode, Turn, levels
from memstrata.memory.levels.episode import build_episodes, episode_vector
from memstrata.memory.segmentation import segment_session
from memstrata.memory.store import MemoryStore
from memstrata.nodes.common import LLMStep, progress
from memstrata.nodes.ingest.turns import finished_episodes, read_sessions
from memstrata.resources import aresolve_store
from memstrata.state import IngestState


class Boundaries(BaseModel):
    """Indices of the messages that start a new episode."""

    starts: list[int] = Field(default_factory=list, description="0-based indices of messages that begin an episode")


async def segment_episodes(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Segment every touched session; hand the new episodes (with their vectors) to the distillers."""
    ctx = runtime.context
    started = time.perf_counter()
    store = await aresolve_store(ctx)
    step = LLMStep(ctx, budget=False)
    sessions = await asyncio.to_thread(read_sessions, store, ctx.user_id, state.get("sessions", []),
                                       with_vectors=True)
    written: list[list[str]] = []
    drafts: list[dict[str, Any]] = []
    removed = 0
    for (conv_id, session_id), (turns, vecs) in sessions.items():
        forced = await _llm_cuts(step, turns) if step.model is not None else None
        spans = segment_session(
            vecs, [t.timestamp for t in turns], max_turns=ctx.max_episode_turns, min_turns=ctx.min_episode_turns,
            overlap=ctx.episode_overlap, max_gap=timedelta(minutes=ctx.episode_max_gap_minutes),
            window=ctx.segment_window, depth=ctx.segment_depth, forced=forced,
        )
        episodes = build_episodes(turns, spans, session_time=turns[0].timestamp,
                                  session_time_raw=turns[0].timestamp_raw)
        by_id = {t.id: v for t, v in zip(turns, vecs, strict=True)}
        dropped, done = await asyncio.to_thread(_drop_stale, store, ctx.user_id, conv_id, session_id, episodes)
        removed += dropped
        episodes = [e for e in episodes if e.id not in done]  # unchanged and finished: nothing to redo
        drafts += [{"episode": e.model_dump(mode="json"), "vector": episode_vector([by_id[t] for t in e.turn_ids])}
                   for e in episodes]
        written += [[conv_id, e.id] for e in episodes]
    progress("segment", f"cut {len(sessions)} session(s) into {len(written)} new episodes (Level-2)",
             episodes=len(written))
    stats: dict[str, Any] = {"episodes_written": len(written), "episodes_replaced": removed,
                             "stage_seconds": {"episodes": round(time.perf_counter() - started, 3)}}
    if step.model is not None:
        stats["llm"] = {"segment": step.meter.summary()}
    return {"episodes": written, "drafts": drafts, "stats": stats}


async def _llm_cuts(step: LLMStep, turns: list[Turn]) -> set[int] | None:
    """The model's episode starts for one session; ``None`` means "use the offline cuts"."""
    n = len(turns)
    listing = "\n".join(f"[{i}] {t.render()}" for i, t in enumerate(turns))

    def valid(b: Boundaries) -> Boundaries:
        if any(i < 0 or i >= n for i in b.starts):
            msg = f"indices must be between 0 and {n - 1}"
            raise ValueError(msg)
        return b

    value, outcome = await step.decide(
        Boundaries, "BOUNDARY_PROMPT", f"<messages session=\"{turns[0].session_id}\">\n{listing}\n</messages>",
        node="segment", fallback=lambda: Boundaries(starts=[-1]), validate=valid,
        max_turns=step.ctx.max_episode_turns,
    )
    if outcome not in GOOD_OUTCOMES:
        return None
    return {i for i in value.starts if 0 < i < n}


def _drop_stale(store: MemoryStore, user_id: str, conv_id: str, session_id: str,
                keep: list[Episode]) -> tuple[int, set[str]]:
    """Delete a session's stored episodes that a re-segmentation replaced or changed, with their summaries and facts.

    Returns how many ids are gone for good, and the ids of new episodes that are already
    stored, unchanged and finished (a turn appended to a session changes only its last episodes).
    """
    new = {e.id: e for e in keep}
    old = store.get("episode", user_id=user_id, conversation_id=conv_id, where={"session_id": session_id})
    finished = {r.unit_id for r in finished_episodes(store, user_id, conv_id, old)}
    stale = [r for r in old if r.unit_id not in new or r.unit_id not in finished
             or r.document != new[r.unit_id].embed_text()]
    # Children before parents: facts (and any kind distilled from episodes), episodes, then summaries.
    _drop_episode_units(store, user_id, conv_id, [r.unit_id for r in stale], keep_kinds={"summary"})
    store.delete("episode", user_id=user_id, conversation_id=conv_id, unit_ids=[r.unit_id for r in stale])
    store.delete("summary", user_id=user_id, conversation_id=conv_id,
                 unit_ids=[r.payload.get("summary_id", "") for r in stale])
    stale_ids = {r.unit_id for r in stale}
    return sum(r.unit_id not in new for r in stale), {r.unit_id for r in old if r.unit_id not in stale_ids}


def _drop_episode_units(store: MemoryStore, user_id: str, conv_id: str, episode_ids: list[str], *,
                        keep_kinds: set[str]) -> None:
    """Delete the units of every event kind distilled from these episodes (e.g. their facts), but ``keep_kinds``."""
    if not episode_ids:
        return
    for level in levels(role="event"):
        if level.kind in keep_kinds:
            continue
        found = store.get(level.kind, user_id=user_id, conversation_id=conv_id,
                          where={"episode_id": {"$in": episode_ids}})
        store.delete(level.kind, user_id=user_id, conversation_id=conv_id, unit_ids=[r.unit_id for r in found])
