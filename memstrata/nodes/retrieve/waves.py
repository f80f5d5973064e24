"""Retrieval: H-Mem's dependent sub-queries. A sub-query waits for its prerequisites, then is rewritten with them.

Independent sub-queries are searched together in the first round. Whenever a
round ends, every waiting sub-query whose prerequisites have all been searched
is rewritten with what they found (with a model, from the prerequisites'
answers; offline, with the names and dates of their best evidence) and searched
in a new round of lookup. When nothing waits, the round goes to reflection.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.plan.rules import dependent_rewrite
from memstrata.memory.query import Query
from memstrata.nodes.common import progress
from memstrata.nodes.retrieve.depth import deciding, sequential
from memstrata.runtime.node import open_node
from memstrata.runtime.step import Step
from memstrata.state import RetrievalState


class Rewritten(BaseModel):
    """A dependent sub-question made self-contained with what its prerequisites found."""

    question: str = Field(min_length=1)


def waiting(state: RetrievalState) -> list[Query]:
    """The sub-queries not searched yet whose prerequisites all have been, in plan order."""
    searched = set(state.get("searched", []))
    return [q for q in state.get("sub_queries", []) if q.id not in searched and set(q.depends_on) <= searched]


def prerequisite_answers(state: RetrievalState, query: Query) -> list[str]:
    """What the prerequisites answered (their sub-answers, else the round's latest pooled answer)."""
    found = [a["answer"] for a in state.get("sub_answers", []) if a["id"] in query.depends_on]
    pool = [p["answer"] for p in state.get("pool", []) if p.get("answer")]
    return found or pool[-1:]


async def rewrite_dependent(state: RetrievalState, query: Query, step: Step) -> tuple[Query, str]:
    """The sub-query rewritten from its prerequisites' results, and how."""
    top = sorted(
        (h for h in state.get("candidates", []) if h.query_id in query.depends_on), key=lambda h: (-h.score, h.key)
    )[: step.ctx.retrieval.anchor_hits]
    offline = dependent_rewrite(query.text, top, names=step.ctx.retrieval.anchor_names)
    answers = prerequisite_answers(state, query)
    if step.model is None or not answers:
        return replace(query, text=offline), "offline" if step.model is None else "no-prerequisite-answer"
    listing = "\n".join(f"- {a}" for a in answers)
    value, how = await step.decide(
        Rewritten,
        "DEPENDENT_PROMPT",
        f"<sub_question>{query.text}</sub_question>\n<prerequisite_answers>\n{listing}\n</prerequisite_answers>",
        node="rewrite_dependent",
        fallback=lambda: Rewritten(question=offline),
    )
    return replace(query, text=value.question.strip() or offline), how


async def next_wave(state: RetrievalState, runtime: Runtime[Context]) -> Command[Literal["lookup_level1", "reflect"]]:
    """Search the sub-queries whose prerequisites are done, or go on to reflection."""
    ready = waiting(state)
    run = await open_node(runtime, "next_wave", state)
    step = deciding(run.step, state)
    if not ready or step.halted:
        return Command(update={"opens": run.opens}, goto="reflect")
    # The rewrites of one wave are independent: asked side by side, each on its own view of the budget.
    steps = [step.sibling() if step.model is not None else step for _ in ready]
    pairs = await asyncio.gather(*(rewrite_dependent(state, q, s) for q, s in zip(ready, steps, strict=True)))
    active = [q for q, _ in pairs]
    progress("next_wave", "searching dependent sub-questions: " + "; ".join(q.text for q in active))
    event = {
        "node": "next_wave",
        "iteration": state.get("iteration", 0),
        "round": state.get("round", 0),
        "rewrites": {q.id: q.text for q in active},
        "how": [h for _, h in pairs],
        "calls": max(sequential(s.meter.own) for s in steps),
    }
    update: dict[str, Any] = {
        "active": active,
        "searched": [*state.get("searched", []), *(q.id for q in active)],
        "events": [event],
        "llm_calls": [r for s in steps for r in s.records],
        "opens": run.opens,
    }
    return Command(update=update, goto="lookup_level1")
