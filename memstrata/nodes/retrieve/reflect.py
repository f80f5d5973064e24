"""Retrieval: HyMem's reflection R(answer_i, q0). Is the answer complete? If not, rewrite the query and loop.

With a model, reflection grades this round's answer (the light answer, or the
deep answer of the round's main query, with the sub-answers it rests on) and
writes q_{i+1}; the memory pool M carries every round's answer into the next
round's generators. Offline, a coverage check per sub-query stands in, and its
rewrites use pseudo-relevance feedback from the best evidence. The loop is
bounded by ``max_iterations`` and by the query's ``llm_token_budget``.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.plan.rules import coverage, expand_query
from memstrata.memory.query import Query
from memstrata.memory.search.selection import coverage_texts
from memstrata.nodes.common import progress
from memstrata.nodes.retrieve.depth import deciding, sequential
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.node import open_node
from memstrata.state import RetrievalState


class Reflection(BaseModel):
    """HyMem R: finished, or a stronger question for another round."""

    finished: bool
    new_question: str = Field(default="", description="a rewritten search question for what the answer lacks")


def offline_reflection(state: RetrievalState, ctx: Context) -> tuple[Reflection, list[tuple[str, str]]]:
    """Coverage check per sub-query; rewrites use pseudo-relevance feedback from the best evidence.

    Returns the verdict and ``(rewrite, the sub-query it came from)`` pairs.
    """
    texts = coverage_texts(state.get("candidates", []), ctx.retrieval.reflect_texts)
    uncovered = [
        q.text for q in state.get("sub_queries", []) if coverage(q.text, texts) < ctx.retrieval.reflect_coverage
    ]
    if not uncovered:
        return Reflection(finished=True), []
    rewrites = [(expand_query(q, texts, terms=ctx.retrieval.rewrite_terms), q) for q in uncovered]
    return Reflection(finished=False, new_question=rewrites[0][0]), rewrites


def round_answer(state: RetrievalState) -> str:
    """answer_i with the sub-answers of the same round, as the reflection prompt shows them."""
    iteration = state.get("iteration", 0)
    pooled = [p["answer"] for p in state.get("pool", []) if p["iteration"] == iteration]
    subs = [f"- {a['question']}: {a['answer']}" for a in state.get("sub_answers", []) if a["iteration"] == iteration]
    text = f"<answer>{pooled[-1] if pooled else '(no answer was found)'}</answer>"
    return text + ("\n<sub_answers>\n" + "\n".join(subs) + "\n</sub_answers>" if subs else "")


async def reflect(state: RetrievalState, runtime: Runtime[Context]) -> Command[Literal["lookup_level1", "answer"]]:
    """Loop back to ``lookup_level1`` with rewritten queries, within ``max_iterations`` and the LLM budget."""
    ctx = runtime.context
    iteration = state.get("iteration", 0) + 1
    event: dict[str, Any] = {"node": "reflect", "iteration": iteration}
    if iteration > ctx.max_iterations:
        event.update(decision="stop", reason=f"iteration cap {ctx.max_iterations} reached", how="budget")
        return Command(update={"iteration": iteration, "events": [event]}, goto="answer")
    rule, rewrites = offline_reflection(state, ctx)
    run = await open_node(runtime, "reflect", state)
    step = deciding(run.step, state)
    update: dict[str, Any] = {"iteration": iteration, "opens": run.opens}
    if step.halted:
        event.update(decision="stop", how="budget", reason=f"llm_token_budget reached at {step.halted}")
        return Command(update={**update, "halted": step.halted, "events": [event]}, goto="answer")
    verdict, how = await step.decide(
        Reflection,
        "REFLECT_PROMPT",
        f"<question>{state['query']}</question>\n{round_answer(state)}",
        node="reflect",
        fallback=lambda: rule,
    )
    update["llm_calls"] = step.records
    event["calls"] = sequential(step.meter.own)
    if step.halted:
        event.update(decision="stop", how=how, reason=f"llm_token_budget reached at {step.halted}")
        return Command(update={**update, "halted": step.halted, "events": [event]}, goto="answer")
    if verdict.finished or not verdict.new_question.strip():
        event.update(
            decision="finish",
            how=how,
            reason="the answer is complete" if how in GOOD_OUTCOMES else "every sub-question is covered",
        )
        return Command(update={**update, "events": [event]}, goto="answer")
    # The model's rewrite is a new question (embedded); a rule rewrite searches densely as its source question.
    pairs = [(verdict.new_question.strip(), None)] if how in GOOD_OUTCOMES else rewrites
    weight = ctx.retrieval.rewrite_decay**iteration
    active = [
        Query(id=f"r{iteration}.{i}", text=t, scope="Mixed", weight=weight, dense_text=source)
        for i, (t, source) in enumerate(pairs)
    ]
    event.update(decision="rewrite", how=how, new_queries=[q.text for q in active])
    progress("reflect", f"rewriting: {active[0].text}")
    return Command(update={**update, "active": active, "events": [event]}, goto="lookup_level1")
