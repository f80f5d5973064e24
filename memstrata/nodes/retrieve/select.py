"""Retrieval: HyMem's deep-module selection f_gamma(q_i, [s]_N). The model picks Level-1 entries, one ``Send`` branch
per batch; the picked entries decide which Level-2 episodes enter the context.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.nodes.retrieve.depth import sequential
from memstrata.runtime.node import open_node
from memstrata.state import SelectBatch


class Selection(BaseModel):
    """Numbers of the entries that may hold the answer."""

    ids: list[int] = Field(default_factory=list)


async def select_level1(batch: SelectBatch, runtime: Runtime[Context]) -> dict[str, Any]:
    """One parallel branch: the model picks Level-1 entries out of a batch of the coarse top-N."""
    ctx = runtime.context
    entries = batch["entries"]
    run = await open_node(runtime, "select_level1", batch)
    step = run.step

    def check(sel: Selection) -> Selection:
        if any(i < 0 or i >= len(entries) for i in sel.ids):
            msg = f"ids must be entry numbers between 0 and {len(entries) - 1}"
            raise ValueError(msg)
        return sel

    listing = "\n".join(f"id:{i}, date: {e.time or 'unknown'}, {e.text}" for i, e in enumerate(entries))
    sel, how = await step.decide(
        Selection,
        "SELECT_PROMPT",
        f"<question>{batch['query'].text}</question>\n<memory>\n{listing}\n</memory>",
        node="select_level1",
        validate=check,
        fallback=lambda: Selection(ids=list(range(min(ctx.retrieval.select_fallback, len(entries))))),
    )
    chosen = [[batch["round"], entries[i].key] for i in dict.fromkeys(sel.ids)]
    return {
        "selected": chosen,
        "selection_rounds": [batch["round"]],
        "llm_calls": step.records,
        "opens": run.opens,
        "events": [
            {
                "node": "select_level1",
                "round": batch["round"],
                "query": batch["query"].text,
                "how": how,
                "calls": sequential(step.meter.own),
                "offered": len(entries),
                "chosen": len(chosen),
            }
        ],
    }
