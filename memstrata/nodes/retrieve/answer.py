"""Retrieval: pack the evidence into the context budget and, with a model, give the answer.

The context is always cited raw turns (what users cite and EVAL.md scores).
With a model the answer is:

* the light answer, when every round stayed on the light path (HyMem: the
  summaries sufficed, so no call reads the raw context): streamed by the gate's
  checked call, or, when it came from a structured decision, relayed to the
  stream word by word here, so every path streams;
* otherwise a streamed synthesis over the raw context, the memory pool M of
  intermediate answers and the sub-answers (HyMem's G_gamma and H-Mem's Psi);
* when ``llm_token_budget`` stopped the query, or cannot afford the synthesis,
  the latest intermediate answer, if any, and the trace says so.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.levels.level2.passage import is_long
from memstrata.memory.query import Hit, Query
from memstrata.memory.search.excerpts import Excerpts
from memstrata.memory.search.light import pending_rows
from memstrata.memory.search.packing import pack_context
from memstrata.memory.search.persona import persona_block
from memstrata.memory.search.scenes import SCENES_LABEL, scene_lines
from memstrata.memory.search.selection import found_first, mark_captions, mmr, statements_first, window_first
from memstrata.memory.search.themes import THEME_FINDERS
from memstrata.memory.tokens import TokenCounter
from memstrata.nodes.common import progress
from memstrata.nodes.retrieve.depth import depth
from memstrata.nodes.retrieve.prompting import pool_block
from memstrata.runtime import llm
from memstrata.runtime.llm import CallRecord, Meter
from memstrata.runtime.node import NodeRun, open_node
from memstrata.runtime.step import Step
from memstrata.state import RetrievalState, merge_dicts


async def answer(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Final context and evidence; the answer is ``None`` offline."""
    ctx = runtime.context
    run = await open_node(runtime, "answer", state, search_index=True)
    index, step = run.index, run.step
    assert index is not None  # search_index=True opens it
    candidates, asked = _candidates(state, ctx)
    ranked = mmr(
        candidates,
        index,
        penalty=ctx.retrieval.diversity,
        head=ctx.retrieval.mmr_head,
        picks=ctx.context_budget // ctx.retrieval.mmr_tokens_per_pick,
    )
    backbone = int(ctx.themes.share * ctx.context_budget / ctx.retrieval.mmr_tokens_per_pick)
    ranked = found_first(ranked, THEME_FINDERS, backbone)  # the theme path's admitted turns first
    ranked = window_first(ranked, ctx.retrieval.window_turns)
    ranked = mark_captions(ranked, [state["query"], *(q.text for q in state.get("sub_queries", []))])
    counter = TokenCounter()
    block, why, reserved = _persona(state, index, ctx, counter)  # reserved: the block's tokens and its newline
    scenes, scene_tokens = _scenes(state, index, ctx, counter)
    quotes = await _excerpts(state, ctx, run, ranked, counter)
    context, chosen, tokens = pack_context(
        ranked,
        budget=ctx.context_budget - reserved - scene_tokens,
        counter=counter,
        shorten=quotes.quote if quotes else None,
    )
    if head := "\n".join(b for b in (block, scenes) if b):
        context = f"{head}\n{context}" if context else head
        tokens = counter.count(context)
    await run.release()  # the candidates are chosen: a bounded run's working set can go
    # HMO's use (Eq. 5's recall count n) is counted on every query once tiers are on, not only on tiered ones, so a
    # user's records carry their history when the user grows past snapshot_max_turns and tiers start to apply
    use = await run.record_use(chosen)
    text, note, error = None, "offline: no model configured", None
    if step.model is not None and ctx.generate_answer:
        text, note, error = await _answer_text(state, context, step)
        if text and note != "streamed" and not _streamed_by_gate(state):
            await llm.relay_text(text, node="answer")  # an answer written earlier reaches the stream too
    calls = [*state.get("llm_calls", []), *step.records]
    trace = build_trace(state, calls, note, tokens, len(ranked), chosen)
    trace["runtime_opens"] = merge_dicts(state.get("opens"), run.opens)
    trace["tiers"] = tier_trace(state, use)
    if use is not None and trace["tiers"] is None:
        trace["tier_use"] = use  # counted below the tiers' threshold
    trace["persona"] = {**state["persona"], "included": bool(block), "why": why} if state.get("persona") else None
    if ctx.experimental.scene_lines > 0:
        trace["scenes"] = {"found": len(state.get("scenes", [])), "lines": scenes.count("\n"), "tokens": scene_tokens}
    trace["budget"] = {
        "llm_token_budget": ctx.llm_token_budget,
        "spent": step.shared.spent,
        "halted_at": state.get("halted") or step.halted,
    }
    tails = open_tail_turns(index)
    evidence = [{**c.evidence(), "open_episode": (c.conversation_id, c.unit_id) in tails} for c in chosen]
    trace["open_episode_turns"] = [e["turn_id"] for e in evidence if e["open_episode"]]
    trace["asked_again"] = asked
    trace["sequential_calls"] = depth(state.get("events", [])) + (note == "streamed")  # up to the first token
    return {
        "answer": text,
        "answer_error": error,
        "context": context,
        "context_tokens": tokens,
        "trace": trace,
        "evidence": evidence,
        "llm_calls": step.records,
        "opens": run.opens,
    }


