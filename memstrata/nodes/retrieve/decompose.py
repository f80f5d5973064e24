"""Retrieval: plan the query in one model call (H-Mem's planner): dependent sub-queries, each with its scope and
time window. :mod:`memstrata.nodes.retrieve.scope` applies the scopes, and labels offline what the plan left out.
"""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Any, Literal

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.plan.rules import decompose_query
from memstrata.memory.query import Query
from memstrata.memory.timeparse import format_date
from memstrata.nodes.common import progress
from memstrata.nodes.retrieve.depth import deciding, sequential
from memstrata.runtime.node import open_node
from memstrata.state import RetrievalState

Scope = Literal["Short", "Long", "Mixed"]


class PlannedQuery(BaseModel):  # noqa: D101 - a docstring would join the tool schema the model reads
    id: str = Field(description="q1, q2, ...")
    question: str
    depends_on: list[str] = Field(default_factory=list)
    scope: Scope | None = None
    start_date: date | None = Field(default=None, description="YYYY-MM-DD or empty")
    end_date: date | None = Field(default=None, description="YYYY-MM-DD or empty")


class Plan(BaseModel):
    """Sub-questions in answering order, and the scope and time window of the question and of each."""

    sub_queries: list[PlannedQuery] = Field(min_length=1)
    scope: Scope | None = None
    start_date: date | None = Field(default=None, description="YYYY-MM-DD or empty")
    end_date: date | None = Field(default=None, description="YYYY-MM-DD or empty")


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
    """The original query (always kept as q0) plus sub-queries from the model or the rules.

    With a model, the one call also labels the scope and time window of q0 and of every sub-query (what it
    leaves out, and everything offline, ``predict_scope`` labels by the rules).
    """
    ctx = runtime.context
    text = state["query"].strip()
    if not text:
        msg = "the query is empty"
        raise ValueError(msg)
    progress("decompose", "planning the search")
    offline = decompose_query(text, max_parts=ctx.max_sub_queries)
    asks = ctx.llm_mode and ctx.llm_retrieval == "full"  # the reference date is read only for the model's plan
    run = await open_node(runtime, "decompose", state, new_query=True, search_index=asks)
    step = deciding(run.step, state)
    plan, how = await step.decide(
        Plan,
        "DECOMPOSE_PROMPT",
        f"<question>{text}</question>",
        node="decompose",
        validate=_checker(ctx.max_sub_queries),
        max_parts=ctx.max_sub_queries,
        now=format_date(run.now) or "unknown",
        fallback=lambda: Plan(
            sub_queries=[PlannedQuery(id=q.id, question=q.text) for q in offline[1:]]
            or [PlannedQuery(id="q1", question=text)]
        ),
    )
    subs = [_labelled(Query(id="q0", text=text), plan)] + [
        _labelled(
            Query(id=p.id, text=p.question.strip(), depends_on=p.depends_on, weight=ctx.retrieval.sub_query_weight), p
        )
        for p in plan.sub_queries
        if p.question.strip() != text
    ]
    subs = _drop_dangling(subs[: ctx.max_sub_queries])
    labelled = [q.id for q, p in zip(subs, _labels(plan, subs), strict=True) if p is not None and p.scope]
    return {
        "sub_queries": subs,
        "iteration": 0,
        "round": 0,
        "run_key": run.run_key,
        "llm_calls": step.records,
        "opens": run.opens,
        "events": [
            {
                "node": "decompose",
                "how": how,
                "calls": sequential(step.meter.own),
                "sub_queries": [q.text for q in subs],
                "labelled": labelled,
            }
        ],
    }


def _labels(plan: Plan, subs: list[Query]) -> list[Plan | PlannedQuery | None]:
    """The plan entry that labels each query (q0: the plan itself)."""
    by_id = {p.id: p for p in plan.sub_queries}
    return [plan if q.id == "q0" else by_id.get(q.id) for q in subs]


def _labelled(query: Query, item: Plan | PlannedQuery) -> Query:
    """The query with the scope and time window the plan gave it (unchanged when it gave no scope)."""
    if item.scope is None:
        return query
    start = datetime.combine(item.start_date, time.min) if item.start_date else None
    end_day = item.end_date or item.start_date
    end = datetime.combine(end_day, time.max) if end_day and start else None
    return Query(**{**vars(query), "scope": item.scope, "hint_start": start, "hint_end": end})


def _drop_dangling(subs: list[Query]) -> list[Query]:
    """Dependencies on sub-queries that were cut (or were q0's duplicate) are dropped, so nothing waits forever."""
    ids = {q.id for q in subs}
    return [
        q if set(q.depends_on) <= ids else Query(**{**vars(q), "depends_on": [d for d in q.depends_on if d in ids]})
        for q in subs
    ]
