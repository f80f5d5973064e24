"""Retrieval: HyMem's deep module. Pick Level-1 entries, backtrack to their verbatim Level-2 turns."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context, resolve_model
from memstrata.llm import decide
from memstrata.memory.evidence import admit, backtrack
from memstrata.nodes.common import meter_from, new_records, progress
from memstrata.nodes.session import active_queries, open_index, query_vectors, reference_now, weights
from memstrata.prompts.retrieval import SELECT_PROMPT
from memstrata.state import RetrievalState, SelectBatch


class Selection(BaseModel):
    """Numbers of the entries that may hold the answer."""

    ids: list[int] = Field(default_factory=list)


async def select_level1(batch: SelectBatch, runtime: Runtime[Context]) -> dict[str, Any]:
    """One parallel branch: the model picks Level-1 entries out of a batch of the coarse top-N."""
    ctx = runtime.context
    entries = batch["entries"]
    meter = meter_from(batch.get("llm_calls"), ctx.llm_token_budget)
    before = len(meter.calls)

    def check(sel: Selection) -> Selection:
        if any(i < 0 or i >= len(entries) for i in sel.ids):
            msg = f"ids must be entry numbers between 0 and {len(entries) - 1}"
            raise ValueError(msg)
        return sel

    listing = "\n".join(f"id:{i}, date: {e['time'] or 'unknown'}, {e['text']}" for i, e in enumerate(entries))
    sel, how = await decide(
        resolve_model(ctx), Selection, ctx.prompt("SELECT_PROMPT", SELECT_PROMPT),
        f"<question>{batch['query']}</question>\n<memory>\n{listing}\n</memory>", node="select_level1",
        meter=meter, validate=check, fallback=lambda: Selection(ids=list(range(min(3, len(entries))))),
        timeout=ctx.llm_timeout_s, retries=ctx.llm_retries,
    )
    chosen = [entries[i]["id"] for i in dict.fromkeys(sel.ids)]
    return {"selected_level1": chosen, "llm_calls": new_records(meter, before),
            "events": [{"node": "select_level1", "how": how, "offered": len(entries), "chosen": len(chosen)}]}


async def backtrack_level2(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Follow the chosen summaries to their verbatim episodes; rerank raw turns; admit non-redundant ones."""
    ctx = runtime.context
    index = await open_index(ctx)
    coarse = state.get("coarse", [])
    selected = set(state.get("selected_level1", []))
    picked = [c for c in coarse if c["id"] in selected] if selected else coarse
    how = "llm-selection" if selected else "coarse-top-n"
    progress("backtrack_level2", f"going deeper: {len(picked)} episodes ({how})")
    queries = active_queries(state)
    vectors = await query_vectors(ctx, queries)
    limit = max(ctx.coarse_n * 4, ctx.context_budget // 8)
    found = backtrack(index, queries, vectors, [c["index"] for c in picked], raw_top=ctx.coarse_n * 2,
                      weights=weights(ctx), now=reference_now(ctx, index), keep=limit)
    kept, redundant = admit(found, index, max_items=limit)
    return {"candidates": kept, "events": [{
        "node": "backtrack_level2", "iteration": state.get("iteration", 0), "episodes": len(picked), "how": how,
        "admitted": len(kept), "redundant_skipped": redundant}]}
