"""Retrieval: split the question into dependent sub-queries (H-Mem's planner)."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context, resolve_model
from memstrata.llm import decide
from memstrata.memory.planning import SubQuery, decompose_query
from memstrata.nodes.common import meter_from, new_records, progress
from memstrata.prompts.retrieval import DECOMPOSE_PROMPT
from memstrata.state import RetrievalState

MAX_PARTS = 4


class PlannedQuery(BaseModel):
    id: str = Field(description="q1, q2, ...")
    question: str
    depends_on: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    """Sub-questions in answering order."""

    sub_queries: list[PlannedQuery] = Field(min_length=1, max_length=MAX_PARTS)


def _check(plan: Plan) -> Plan:
    ids = [p.id for p in plan.sub_queries]
    if len(set(ids)) != len(ids) or any(not p.question.strip() for p in plan.sub_queries):
        msg = "sub-query ids must be unique and questions non-empty"
        raise ValueError(msg)
    if any(d not in ids for p in plan.sub_queries for d in p.depends_on):
        msg = "depends_on may only name ids of this plan"
        raise ValueError(msg)
    return plan


async def decompose(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """The original query (always kept as q0) plus sub-queries from the model or the rules."""
    ctx = runtime.context
    query = state["query"].strip()
    if not query:
        msg = "the query is empty"
        raise ValueError(msg)
    progress("decompose", "planning the search")
    offline = decompose_query(query, max_parts=MAX_PARTS)
    meter = meter_from(state.get("llm_calls"), ctx.llm_token_budget)
    before = len(meter.calls)
    plan, how = await decide(
        resolve_model(ctx), Plan, ctx.prompt("DECOMPOSE_PROMPT", DECOMPOSE_PROMPT).format(max_parts=MAX_PARTS),
        f"<question>{query}</question>", node="decompose", meter=meter, validate=_check,
        fallback=lambda: Plan(sub_queries=[PlannedQuery(id=s.id, question=s.text) for s in offline[1:]] or
                              [PlannedQuery(id="q1", question=query)]),
        timeout=ctx.llm_timeout_s, retries=ctx.llm_retries,
    )
    subs = [SubQuery(id="q0", text=query)] + [
        SubQuery(id=p.id, text=p.question.strip(), depends_on=p.depends_on)
        for p in plan.sub_queries if p.question.strip() != query
    ]
    subs = subs[:MAX_PARTS]
    return {
        "sub_queries": [{"id": s.id, "text": s.text, "depends_on": s.depends_on} for s in subs],
        "iteration": 0,
        "events": [{"node": "decompose", "how": how, "sub_queries": [s.text for s in subs]}],
        "llm_calls": new_records(meter, before),
    }
