"""Retrieval: HyMem's deep module. Follow the chosen Level-1 events back to their verbatim Level-2 turns."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.deep_module import backtrack
from memstrata.memory.hits import event_turn_rows
from memstrata.memory.selection import drop_near_duplicates
from memstrata.nodes.common import progress
from memstrata.resources import open_index, query_vectors, reference_now, weights
from memstrata.state import RetrievalState


async def backtrack_level2(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Rerank the chosen events' turns with the best raw turns; skip near-duplicates."""
    ctx = runtime.context
    index = await open_index(ctx)
    coarse = state.get("coarse", [])
    selected = set(state.get("selected", []))
    picked = [c for c in coarse if c.key in selected] if selected else coarse
    how = "llm-selection" if selected else "coarse-top-n"
    progress("backtrack_level2", f"going deeper: {len(picked)} episodes ({how})")
    queries = list(state.get("active") or [])
    limit = max(ctx.backtrack_keep, int(ctx.context_budget * ctx.backtrack_keep_per_token))
    found = backtrack(index, queries, await query_vectors(ctx, queries), event_turn_rows(index, picked),
                      raw_top=ctx.backtrack_raw_top, weights=weights(ctx), now=reference_now(ctx, index),
                      scope_kinds=ctx.scopes(), keep=limit, top_events=len(picked))
    kept, redundant = drop_near_duplicates(found, index, max_items=limit, threshold=ctx.duplicate_threshold)
    return {"candidates": kept, "events": [{
        "node": "backtrack_level2", "iteration": state.get("iteration", 0), "episodes": len(picked), "how": how,
        "admitted": len(kept), "near_duplicates_skipped": redundant}]}