def _candidates(state: RetrievalState, ctx: Context) -> tuple[list[Hit], dict[str, int]]:
    """The candidates the context is packed from: without the turns the app's thread already shows
    (``exclude_turns``), and with the turns that only ask the question again down-weighted or folded.
    """
    left_out = set(ctx.exclude_turns)
    hits = [h for h in state.get("candidates", []) if h.unit_id not in left_out]
    kept, demoted, folded = statements_first(hits, state["query"])
    return kept, {"excluded": len(state.get("candidates", [])) - len(hits), "demoted": demoted, "folded": folded}


async def _excerpts(
    state: RetrievalState, ctx: Context, run: NodeRun, ranked: list[Hit], counter: TokenCounter
) -> Excerpts | None:
    """What quotes a long turn by its matching passage when the whole turn does not fit; ``None`` (and no query
    vector read) when no candidate is longer than the encoder reads.
    """
    if not any(is_long(h.speaker, h.text) for h in ranked):
        return None
    queries = [Query(id="q0", text=state["query"]), *state.get("sub_queries", [])]
    vectors = await run.query_vectors(queries)
    return Excerpts(run.index, vectors, " ".join(q.text for q in queries), counter)


def _streamed_by_gate(state: RetrievalState) -> bool:
    """Whether the gate's checked call already streamed this query's answer."""
    return any(e["node"] == "gate" and e.get("streamed") for e in state.get("events", []))


def _persona(state: RetrievalState, index: Any, ctx: Context, counter: TokenCounter) -> tuple[str, str, int]:
    """The persona block the context opens with, why it is there (or not), and the tokens it takes with its
    newline.
    """
    match = state.get("persona")
    if not match:
        return "", "", 0
    block = persona_block(index, match["persona"], match["conversation_id"])
    if not block:
        return "", "left out: the search snapshot no longer holds that version", 0
    cost = counter.count(block) + 1
    if cost > ctx.persona.share * ctx.context_budget:
        why = f"left out: the dimension would take more than persona_share ({ctx.persona.share:g}) of the budget"
        return "", why, 0
    return block, match["why"], cost


def _scenes(state: RetrievalState, index: Any, ctx: Context, counter: TokenCounter) -> tuple[str, int]:
    """The scene lines the context opens with after the persona (Bi-Mem's Eq. 11), and the tokens they take with
    their newlines: the theme path's picked themes, best first, while they fit ``persona.scene_share`` of the budget.
    """
    if ctx.experimental.scene_lines <= 0 or not state.get("scenes"):
        return "", 0
    header = f"[{SCENES_LABEL}]"
    kept, cost = [], counter.count(header) + 1
    for scene in scene_lines(index, state["scenes"][: ctx.experimental.scene_lines]):
        line = scene.fitted(int(ctx.persona.scene_share * ctx.context_budget) - cost - 1, counter.count)
        if line is None:
            break
        kept.append(line)
        cost += counter.count(line) + 1
    return ("\n".join([header, *kept]), cost) if kept else ("", 0)


