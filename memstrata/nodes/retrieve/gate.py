"""Retrieval: the uncertainty gate. Can the light context answer, or must we backtrack to Level-2?"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.llm import GOOD_OUTCOMES
from memstrata.memory.planning import coverage
from memstrata.memory.selection import coverage_texts
from memstrata.nodes.common import LLMStep, progress
from memstrata.state import RetrievalState


class LightAnswer(BaseModel):
    """HyMem's light generator: finished 0 with an answer, or 2 when the summaries are not enough."""

    finished: Literal[0, 2] = Field(description="0 = answered from the summaries, 2 = needs a deeper search")
    answer: str = ""


def offline_confidence(state: RetrievalState, ctx: Context) -> tuple[bool, str]:
    """Light context suffices when the best summary is close and the question's words are all covered."""
    light = [c for c in state.get("candidates", []) if c.level == "level1"]
    cov = coverage(state["query"], coverage_texts(light, ctx.gate_texts))
    top = max((c.parts.get("own", 0.0) for c in light), default=0.0)
    short = any(q.scope == "Short" for q in state.get("active", []))
    ok = bool(state.get("level1")) and cov >= ctx.gate_coverage and top >= ctx.gate_threshold and not short
    return ok, f"coverage {cov:.2f}, best turn {top:.2f}, short-scope {short}"


async def gate(state: RetrievalState, runtime: Runtime[Context]) -> Command[
        Literal["select_level1", "backtrack_level2", "follow_up"]]:
    """Accept the light path, or go deep (LLM selection fans out with ``Send``)."""
    ctx = runtime.context
    ok, why = offline_confidence(state, ctx)
    step = LLMStep(ctx, state.get("llm_calls"))
    memory = "\n".join(f"[{h.time}] {h.text}" for h in state.get("level1", []))
    verdict, how = await step.decide(
        LightAnswer, "LIGHT_ANSWER_PROMPT", f"<question>{state['query']}</question>\n<memory>\n{memory}\n</memory>",
        node="gate", fallback=lambda: LightAnswer(finished=0 if ok else 2),
    )
    light = verdict.finished == 0
    reason = f"model self-check: finished={verdict.finished}" if how in GOOD_OUTCOMES else why
    event = {"node": "gate", "iteration": state.get("iteration", 0), "path": "light" if light else "deep",
             "reason": reason, "how": how}
    update: dict[str, Any] = {"events": [event], "llm_calls": step.records}
    if light:
        progress("gate", "the summaries suffice")
        return Command(update=update, goto="follow_up")
    progress("gate", f"going deeper ({reason})")
    if step.model is None or step.meter.exhausted:
        return Command(update=update, goto="backtrack_level2")
    coarse = state.get("coarse", [])
    size = ctx.llm_batch_size
    batches = [coarse[i:i + size] for i in range(0, len(coarse), size)][:ctx.max_fanout]
    calls = [*state.get("llm_calls", []), *step.records]
    query = state["sub_queries"][0]
    sends = [Send("select_level1", {"query": query, "entries": b, "llm_calls": calls}) for b in batches]
    return Command(update=update, goto=sends or "backtrack_level2")
