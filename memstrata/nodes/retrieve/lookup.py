"""Retrieval: HyMem's light module, the top-k lookup over Level-1 events (and direct raw turns by scope); then
xMemory's Stage II over the theme path's turns, with a model or, for its expansion, offline
(:mod:`memstrata.nodes.retrieve.stage2`). A large user's lookup
searches the HMO tier the query has reached (the cache first; :mod:`memstrata.nodes.retrieve.gate` goes deeper).
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.query import Fresh
from memstrata.memory.search.light import light_lookup
from memstrata.memory.tiers.assign import TIER_NAMES
from memstrata.nodes.common import progress
from memstrata.nodes.retrieve.depth import deciding, sequential
from memstrata.nodes.retrieve.stage2 import reader_stage2
from memstrata.runtime.node import open_node
from memstrata.state import RetrievalState


async def lookup_level1(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Top-k events of each kind per active query, the coarse top-``coarse_n``, and their linked turns."""
    ctx = runtime.context
    started = time.perf_counter()
    queries = list(state.get("active") or [])
    run = await open_node(runtime, "lookup_level1", state, search_index=True, queries=queries, graph=True)
    index, vectors, weights = run.index, run.vectors, run.weights
    assert index is not None and weights is not None  # search_index=True sets them
    assert vectors is not None  # set for the queries (with none, light_lookup's zip would fail on None anyway)
    progress("lookup_level1", f"searching summaries{f' in {TIER_NAMES[run.tier]}' if run.tier else ''}")
    found = light_lookup(
        index,
        queries,
        vectors,
        level1_k=run.event_k,
        coarse_n=ctx.coarse_n,
        weights=weights,
        now=run.now,
        scope_kinds=run.scope_kinds,
        raw_per_query=run.pool_size,
        graph=run.graph,
        themes=run.themes,
        superseded=ctx.graph.superseded_weight,
        level1_rank=ctx.retrieval.level1_rank,
        window_k=ctx.retrieval.window_turns,
        persona=ctx.persona.similarity if ctx.persona.search else None,
    )
    step = deciding(run.step, state, ctx.themes.stage2_checks)
    turns, stage2 = await reader_stage2(step, index, state["query"], found.turns, scenes=found.scenes())
    persona = max((m.trace() for m in found.persona.values()), key=lambda m: m["similarity"], default=None)
    held = state.get("persona")
    deeper = state.get("tier_fresh", False)  # the first lookup of a deeper tier: its candidates replace the last's
    probe = await run.probe_archive()
    return {
        **({"persona": persona} if persona and (not held or persona["similarity"] > held["similarity"]) else {}),
        "level1": found.level1,
        "coarse": found.coarse,
        "scenes": found.scenes(),
        "candidates": Fresh(turns) if deeper else turns,
        "tier_fresh": False,
        **({"tier_probe": probe} if probe is not None else {}),
        "llm_calls": step.records,
        "opens": run.opens,
        "events": [
            {
                "node": "lookup_level1",
                "iteration": state.get("iteration", 0),
                "wave": state.get("round", 0),
                "calls": sequential(step.meter.own),
                "tier": run.tier,
                "seconds": round(time.perf_counter() - started, 4),
                "turns_searched": len(index.turns),
                "queries": [q.text for q in queries],
                "level1": len(found.level1),
                "coarse": len(found.coarse),
                "turns": len(found.turns),
                "found_by": found.kinds,
                "graph_events": len(found.graph_events),
                "graph_events_added": sum(found.graph_events.values()),
                "themes": {q: vars(t) for q, t in found.themes.items()},
                "persona": {q: m.trace() for q, m in found.persona.items()},
                **({"stage2": stage2} if stage2 else {}),
            }
        ],
    }
