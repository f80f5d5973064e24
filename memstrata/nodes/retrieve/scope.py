"""Retrieval: label each sub-query Short/Long/Mixed and attach its temporal hint (H-Mem).

The model labels them in the plan's one call (:mod:`memstrata.nodes.retrieve.decompose`); this step makes no call.
It keeps what the plan gave, and labels by the rules every query the plan left unlabelled (all of them offline, or
when the plan fell back): cue words, the time the text names, or an event it is anchored on, dated through the
memory.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, time
from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.plan.rules import predict_scope as rule_scope
from memstrata.memory.query import Query
from memstrata.memory.tree.search import select_windows, with_anchor
from memstrata.nodes.common import progress
from memstrata.runtime.node import open_node
from memstrata.state import RetrievalState


def planned(state: RetrievalState) -> set[str]:
    """The ids of the sub-queries the plan's model call labelled."""
    plans = [e for e in state.get("events", []) if e["node"] == "decompose"]
    return set(plans[-1].get("labelled", [])) if plans else set()


async def predict_scope(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Attach scope and time hints to every sub-query; they become this round's active queries."""
    subs = state["sub_queries"]
    run = await open_node(runtime, "predict_scope", state, search_index=True, queries=subs)
    index, now = run.index, run.now
    assert index is not None  # search_index=True opens it
    labelled = planned(state)

    def by_rules(query: Query) -> Query:
        scope, hint = with_anchor(rule_scope(query.text, now=now), index, query.text, now=now)
        if hint is None:
            return replace(query, scope=scope, hint_start=None, hint_end=None)
        # Whole days, as the plan's dates are: a rule's window and a model's are read alike.
        start, end = datetime.combine(hint.start.date(), time.min), datetime.combine(hint.end.date(), time.max)
        return replace(query, scope=scope, hint_start=start, hint_end=end)

    scoped = [q if q.id in labelled else by_rules(q) for q in subs]
    active = [q for q in scoped if not q.depends_on]  # dependents wait for their prerequisites
    progress("predict_scope", ", ".join(f"{q.id}: {q.scope}" for q in scoped))
    return {
        "active": active,
        "sub_queries": scoped,
        "searched": [q.id for q in active],
        "tier": run.tier,
        "opens": run.opens,
        "events": [
            {
                "node": "predict_scope",
                "how": "plan" if labelled >= {q.id for q in subs} else "plan+offline" if labelled else "offline",
                "scopes": {q.id: [q.scope, _iso(q.hint_start), _iso(q.hint_end)] for q in scoped},
                "windows": {q.id: [w.as_dict() for w in select_windows(index, q.hint)] for q in scoped},
            }
        ],
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
