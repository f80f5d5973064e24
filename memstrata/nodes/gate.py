"""Retrieval: the uncertainty gate. Can the light context answer, or must we backtrack to Level-2?"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from pydantic import BaseModel, Field

from memstrata.context import Context, resolve_model
from memstrata.llm import GOOD_OUTCOMES, decide
from memstrata.memory.evidence import coverage_texts
from memstrata.memory.planning import coverage
from memstrata.nodes.common import meter_from, new_records, progress
from memstrata.prompts.retrieval import LIGHT_ANSWER_PROMPT
from memstrata.state import RetrievalState


class LightAnswer(BaseModel):
    """HyMem's light generator: finished 0 with an answer, or 2 when the summaries are not enough."""

    finished: Literal[0, 2] = Field(description="0 = answered from the summaries, 2 = needs a deeper search")
    answer: str = ""


def offline_confidence(state: RetrievalState, threshold: float) -> tuple[bool, str, float]:
    """Light context suffices when the best summary is close and the question's words are all covered."""
    hits = state.get("level1_hits", [])
    light = [c for c in state.get("candidates", []) if c.get("level") == "level1"]
    cov = coverage(state["query"], coverage_texts(light, 15))
    top = max((c["score_parts"].get("own", 0.0) for c in light), default=0.0)
    short = any(q.get("scope") == "Short" for q in state.get("active", []))
    ok = bool(hits) and cov >= 0.999 and top >= threshold and not short
    why = f"coverage {cov:.2f}, best turn {top:.2f}, short-scope {short}"
    return ok, why, cov


async def gate(state: RetrievalState, runtime: Runtime[Context]) -> Command[
        Literal["select_level1", "backtrack_level2", "follow_up"]]:
    """Accept the light path, or go deep (LLM selection fans out with ``Send``)."""
    ctx = runtime.context
    model = resolve_model(ctx)
    ok, why, _ = offline_confidence(state, ctx.gate_threshold)
    meter = meter_from(state.get("llm_calls"), ctx.llm_token_budget)
    before = len(meter.calls)
    memory = "\n".join(f"[{h['time']}] {h['text']}" for h in state.get("level1_hits", []))
    verdict, how = await decide(
        model, LightAnswer, ctx.prompt("LIGHT_ANSWER_PROMPT", LIGHT_ANSWER_PROMPT),
        f"<question>{state['query']}</question>\n<memory>\n{memory}\n</memory>", node="gate", meter=meter,
        fallback=lambda: LightAnswer(finished=0 if ok else 2), timeout=ctx.llm_timeout_s, retries=ctx.llm_retries,
    )
    light = verdict.finished == 0
    reason = f"model self-check: finished={verdict.finished}" if how in GOOD_OUTCOMES else why
    event = {"node": "gate", "iteration": state.get("iteration", 0), "path": "light" if light else "deep",
             "reason": reason, "how": how}
    update: dict[str, Any] = {"path": "light" if light else "deep", "events": [event],
                              "llm_calls": new_records(meter, before), "light_answer": verdict.answer or None}
    if light:
        progress("gate", "the summaries suffice")
        return Command(update=update, goto="follow_up")
    progress("gate", f"going deeper ({reason})")
    if model is None or meter.exhausted:
        return Command(update=update, goto="backtrack_level2")
    coarse = state.get("coarse", [])
    size = max(1, ctx.llm_batch_size)
    batches = [coarse[i:i + size] for i in range(0, len(coarse), size)][:ctx.max_fanout]
    calls = [*state.get("llm_calls", []), *update["llm_calls"]]
    sends = [Send("select_level1", {"query": state["query"], "entries": b, "llm_calls": calls}) for b in batches]
    return Command(update=update, goto=sends or "backtrack_level2")
