"""Retrieval: label each sub-query Short/Long/Mixed and extract its temporal hint (H-Mem)."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime, time
from typing import Any, Literal

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.plan.rules import predict_scope as rule_scope
from memstrata.memory.search.query import Query
from memstrata.memory.timeparse import format_date
from memstrata.memory.tree.search import select_windows, with_anchor
from memstrata.nodes.common import progress
from memstrata.runtime.node import open_node
from memstrata.state import RetrievalState


class ScopeItem(BaseModel):  # noqa: D101 - a docstring would join the tool schema the model reads
    id: str
    scope: Literal["Short", "Long", "Mixed"]
    start_date: date | None = Field(default=None, description="YYYY-MM-DD or empty")
    end_date: date | None = Field(default=None, description="YYYY-MM-DD or empty")


class Scopes(BaseModel):
    """One scope per sub-query."""

    items: list[ScopeItem]


async def predict_scope(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Attach scope and time hints to every sub-query; they become this round's active queries."""
    subs = state["sub_queries"]
    run = await open_node(runtime, "predict_scope", state, search_index=True, queries=subs)
    index, now, step = run.index, run.now, run.step
    rules = {q.id: with_anchor(rule_scope(q.text, now=now), index, q.text, now=now) for q in subs}

    def fallback() -> Scopes:
        return Scopes(
            items=[
                ScopeItem(
                    id=i, scope=sc, start_date=h.start.date() if h else None, end_date=h.end.date() if h else None
                )
                for i, (sc, h) in rules.items()
            ]
        )

    def check(value: Scopes) -> Scopes:
        if {i.id for i in value.items} != set(rules):
            msg = f"give exactly one item for each id: {sorted(rules)}"
            raise ValueError(msg)
        return value

    listing = "\n".join(f"{q.id}: {q.text}" for q in subs)
    scopes, how = await step.decide(
        Scopes,
        "SCOPE_PROMPT",
        f"<sub_questions>\n{listing}\n</sub_questions>",
        node="predict_scope",
        fallback=fallback,
        validate=check,
        now=format_date(now) or "unknown",
    )
    by_id = {i.id: i for i in scopes.items}
    scoped = [_scoped(q, by_id[q.id]) for q in subs]
    active = [q for q in scoped if not q.depends_on]  # dependents wait for their prerequisites
    progress("predict_scope", ", ".join(f"{q.id}: {q.scope}" for q in scoped))
    return {
        "active": active,
        "sub_queries": scoped,
        "searched": [q.id for q in active],
        "llm_calls": step.records,
        "tier": run.tier,
        "events": [
            {
                "node": "predict_scope",
                "how": how,
                "scopes": {q.id: [q.scope, _iso(q.hint_start), _iso(q.hint_end)] for q in scoped},
                "windows": {q.id: [w.as_dict() for w in select_windows(index, q.hint)] for q in scoped},
            }
        ],
    }


def _scoped(query: Query, item: ScopeItem) -> Query:
    start = datetime.combine(item.start_date, time.min) if item.start_date else None
    end_day = item.end_date or item.start_date
    end = datetime.combine(end_day, time.max) if end_day and start else None
    return replace(query, scope=item.scope, hint_start=start, hint_end=end)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
