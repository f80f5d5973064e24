"""Retrieval: HyMem's deep module. Follow the chosen Level-1 events back to their verbatim Level-2 turns.

With a model, its selection decides: the turns of the selected episodes enter
the context first (``retrieval.selection_priority`` lifts them above every turn that only
scored well; those fill what budget is left). A selection of nothing falls back,
explicitly and in the trace, to the best ``retrieval.select_fallback`` episodes of the
coarse top-N. Offline every coarse episode's turns are reranked with the best
raw turns, by score alone.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.query import Hit
from memstrata.memory.search.deep import backtrack
from memstrata.memory.search.scoring import event_turn_rows
from memstrata.memory.search.selection import drop_near_duplicates
from memstrata.nodes.common import progress
from memstrata.runtime.node import open_node
from memstrata.state import RetrievalState


def chosen_episodes(state: RetrievalState, ctx: Context) -> tuple[list[Hit], str, float]:
    """The coarse entries whose episodes are backtracked, how they were chosen, and their turns' priority."""
    coarse = state.get("coarse", [])
    round_no = state.get("round", 0)
    if round_no not in state.get("selection_rounds", []):
        return coarse, "coarse-top-n", 0.0
    keys = {key for r, key in state.get("selected", []) if r == round_no}
    priority = ctx.retrieval.selection_priority
    if not keys:
        return (
            coarse[: ctx.retrieval.select_fallback],
            f"selection-empty: fallback to coarse top-{ctx.retrieval.select_fallback}",
            priority,
        )
    return [c for c in coarse if c.key in keys], "llm-selection", priority


async def backtrack_level2(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Rerank the chosen events' turns with the best raw turns; skip near-duplicates."""
    ctx = runtime.context
    queries = list(state.get("active") or [])
    run = await open_node(runtime, "backtrack_level2", state, search_index=True, queries=queries)
    halted = run.step.halted
    if halted:  # the budget ran out during selection: stop deepening, answer with what is there
        return {
            "halted": halted,
            "opens": run.opens,
            "events": [
                {
                    "node": "backtrack_level2",
                    "iteration": state.get("iteration", 0),
                    "round": state.get("round", 0),
                    "how": f"skipped: budget ({halted})",
                    "episodes": 0,
                    "admitted": 0,
                    "fallback": False,
                }
            ],
        }
    index, vectors, weights = run.index, run.vectors, run.weights
    assert index is not None and weights is not None  # search_index=True sets them
    assert vectors is not None  # set for the queries (with none, backtrack's zip would fail on None anyway)
    picked, how, priority = chosen_episodes(state, ctx)
    progress("backtrack_level2", f"going deeper: {len(picked)} episodes ({how})")
    limit = max(ctx.retrieval.backtrack_keep, int(ctx.context_budget * ctx.retrieval.backtrack_keep_per_token))
    found = backtrack(
        index,
        queries,
        vectors,
        event_turn_rows(index, picked),
        raw_top=ctx.retrieval.backtrack_raw_top,
        weights=weights,
        now=run.now,
        scope_kinds=run.scope_kinds,
        keep=limit,
        top_events=len(picked),
        chosen_bonus=priority,
    )
    kept, redundant = drop_near_duplicates(found, index, max_items=limit, threshold=ctx.retrieval.duplicate_threshold)
    return {
        "candidates": kept,
        "opens": run.opens,
        "events": [
            {
                "node": "backtrack_level2",
                "iteration": state.get("iteration", 0),
                "round": state.get("round", 0),
                "episodes": len(picked),
                "how": how,
                "fallback": how.startswith("selection-empty"),
                "admitted": len(kept),
                "near_duplicates_skipped": redundant,
            }
        ],
    }
