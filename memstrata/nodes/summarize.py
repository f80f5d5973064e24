"""Ingestion stage 3: Level-1 summaries, fanned out over episode batches with ``Send``."""

from __future__ import annotations

import math
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel, Field

from memstrata.context import Context, resolve_model
from memstrata.llm import GOOD_OUTCOMES, Meter, decide
from memstrata.memory.episodes import offline_summary
from memstrata.memory.models import Episode, EventSummary, Turn
from memstrata.memory.timeparse import format_date
from memstrata.nodes.common import progress
from memstrata.prompts.ingestion import SUMMARY_PROMPT
from memstrata.state import IngestState, SummaryBatch


class KeyInformation(BaseModel):
    """HyMem's summary output: key information as short sentences."""

    keywords: list[str] = Field(description="Each piece of key information as one concise sentence")


def route_summaries(state: IngestState, runtime: Runtime[Context]) -> list[Send] | str:
    """Fan episodes out to at most ``Context.max_fanout`` summarizer branches."""
    episodes = state.get("episodes", [])
    if not episodes:
        return "write_summaries"
    turns = {(c["conversation_id"], t["id"]): t for c in state["conversations"] for s in c["sessions"] for t in s["turns"]}
    width = min(runtime.context.max_fanout, len(episodes))
    size = math.ceil(len(episodes) / width)
    sends = []
    for i in range(0, len(episodes), size):
        chunk = episodes[i:i + size]
        needed = [turns[(e["conversation_id"], tid)] for e in chunk for tid in e["turn_ids"]]
        sends.append(Send("summarize_batch", {"episodes": chunk, "turns": needed}))
    return sends


async def summarize_batch(batch: SummaryBatch, runtime: Runtime[Context]) -> dict[str, Any]:
    """Summarize one batch of episodes (the model's key information, or extractive)."""
    ctx = runtime.context
    model = resolve_model(ctx)
    meter = Meter()
    turns = {(t["conversation_id"], t["id"]): Turn.model_validate(t) for t in batch["turns"]}
    out = []
    for raw in batch["episodes"]:
        ep = Episode.model_validate(raw)
        summary = offline_summary(ep, [turns[(ep.conversation_id, t)] for t in ep.turn_ids])
        if model is not None:
            summary = await _llm_summary(model, ctx, ep, summary, meter)
        out.append(summary.model_dump(mode="json"))
    progress("summaries", f"summarized {len(out)} episodes", done=len(out))
    return {"summaries": out, "stats": {"llm": {"summarize": meter.summary()}} if model is not None else {}}


async def _llm_summary(model: Any, ctx: Context, ep: Episode, fallback: EventSummary, meter: Meter) -> EventSummary:
    """The model's key-information summary, or the extractive one when it fails."""
    when = format_date(ep.timestamp) or (ep.timestamp_raw or "unknown")
    user = f"<episode session_date=\"{when}\">\n{ep.text}\n</episode>"
    value, outcome = await decide(
        model, KeyInformation, ctx.prompt("SUMMARY_PROMPT", SUMMARY_PROMPT), user, node="summarize",
        fallback=lambda: KeyInformation(keywords=[]), meter=meter, timeout=ctx.llm_timeout_s, retries=ctx.llm_retries,
    )
    sentences = [s.strip() for s in value.keywords if isinstance(s, str) and s.strip()]
    if outcome not in GOOD_OUTCOMES or not sentences:
        return fallback
    header = f"[{format_date(ep.timestamp)}] " if ep.timestamp else ""
    return fallback.model_copy(update={"text": header + " ".join(sentences)[:2000], "method": "llm"})
