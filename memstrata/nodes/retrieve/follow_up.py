"""Retrieval: H-Mem's missing-info follow-up, one targeted query for what is still missing."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.llm import GOOD_OUTCOMES
from memstrata.memory.deep_module import backtrack
from memstrata.memory.planning import follow_up_query
from memstrata.memory.query import Query
from memstrata.memory.selection import coverage_texts
from memstrata.nodes.common import LLMStep, progress
from memstrata.resources import open_index, query_vectors, reference_now, weights
from memstrata.state import RetrievalState


class MissingInfo(BaseModel):
    """Whether one piece of information is missing, and the query that would find it."""

    missing: bool
    query: str = Field(default="", description="one short search query for the missing piece")


async def follow_up(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Search once more for the missing slot, anchored on the query's entities and what was found."""
    ctx = runtime.context
    index = await open_index(ctx)
    texts = coverage_texts(state.get("candidates", []), ctx.follow_up_texts)
    rule = follow_up_query(state["query"], texts, speakers=index.speakers)
    step = LLMStep(ctx, state.get("llm_calls"))
    evidence = "\n".join(texts)
    info, how = await step.decide(
        MissingInfo, "FOLLOW_UP_PROMPT", f"<question>{state['query']}</question>\n<memory>\n{evidence}\n</memory>",
        node="follow_up", fallback=lambda: MissingInfo(missing=rule is not None, query=rule or ""),
    )
    event: dict[str, Any] = {"node": "follow_up", "iteration": state.get("iteration", 0), "how": how,
                             "query": info.query if info.missing else None}
    if not info.missing or not info.query.strip():
        return {"events": [event], "llm_calls": step.records}
    progress("follow_up", f"follow-up: {info.query}")
    query = Query(id="follow_up", text=info.query.strip(), scope="Short", weight=ctx.follow_up_weight,
                  dense_text=None if how in GOOD_OUTCOMES else state["query"])
    found = backtrack(index, [query], await query_vectors(ctx, [query]), [], raw_top=ctx.follow_up_turns,
                      weights=weights(ctx), now=reference_now(ctx, index), scope_kinds=ctx.scopes())
    event["found"] = len(found)
    return {"candidates": found, "events": [event], "llm_calls": step.records}
