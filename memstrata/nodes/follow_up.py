"""Retrieval: H-Mem's missing-info follow-up, one targeted query for what is still missing."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context, resolve_model
from memstrata.llm import GOOD_OUTCOMES, decide
from memstrata.memory.evidence import backtrack, coverage_texts
from memstrata.memory.planning import follow_up_query
from memstrata.nodes.common import meter_from, new_records, progress
from memstrata.nodes.session import open_index, query_vectors, reference_now, weights
from memstrata.prompts.retrieval import FOLLOW_UP_PROMPT
from memstrata.state import RetrievalState

FOLLOW_UP_WEIGHT = 0.9


class MissingInfo(BaseModel):
    """Whether one piece of information is missing, and the query that would find it."""

    missing: bool
    query: str = Field(default="", description="one short search query for the missing piece")


async def follow_up(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Search once more for the missing slot, anchored on the query's entities and what was found."""
    ctx = runtime.context
    index = await open_index(ctx)
    texts = coverage_texts(state.get("candidates", []), 10)
    rule = follow_up_query(state["query"], texts, speakers=index.speakers)
    meter = meter_from(state.get("llm_calls"), ctx.llm_token_budget)
    before = len(meter.calls)
    evidence = "\n".join(texts)
    info, how = await decide(
        resolve_model(ctx), MissingInfo, ctx.prompt("FOLLOW_UP_PROMPT", FOLLOW_UP_PROMPT),
        f"<question>{state['query']}</question>\n<memory>\n{evidence}\n</memory>", node="follow_up", meter=meter,
        fallback=lambda: MissingInfo(missing=rule is not None, query=rule or ""),
        timeout=ctx.llm_timeout_s, retries=ctx.llm_retries,
    )
    event: dict[str, Any] = {"node": "follow_up", "iteration": state.get("iteration", 0), "how": how,
                             "query": info.query if info.missing else None}
    if not info.missing or not info.query.strip():
        return {"events": [event], "llm_calls": new_records(meter, before)}
    progress("follow_up", f"follow-up: {info.query}")
    query = {"id": "follow_up", "text": info.query.strip(), "scope": "Short", "hint_start": None, "hint_end": None,
             "weight": FOLLOW_UP_WEIGHT, "dense_text": None if how in GOOD_OUTCOMES else state["query"]}
    vectors = await query_vectors(ctx, [query])
    found = backtrack(index, [query], vectors, [], raw_top=ctx.level1_k, weights=weights(ctx),
                      now=reference_now(ctx, index))
    event["found"] = len(found)
    return {"candidates": found, "events": [event], "llm_calls": new_records(meter, before)}
