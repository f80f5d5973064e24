"""Retrieval: HyMem's light module, a hybrid top-k lookup over the Level-1 summaries."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.evidence import light_lookup
from memstrata.nodes.common import progress
from memstrata.nodes.session import active_queries, open_index, query_vectors, reference_now, weights
from memstrata.state import RetrievalState


async def lookup_level1(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Top-``level1_k`` summaries per active query, the coarse top-``coarse_n``, and their linked turns."""
    ctx = runtime.context
    progress("lookup_level1", "searching summaries")
    index = await open_index(ctx)
    queries = active_queries(state)
    vectors = await query_vectors(ctx, queries)
    hits, coarse, turns = light_lookup(index, queries, vectors, level1_k=ctx.level1_k, coarse_n=ctx.coarse_n,
                                       weights=weights(ctx), now=reference_now(ctx, index))
    return {
        "level1_hits": hits, "coarse": coarse, "candidates": turns,
        "events": [{"node": "lookup_level1", "iteration": state.get("iteration", 0), "queries": [q["text"] for q in queries],
                    "summaries": len(hits), "coarse": len(coarse), "turns": len(turns)}],
    }
