"""Retrieval: pack the evidence into the context budget and, with a model, stream a cited answer."""

from __future__ import annotations

from collections import Counter
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from memstrata import llm
from memstrata.context import Context
from memstrata.llm import CallRecord, Meter
from memstrata.memory.render import pack_context
from memstrata.memory.selection import mark_captions, mmr
from memstrata.memory.tokens import TokenCounter
from memstrata.nodes.common import LLMStep, progress
from memstrata.resources import open_index
from memstrata.state import RetrievalState


async def answer(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Final context and evidence; the answer is ``None`` offline."""
    ctx = runtime.context
    index = await open_index(ctx)
    ranked = mmr(state.get("candidates", []), index, penalty=ctx.diversity, head=ctx.mmr_head,
                 picks=ctx.context_budget // ctx.mmr_tokens_per_pick)
    ranked = mark_captions(ranked, [state["query"], *(q.text for q in state.get("sub_queries", []))])
    context, chosen, tokens = pack_context(ranked, budget=ctx.context_budget, counter=TokenCounter())
    step = LLMStep(ctx, state.get("llm_calls"))
    text, note = None, "offline: no model configured"
    if step.model is not None and ctx.generate_answer:
        messages = [SystemMessage(ctx.prompt("ANSWER_PROMPT")),
                    HumanMessage(f"<memory>\n{context}\n</memory>\n<question>{state['query']}</question>")]
        if not step.meter.affords(TokenCounter().count("\n".join(str(m.content) for m in messages))):
            note = "llm_token_budget exhausted before the answer"
        else:
            progress("answer", "writing the answer")
            try:
                text = await llm.stream_answer(step.model, messages, node="answer", meter=step.meter,
                                               timeout=ctx.llm_timeout_s)
                note = "streamed"
            except llm.LLMError as exc:
                note = f"answer failed: {exc}"
    calls = [*state.get("llm_calls", []), *step.records]
    trace = build_trace(state, calls, note, tokens, len(ranked), chosen)
    return {"answer": text, "context": context, "context_tokens": tokens, "trace": trace,
            "evidence": [c.evidence() for c in chosen], "llm_calls": step.records}


def build_trace(state: RetrievalState, calls: list[dict[str, Any]], note: str, tokens: int, candidates: int,
                chosen: list[Any]) -> dict[str, Any]:
    """What ran and why: path, gate reasons, iterations, sub-queries, scopes, kinds that found the evidence, LLM use."""
    events = state.get("events", [])
    gates = [e for e in events if e["node"] == "gate"]
    meter = Meter(calls=[CallRecord(**c) for c in calls])
    return {
        "path": "deep" if any(g["path"] == "deep" for g in gates) else "light",
        "gate": [{k: g[k] for k in ("iteration", "path", "reason", "how")} for g in gates],
        "iterations": state.get("iteration", 0),
        "sub_queries": [q.text for q in state.get("sub_queries", [])],
        "scopes": {q.id: q.scope for q in state.get("sub_queries", [])},
        "found_by": dict(Counter(h.found_by for h in chosen)),
        "answer": note, "context_tokens": tokens, "candidates": candidates,
        "llm": meter.summary(), "events": events,
    }
