"""Retrieval: HyMem's reflection. Is every sub-question answered? If not, rewrite and search again."""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel, Field

from memstrata.context import Context, resolve_model
from memstrata.llm import GOOD_OUTCOMES, decide
from memstrata.memory.evidence import coverage_texts
from memstrata.memory.planning import coverage, expand_query
from memstrata.nodes.common import meter_from, new_records, progress
from memstrata.prompts.retrieval import REFLECT_PROMPT
from memstrata.state import RetrievalState

COVERED = 0.999
REWRITE_DECAY = 0.9


class Reflection(BaseModel):
    """HyMem R: finished, or a stronger question for another round."""

    finished: bool
    new_question: str = Field(default="", description="a rewritten search question for what is missing")


def offline_reflection(state: RetrievalState) -> tuple[Reflection, list[tuple[str, str]]]:
    """Coverage check per sub-query; rewrites use pseudo-relevance feedback from the best evidence.

    Returns the verdict and ``(rewrite, the sub-query it came from)`` pairs.
    """
    texts = coverage_texts(state.get("candidates", []), 20)
    uncovered = [s["text"] for s in state.get("sub_queries", []) if coverage(s["text"], texts) < COVERED]
    if not uncovered:
        return Reflection(finished=True), []
    rewrites = [(expand_query(q, texts), q) for q in uncovered]
    return Reflection(finished=False, new_question=rewrites[0][0]), rewrites


async def reflect(state: RetrievalState, runtime: Runtime[Context]) -> Command[Literal["lookup_level1", "answer"]]:
    """Loop back to ``lookup_level1`` with rewritten queries, within ``max_iterations`` and the LLM budget."""
    ctx = runtime.context
    iteration = state.get("iteration", 0) + 1
    rule, rewrites = offline_reflection(state)
    meter = meter_from(state.get("llm_calls"), ctx.llm_token_budget)
    before = len(meter.calls)
    event: dict[str, Any] = {"node": "reflect", "iteration": iteration}
    if iteration > ctx.max_iterations:
        event.update(decision="stop", reason=f"iteration cap {ctx.max_iterations} reached", how="budget")
        return Command(update={"iteration": iteration, "events": [event]}, goto="answer")
    evidence = "\n".join(coverage_texts(state.get("candidates", []), 12))
    verdict, how = await decide(
        resolve_model(ctx), Reflection, ctx.prompt("REFLECT_PROMPT", REFLECT_PROMPT),
        f"<question>{state['query']}</question>\n<memory>\n{evidence}\n</memory>", node="reflect", meter=meter,
        fallback=lambda: rule, timeout=ctx.llm_timeout_s, retries=ctx.llm_retries,
    )
    update: dict[str, Any] = {"iteration": iteration, "llm_calls": new_records(meter, before)}
    if verdict.finished or not verdict.new_question.strip():
        event.update(decision="finish", how=how, reason="every sub-question is covered")
        return Command(update={**update, "events": [event]}, goto="answer")
    # The model's rewrite is a new question (embedded); a rule rewrite searches densely as its source question.
    pairs = [(verdict.new_question.strip(), None)] if how in GOOD_OUTCOMES else rewrites
    texts = [t for t, _ in pairs]
    weight = REWRITE_DECAY ** iteration
    active = [{"id": f"r{iteration}.{i}", "text": t, "scope": "Mixed", "hint_start": None, "hint_end": None,
               "weight": weight, "dense_text": source} for i, (t, source) in enumerate(pairs)]
    event.update(decision="rewrite", how=how, new_queries=texts)
    progress("reflect", f"rewriting: {texts[0]}")
    return Command(update={**update, "active": active, "events": [event]}, goto="lookup_level1")
