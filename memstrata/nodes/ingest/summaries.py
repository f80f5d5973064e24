"""Ingestion stage 6: HyMem's Level-1 summaries, fanned out over episode batches with ``Send``.

Each branch reads its episodes and their turns from the store, summarizes them
(the model's key information, or extractive offline) and stores its summaries.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.llm import GOOD_OUTCOMES
from memstrata.memory.levels import Episode, EventSummary
from memstrata.memory.levels.summary import offline_summary
from memstrata.memory.timeparse import format_date
from memstrata.nodes.common import LLMStep, progress
from memstrata.nodes.ingest.turns import episode_sends, read_episodes
from memstrata.resources import aresolve_store
from memstrata.state import EpisodeBatch, IngestState


class KeyInformation(BaseModel):
    """HyMem's summary output: key information as short sentences."""

    keywords: list[str] = Field(description="Each piece of key information as one concise sentence")


def route_summaries(state: IngestState, runtime: Runtime[Context]) -> list[Send] | str:
    """Fan the new episodes out to at most ``Context.max_fanout`` summarizer branches."""
    episodes = state.get("episodes", [])
    if not episodes:
        return "consolidate_tree"
    return episode_sends("summarize_batch", episodes, runtime.context.max_fanout)


async def summarize_batch(batch: EpisodeBatch, runtime: Runtime[Context]) -> dict[str, Any]:
    """Summarize and store one batch of episodes."""
    ctx = runtime.context
    started = time.perf_counter()
    store = await aresolve_store(ctx)
    step = LLMStep(ctx, budget=False)
    episodes, turns = await asyncio.to_thread(read_episodes, store, ctx.user_id, batch["episodes"])
    out: list[EventSummary] = []
    for ep in episodes:
        summary = offline_summary(ep, [turns[(ep.conversation_id, t)] for t in ep.turn_ids],
                                  max_sentences=ctx.summary_max_sentences, max_words=ctx.summary_max_words)
        if step.model is not None:
            summary = await _llm_summary(step, ep, summary)
        out.append(summary)
    await asyncio.to_thread(store.upsert, "summary", out, documents=[s.embed_text() for s in out],
                            extra=[s.metadata() for s in out])
    progress("summaries", f"summarized and stored {len(out)} episodes (Level-1)", done=len(out))
    stats: dict[str, Any] = {"summaries_written": len(out),
                             "stage_seconds": {"summaries": round(time.perf_counter() - started, 3)}}
    if step.model is not None:
        stats["llm"] = {"summarize": step.meter.summary()}
    return {"stats": stats}


async def _llm_summary(step: LLMStep, ep: Episode, fallback: EventSummary) -> EventSummary:
    """The model's key-information summary, or the extractive one when it fails."""
    when = format_date(ep.timestamp) or (ep.timestamp_raw or "unknown")
    user = f"<episode session_date=\"{when}\">\n{ep.text}\n</episode>"
    value, outcome = await step.decide(KeyInformation, "SUMMARY_PROMPT", user, node="summarize",
                                       fallback=lambda: KeyInformation(keywords=[]))
    sentences = [s.strip() for s in value.keywords if isinstance(s, str) and s.strip()]
    if outcome not in GOOD_OUTCOMES or not sentences:
        return fallback
    header = f"[{format_date(ep.timestamp)}] " if ep.timestamp else ""
    return fallback.model_copy(update={"text": header + " ".join(sentences)[:2000], "method": "llm"})
