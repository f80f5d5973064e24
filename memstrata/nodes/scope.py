"""Retrieval: label each sub-query Short/Long/Mixed and extract its temporal hint (H-Mem)."""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Any, Literal

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context, resolve_model
from memstrata.llm import decide
from memstrata.memory.planning import predict_scope as rule_scope
from memstrata.memory.timeparse import format_date
from memstrata.nodes.common import meter_from, new_records, progress
from memstrata.nodes.session import open_index, reference_now
from memstrata.prompts.retrieval import SCOPE_PROMPT
from memstrata.state import RetrievalState


class ScopeItem(BaseModel):
    id: str
    scope: Literal["Short", "Long", "Mixed"]
    start_date: date | None = Field(default=None, description="YYYY-MM-DD or empty")
    end_date: date | None = Field(default=None, description="YYYY-MM-DD or empty")


class Scopes(BaseModel):
    """One scope per sub-query."""

    items: list[ScopeItem]


async def predict_scope(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Attach scope and time hints to every sub-query; they become this round's active queries."""
    ctx = runtime.context
    index = await open_index(ctx)
    now = reference_now(ctx, index)
    subs = state["sub_queries"]
    rules = {s["id"]: rule_scope(s["text"], now=now) for s in subs}

    def fallback() -> Scopes:
        return Scopes(items=[ScopeItem(id=i, scope=sc, start_date=h.start.date() if h else None,
                                       end_date=h.end.date() if h else None) for i, (sc, h) in rules.items()])

    def check(value: Scopes) -> Scopes:
        if {i.id for i in value.items} != set(rules):
            msg = f"give exactly one item for each id: {sorted(rules)}"
            raise ValueError(msg)
        return value

    meter = meter_from(state.get("llm_calls"), ctx.llm_token_budget)
    before = len(meter.calls)
    listing = "\n".join(f"{s['id']}: {s['text']}" for s in subs)
    scopes, how = await decide(
        resolve_model(ctx), Scopes, ctx.prompt("SCOPE_PROMPT", SCOPE_PROMPT).format(now=format_date(now) or "unknown"),
        f"<sub_questions>\n{listing}\n</sub_questions>", node="predict_scope", fallback=fallback, meter=meter,
        validate=check, timeout=ctx.llm_timeout_s, retries=ctx.llm_retries,
    )
    by_id = {i.id: i for i in scopes.items}
    active = [_active(s, by_id[s["id"]]) for s in subs]
    progress("predict_scope", ", ".join(f"{a['id']}: {a['scope']}" for a in active))
    return {"active": active, "sub_queries": active, "llm_calls": new_records(meter, before),
            "events": [{"node": "predict_scope", "how": how,
                        "scopes": {a["id"]: [a["scope"], a["hint_start"], a["hint_end"]] for a in active}}]}


def _active(sub: dict[str, Any], item: ScopeItem) -> dict[str, Any]:
    start = datetime.combine(item.start_date, time.min).isoformat() if item.start_date else None
    end_day = item.end_date or item.start_date
    end = datetime.combine(end_day, time.max).isoformat() if end_day and start else None
    weight = 1.0 if sub["id"] == "q0" else 0.95
    return {**sub, "scope": item.scope, "hint_start": start, "hint_end": end, "weight": weight}
