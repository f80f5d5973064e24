"""HyMem's Level-1 summary of one episode (used by :mod:`.distill`).

Extractive offline (:func:`memstrata.memory.levels.level1.summary.offline_summary`); with
a model, its key information as short sentences, or the extractive summary when
its output is unusable.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from memstrata.memory.levels import Episode, EventSummary, Turn
from memstrata.memory.levels.level1.summary import offline_summary
from memstrata.memory.timeparse import format_date
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.step import Step


class KeyInformation(BaseModel):
    """HyMem's summary output: key information as short sentences."""

    keywords: list[str] = Field(description="Each piece of key information as one concise sentence")


async def episode_summary(step: Step, ep: Episode, turns: list[Turn]) -> EventSummary:
    """The episode's Level-1 summary: extractive offline, the model's key information otherwise."""
    ctx = step.ctx
    summary = offline_summary(
        ep, turns, max_sentences=ctx.episodes.summary_sentences, max_words=ctx.episodes.summary_words
    )
    return await _llm_summary(step, ep, summary) if step.model is not None else summary


async def _llm_summary(step: Step, ep: Episode, fallback: EventSummary) -> EventSummary:
    """The model's key-information summary, or the extractive one when it fails."""
    when = format_date(ep.timestamp) or (ep.timestamp_raw or "unknown")
    user = f'<episode session_date="{when}">\n{ep.text}\n</episode>'
    value, outcome = await step.decide(
        KeyInformation, "SUMMARY_PROMPT", user, node="summarize", fallback=lambda: KeyInformation(keywords=[])
    )
    sentences = [s.strip() for s in value.keywords if isinstance(s, str) and s.strip()]
    if outcome not in GOOD_OUTCOMES or not sentences:
        return fallback
    header = f"[{format_date(ep.timestamp)}] " if ep.timestamp else ""
    return fallback.model_copy(update={"text": header + " ".join(sentences)[:2000], "method": "llm", "quotes": []})
