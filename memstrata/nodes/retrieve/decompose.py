"""Retrieval: split the question into dependent sub-queries (H-Mem's planner)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.plan.rules import decompose_query
from memstrata.memory.search.query import Query
from memstrata.nodes.common import progress
from memstrata.runtime.node import open_node
from memstrata.state import RetrievalState


class PlannedQuery(BaseModel):  # noqa: D101 - a docstring would join the tool schema the model reads
    id: str = Field(description="q1, q2, ...")
    question: str
    depends_on: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    """Sub-questions in answering order."""

    sub_queries: list[PlannedQuery] = Field(min_length=1)


def _checker(max_parts: int) -> Any:
    def check(plan: Plan) -> Plan:
        ids = [p.id for p in plan.sub_queries]
        if len(ids) > max_parts:
            msg = f"give at most {max_parts} sub-questions"
            raise ValueError(msg)
        if len(set(ids)) != len(ids) or any(not p.question.strip() for p in plan.sub_queries):
            msg = "sub-query ids must be unique and questions non-empty"
            raise ValueError(msg)
        if any(d not in ids[:i] for i, p in enumerate(plan.sub_queries) for d in p.depends_on):
            msg = "depends_on may only name ids of earlier sub-questions of this plan"
            raise ValueError(msg)
        return plan

    return check


async def decompose(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """The original query (always kept as q0) plus sub-queries from the model or the rules."""
    ctx = runtime.context
    text = state["query"].strip()
    if not text:
        msg = "the query is empty"
        raise ValueError(msg)
    progress("decompose", "planning the search")
    offline = decompose_query(text, max_parts=ctx.max_sub_queries)
    run = await open_node(runtime, "decompose", state, new_query=True)
    step = run.step
    plan, how = await step.decide(
        Plan,
        "DECOMPOSE_PROMPT",
        f"<question>{text}</question>",
        node="decompose",
        validate=_checker(ctx.max_sub_queries),
        max_parts=ctx.max_sub_queries,
        fallback=lambda: Plan(
            sub_queries=[PlannedQuery(id=q.id, question=q.text) for q in offline[1:]]
            or [PlannedQuery(id="q1", question=text)]
        ),
    )
    subs = [Query(id="q0", text=text)] + [
        Query(id=p.id, text=p.question.strip(), depends_on=p.depends_on, weight=ctx.sub_query_weight)
        for p in plan.sub_queries
        if p.question.strip() != text
    ]
    subs = _drop_dangling(subs[: ctx.max_sub_queries])
    return {
        "sub_queries": subs,
        "iteration": 0,
        "round": 0,
        "run_key": run.run_key,
        "llm_calls": step.records,
        "events": [{"node": "decompose", "how": how, "sub_queries": [q.text for q in subs]}],
    }


def _drop_dangling(subs: list[Query]) -> list[Query]:
    """Dependencies on sub-queries that were cut (or were q0's duplicate) are dropped, so nothing waits forever."""
    ids = {q.id for q in subs}
    return [
        q if set(q.depends_on) <= ids else Query(**{**vars(q), "depends_on": [d for d in q.depends_on if d in ids]})
        for q in subs
    ]
