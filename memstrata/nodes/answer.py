"""Retrieval: pack the evidence into the context budget and, with a model, stream a cited answer."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from memstrata.context import Context, resolve_model
from memstrata import llm
from memstrata.memory.evidence import diversify, mark_captions
from memstrata.memory.render import pack_context
from memstrata.memory.tokens import TokenCounter
from memstrata.nodes.common import meter_from, new_records, progress
from memstrata.nodes.session import open_index
from memstrata.prompts.retrieval import ANSWER_PROMPT
from memstrata.state import RetrievalState


async def answer(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Final context and evidence; the answer is ``None`` offline."""
    ctx = runtime.context
    index = await open_index(ctx)
    # Reordering more slots than can fit the budget (~20 tokens a turn at least) buys nothing.
    ranked = diversify(state.get("candidates", []), index, penalty=ctx.diversity, picks=ctx.context_budget // 20)
    ranked = mark_captions(ranked, [state["query"], *(s["text"] for s in state.get("sub_queries", []))])
    context, chosen, tokens = pack_context(ranked, budget=ctx.context_budget, counter=TokenCounter())
    meter = meter_from(state.get("llm_calls"), ctx.llm_token_budget)
    before = len(meter.calls)
    model = resolve_model(ctx)
    text, note = None, "offline: no model configured"
    if model is not None and ctx.generate_answer:
        messages = [SystemMessage(ctx.prompt("ANSWER_PROMPT", ANSWER_PROMPT)),
                    HumanMessage(f"<memory>\n{context}\n</memory>\n<question>{state['query']}</question>")]
        if not meter.affords(TokenCounter().count("\n".join(str(m.content) for m in messages))):
            note = "llm_token_budget exhausted before the answer"
        else:
            progress("answer", "writing the answer")
            try:
                text = await llm.stream_answer(model, messages, node="answer", meter=meter, timeout=ctx.llm_timeout_s)
                note = "streamed"
            except llm.LLMError as exc:
                note = f"answer failed: {exc}"
    calls = [*state.get("llm_calls", []), *new_records(meter, before)]
    trace = build_trace(state, calls, note, tokens, len(ranked))
    return {"answer": text, "context": context, "context_tokens": tokens, "trace": trace,
            "evidence": [_evidence(c) for c in chosen], "llm_calls": new_records(meter, before)}


def _evidence(c: dict[str, Any]) -> dict[str, Any]:
    keys = ("turn_id", "conversation_id", "session_id", "speaker", "text", "time", "image_caption", "level",
            "score", "score_parts")
    return {k: c.get(k) for k in keys}


def build_trace(state: RetrievalState, calls: list[dict[str, Any]], note: str, tokens: int,
                candidates: int) -> dict[str, Any]:
    """What ran and why: path, gate reasons, iterations, sub-queries, scopes, LLM use."""
    from memstrata.llm import CallRecord, Meter

    events = state.get("events", [])
    gates = [e for e in events if e["node"] == "gate"]
    meter = Meter(calls=[CallRecord(**c) for c in calls])
    return {
        "path": "deep" if any(g["path"] == "deep" for g in gates) else "light",
        "gate": [{k: g[k] for k in ("iteration", "path", "reason", "how")} for g in gates],
        "iterations": state.get("iteration", 0),
        "sub_queries": [s["text"] for s in state.get("sub_queries", [])],
        "scopes": {s["id"]: s.get("scope") for s in state.get("sub_queries", [])},
        "answer": note, "context_tokens": tokens, "candidates": candidates,
        "llm": meter.summary(), "events": events,
    }