def open_tail_turns(index: Any) -> set[tuple[str, str]]:
    """(conversation, turn) of every turn in an open tail: the turns its open summary stands for, and those
    appended after it that wait raw (:func:`~memstrata.memory.search.light.pending_rows`).
    """
    held = index.memo.get("open_tail_turns")
    if held is None:
        summaries = index.events.get("summary")
        held = (
            set()
            if summaries is None
            else {(u.conversation_id, t) for u in summaries.units if getattr(u, "open", False) for t in u.turn_ids}
        )
        held |= {(index.turns[r].conversation_id, index.turns[r].id) for r in pending_rows(index)}
        index.remember("open_tail_turns", held)  # dropped with the memo whenever the snapshot changes
    return held


async def _answer_text(state: RetrievalState, context: str, step: Step) -> tuple[str | None, str, str | None]:
    """The answer, what the trace says of it, and why the model's answer failed (``None``: it did not)."""
    pool = [p for p in state.get("pool", []) if p.get("answer")]
    latest = pool[-1]["answer"] if pool else None
    halted = state.get("halted") or step.halted
    if halted:
        return (
            latest,
            (
                f"llm_token_budget reached at {halted}: stopped deepening and answered with "
                f"{'the latest intermediate answer' if latest else 'nothing (no answer was found yet)'}"
            ),
            None,
        )
    if pool and all(p["path"] == "light" for p in pool) and not state.get("sub_answers"):
        progress("answer", "answered from the summaries", answer=latest)
        return latest, "light answer: the summaries sufficed, no call read the raw context", None
    ctx = step.ctx
    extra = pool_block(pool) + _sub_answers(state)
    messages = [
        SystemMessage(ctx.prompt("ANSWER_PROMPT")),
        HumanMessage(f"<memory>\n{context}\n</memory>{extra}\n<question>{state['query']}</question>"),
    ]
    if not step.meter.affords(TokenCounter().count("\n".join(str(m.content) for m in messages))):
        spent = "answered with the latest intermediate answer" if latest else "no answer"
        return latest, f"llm_token_budget exhausted before the answer; {spent}", None
    progress("answer", "writing the answer")
    assert step.model is not None  # the answer is written only with a model (the caller checks)
    try:
        text = await llm.stream_answer(
            step.model,
            messages,
            node="answer",
            meter=step.meter,
            timeout=ctx.llm_timeout_s,
            retries=ctx.llm_retries,
            max_tokens=ctx.llm_max_tokens,
        )
    except llm.LLMError as exc:
        return latest, f"answer failed: {exc}", str(exc)
    return text, "streamed", None


def _sub_answers(state: RetrievalState) -> str:
    lines = [f"- {a['question']}: {a['answer']}" for a in state.get("sub_answers", [])]
    return "\n<sub_answers>\n" + "\n".join(lines) + "\n</sub_answers>" if lines else ""


def tier_trace(state: RetrievalState, use: dict[str, Any] | None) -> dict[str, Any] | None:
    """Which HMO tier answered and why, what each tier searched cost, and what the use moved (``None``: no tiers)."""
    if not state.get("tier"):
        return None
    events = state.get("events", [])
    lookups = [e for e in events if e["node"] == "lookup_level1" and e.get("tier")]
    gates = {e["round"]: e for e in events if e["node"] == "gate" and e.get("tier")}
    steps = [
        {
            "tier": e["tier"],
            "seconds": e["seconds"],
            "turns_searched": e["turns_searched"],
            "candidates": e["turns"],
            "deeper": gates.get(i + 1, {}).get("path") == "next tier",
            "why": gates.get(i + 1, {}).get("reason", ""),
        }
        for i, e in enumerate(lookups)
    ]
    return {"answered": state["tier"], "steps": steps, "use": use}


def build_trace(
    state: RetrievalState, calls: list[dict[str, Any]], note: str, tokens: int, candidates: int, chosen: list[Any]
) -> dict[str, Any]:
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
        "windows": next((e["windows"] for e in events if e["node"] == "predict_scope" and "windows" in e), {}),
        "depends_on": {q.id: q.depends_on for q in state.get("sub_queries", []) if q.depends_on},
        "found_by": dict(Counter(h.found_by for h in chosen)),
        "pool": state.get("pool", []),
        "sub_answers": state.get("sub_answers", []),
        "answer": note,
        "context_tokens": tokens,
        "candidates": candidates,
        "llm": meter.summary(),
        "events": events,
    }
