"""Retrieval: HyMem's reflection. Is every sub-question answered? If not, rewrite and search again."""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.llm import GOOD_OUTCOMES
from memstrata.memory.planning import coverage, expand_query
from memstrata.memory.query import Query
from memstrata.memory.selection import coverage_texts
from memstrata.nodes.common import LLMStep, progress
from memstrata.state import RetrievalState


class Reflection(BaseModel):
    """HyMem R: finished, or a stronger question for another round."""

    finished: bool
    new_question: str = Field(default="", description="a rewritten search question for what is missing")


def offline_reflection(state: RetrievalState, ctx: Context) -> tuple[Reflection, list[tuple[str, str]]]:
    """Coverage check per sub-query; rewrites use pseudo-relevance feedback from the best evidence.

    Returns the verdict and ``(rewrite, the sub-query it came from)`` pairs.
    """
    texts = coverage_texts(state.get("candidates", []), ctx.reflect_texts)
    uncovered = [q.text for q in state.get("sub_queries", []) if coverage(q.text, texts) < ctx.reflect_coverage]
    if not uncovered:
        return Reflection(finished=True), []
    rewrites = [(expand_query(q, texts), q) for q in uncovered]
    return Reflection(finished=False, new_question=rewrites[0][0]), rewrites


async def reflect(state: RetrievalState, runtime: Runtime[Context]) -> Command[Literal["lookup_level1", "answer"]]:
    """Loop back to ``lookup_level1`` with rewritten queries, within ``max_iterations`` and the LLM budget."""
    ctx = runtime.context
    iteration = state.get("iteration", 0) + 1
    event: dict[str, Any] = {"node": "reflect", "iteration": iteration}
    if iteration > ctx.max_iterations:
        event.update(decision="stop", reason=f"iteration cap {ctx.max_iterations} reached", how="budget")
        return Command(update={"iteration": iteration, "events": [event]}, goto="answer")
    rule, rewrites = offline_reflection(state, ctx)
    step = LLMStep(ctx, state.get("llm_calls"))
    evidence = "\n".join(coverage_texts(state.get("candidates", []), ctx.reflect_prompt_texts))
    verdict, how = await step.decide(
        Reflection, "REFLECT_PROMPT", f"<question>{state['query']}</question>\n<memory>\n{evidence}\n</memory>",
        node="reflect", fallback=lambda: rule,
    )
    update: dict[str, Any] = {"iteration": iteration, "llm_calls": step.records}
    if verdict.finished or not verdict.new_question.strip():
        event.update(decision="finish", how=how, reason="every sub-question is covered")
        return Command(update={**update, "events": [event]}, goto="answer")
    # The model's rewrite is a new question (embedded); a rule rewrite searches densely as its source question.
    pairs = [(verdict.new_question.strip(), None)] if how in GOOD_OUTCOMES else rewrites
    weight = ctx.rewrite_decay ** iteration
    active = [Query(id=f"r{iteration}.{i}", text=t, scope="Mixed", weight=weight, dense_text=source)
              for i, (t, source) in enumerate(pairs)]
    event.update(decision="rewrite", how=how, new_queries=[q.text for q in active])
    progress("reflect", f"rewriting: {active[0].text}")
    return Command(update={**update, "active": active, "events": [event]}, goto="lookup_level1")
