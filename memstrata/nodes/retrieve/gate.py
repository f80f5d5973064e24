"""Retrieval: HyMem's light module self-check (Algorithm 1, line 7). Do the summaries answer, or go deep?

With a model, the light generator reads the question q0, the top-k Level-1
summaries (not the facts or tree nodes found beside them) and the memory pool M_i of earlier answers, and either answers
or asks for the deep module (the model's selection over the top-N fans out with ``Send``). When the answer is wanted
and no dependent sub-query waits, the check and the light answer are one streamed call (:func:`checked_gate`): its
reply opens with ``ANSWER`` and streams the answer to the user, which ends the query, or opens with ``SEARCH``. Else
(``retrieve``, or a wave still to come) it is a structured decision (``finished=0`` with an answer, which joins the
pool for reflection to grade, or ``finished=2``). Offline, retrieval confidence
and query-term coverage decide, and the light path goes through the missing-info
follow-up as before. A call the token budget cannot afford stops deepening: the
query goes straight to its answer with what it has.

For a large user the query starts in HMO's cache (:mod:`memstrata.memory.index.active`). There the same decision is
HMO's self-reflective trigger (§3.2): "go deeper" searches the next tier (the buffer, then the archive) instead of
the deep module, which runs only in the archive; offline the confidence is the same, less its Short-scope clause.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.runtime import Runtime
from langgraph.types import Command, Send
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.levels.level1.summary import SUMMARY
from memstrata.memory.plan.rules import coverage
from memstrata.memory.query import Hit
from memstrata.memory.search.selection import coverage_texts
from memstrata.memory.tiers.assign import TIER_NAMES
from memstrata.nodes.common import progress
from memstrata.nodes.retrieve.depth import affords, deciding, sequential
from memstrata.nodes.retrieve.follow_up import follow_up_sends
from memstrata.nodes.retrieve.prompting import pool_block
from memstrata.nodes.retrieve.waves import waiting
from memstrata.runtime import llm
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.node import NodeRun, open_node
from memstrata.runtime.step import Step
from memstrata.state import RetrievalState

VERDICTS = ("ANSWER", "SEARCH")  # the first word of the streamed self-check: answered, or go deeper


class LightAnswer(BaseModel):
    """HyMem's light generator: finished 0 with an answer, or 2 when the summaries are not enough."""

    finished: Literal[0, 2] = Field(description="0 = answered from the summaries, 2 = needs a deeper search")
    answer: str = ""


def light_summaries(state: RetrievalState) -> list[Hit]:
    """What the model's self-check reads: the round's top-k Level-1 summaries only (HyMem §3.2).

    Facts and tree nodes found beside them bring their turns to the candidates, and
    the deep module's selection reads them; the light generator does not.
    """
    return [h for h in state.get("level1", []) if h.kind == SUMMARY.kind]


def offline_confidence(state: RetrievalState, ctx: Context, *, tiered: bool = False) -> tuple[bool, str]:
    """Light context suffices when the best summary is close and the question's words are all covered.

    ``tiered``: the question is whether an HMO tier (the cache, the buffer) holds the answer, not whether the
    summaries alone do, so a Short-scope query (one that needs raw turns) may stay: a tier holds its turns too. It
    must also hold every one of the archive's nearest summaries to the queries (``state["tier_probe"]``, read by
    the lookup): a tier that lacks one of them holds only part of what the archive would rank first.
    """
    light = [c for c in state.get("candidates", []) if c.level == "level1"]
    cov = coverage(state["query"], coverage_texts(light, ctx.retrieval.gate_texts))
    top = max((c.parts.get("own", 0.0) for c in light), default=0.0)
    short = any(q.scope == "Short" for q in state.get("active", []))
    ok = (
        bool(state.get("level1"))
        and cov >= ctx.retrieval.gate_coverage
        and top >= ctx.retrieval.gate_threshold
        and (tiered or not short)
    )
    why = f"coverage {cov:.2f}, best turn {top:.2f}, short-scope {short}"
    if tiered and (probe := state.get("tier_probe")) and probe[1]:
        ok = ok and probe[0] == probe[1]
        why += f", archive's nearest summaries held {probe[0]}/{probe[1]}"
    return ok, why


async def gate(
    state: RetrievalState, runtime: Runtime[Context]
) -> Command[Literal["select_level1", "backtrack_level2", "follow_up", "next_wave", "answer", "lookup_level1"]]:
    """Accept the light path, go deep (the model's selection fans out with ``Send``), or, in an HMO tier above the
    archive, search the next tier: the same self-check (offline: the same confidence) is HMO's trigger.

    When the answer is wanted and nothing waits for this round, the self-check and the light answer are one
    streamed call (:func:`checked_gate`).
    """
    ctx = runtime.context
    tier = state.get("tier", 0)
    ok, why = offline_confidence(state, ctx, tiered=0 < tier < 3)
    run = await open_node(runtime, "gate", state)
    step = deciding(run.step, state)
    streamed = ctx.retrieval.light_check == "streamed" and ctx.generate_answer
    if step.model is not None and streamed and not 0 < tier < 3 and not waiting(state):
        return await checked_gate(state, run, step, ok, why)
    memory = "\n".join(f"[{h.time}] {h.text}" for h in light_summaries(state))
    verdict, how = await step.decide(
        LightAnswer,
        "LIGHT_ANSWER_PROMPT",
        f"<question>{state['query']}</question>\n<memory>\n{memory}\n</memory>{pool_block(state.get('pool', []))}",
        node="gate",
        fallback=lambda: LightAnswer(finished=0 if ok else 2),
    )
    light = verdict.finished == 0
    modelled = how in GOOD_OUTCOMES
    round_no = state.get("round", 0) + 1
    deeper = 0 < tier < 3 and not light and not step.halted
    event = {
        "node": "gate",
        "iteration": state.get("iteration", 0),
        "round": round_no,
        "tier": tier,
        "path": "next tier" if deeper else "light" if light else "deep",
        "how": how,
        "calls": sequential(step.meter.own),
        "reason": f"model self-check: finished={verdict.finished}" if modelled else why,
    }
    update: dict[str, Any] = {"events": [event], "llm_calls": step.records, "round": round_no, "opens": run.opens}
    if deeper:
        progress("gate", f"{TIER_NAMES[tier]} cannot answer ({event['reason']}): searching {TIER_NAMES[tier + 1]}")
        return Command(update={**update, "tier": tier + 1, "tier_fresh": True}, goto="lookup_level1")
    if light and modelled and verdict.answer.strip():
        update["pool"] = [_pooled(state, round_no, verdict.answer)]
    if step.halted:
        progress("gate", "token budget reached: answering with what was found")
        return Command(update={**update, "halted": step.halted}, goto="answer")
    if light:
        progress("gate", "the summaries suffice")
        if step.model is not None:
            return Command(update=update, goto="next_wave")  # Algorithm 1: a light answer goes on to R
        return Command(update=update, goto=follow_up_sends(_after(state, update), ctx))
    progress("gate", f"going deeper ({event['reason']})")
    return Command(update=update, goto=_deepen(_after(state, update), ctx, step, round_no) or "backtrack_level2")


async def checked_gate(
    state: RetrievalState, run: NodeRun, step: Step, ok: bool, why: str
) -> Command[Literal["select_level1", "backtrack_level2", "follow_up", "next_wave", "answer", "lookup_level1"]]:
    """HyMem's light self-check and light answer in one streamed call.

    The reply opens with ``ANSWER`` or ``SEARCH``; after ``ANSWER`` the rest streams to the user as the answer
    (:func:`memstrata.runtime.llm.stream_checked`), and the query ends with it: the answer was already read, so
    no reflection follows it. ``SEARCH`` goes deep. A reply with neither word (or a failed call) falls back to the
    offline confidence: enough light evidence goes to the answer, which then reads the raw turns; else deep.
    So it goes to ``select_level1``, ``backtrack_level2`` or ``answer``, typed as the :func:`gate` it returns for.
    """
    ctx = run.ctx
    memory = "\n".join(f"[{h.time}] {h.text}" for h in light_summaries(state))
    progress("gate", "checking the summaries")
    messages = [
        SystemMessage(ctx.prompt("LIGHT_CHECK_PROMPT")),
        HumanMessage(
            f"<question>{state['query']}</question>\n<memory>\n{memory}\n</memory>{pool_block(state.get('pool', []))}"
        ),
    ]
    assert step.model is not None  # called only with a model (the gate checks)
    try:
        checked = await llm.stream_checked(
            step.model,
            messages,
            words=VERDICTS,
            answer_word=VERDICTS[0],
            node="gate",
            meter=step.meter,
            timeout=ctx.llm_timeout_s,
            retries=ctx.llm_retries,
            max_tokens=ctx.llm_max_tokens,
        )
    except llm.LLMError as exc:  # the answer broke off after it began: what streamed stays the user's
        checked = llm.Checked(None, "", f"error: {exc}"[:300])
    answered = checked.verdict == VERDICTS[0] and bool(checked.answer)
    light = answered or (checked.verdict is None and ok)
    round_no = state.get("round", 0) + 1
    event = {
        "node": "gate",
        "iteration": state.get("iteration", 0),
        "round": round_no,
        "tier": state.get("tier", 0),
        "path": "light" if light else "deep",
        "how": checked.outcome,
        "calls": sequential(step.meter.own),
        "streamed": answered,
        "reason": f"model self-check: {checked.verdict}" if checked.verdict else why,
    }
    update: dict[str, Any] = {"events": [event], "llm_calls": step.records, "round": round_no, "opens": run.opens}
    if answered:
        update["pool"] = [_pooled(state, round_no, checked.answer)]
    if step.halted or light:
        progress("gate", "answered from the summaries" if answered else "answering from what was found")
        return Command(update={**update, **({"halted": step.halted} if step.halted else {})}, goto="answer")
    progress("gate", f"going deeper ({event['reason']})")
    return Command(update=update, goto=_deepen(_after(state, update), ctx, step, round_no) or "backtrack_level2")


def _after(state: RetrievalState, update: dict[str, Any]) -> RetrievalState:
    """The state as the next nodes will see it (this node's events and calls after the earlier ones)."""
    return {
        **state,
        **update,  # type: ignore[typeddict-item]  # a node's update is a plain dict of state keys
        "events": [*state.get("events", []), *update["events"]],
        "llm_calls": [*state.get("llm_calls", []), *update["llm_calls"]],
    }


def _pooled(state: RetrievalState, round_no: int, answer: str) -> dict[str, Any]:
    """A light answer as HyMem's memory pool M_i holds it."""
    query = state.get("active", [None])[0]
    return {
        "iteration": state.get("iteration", 0),
        "round": round_no,
        "path": "light",
        "query": query.text if query else state["query"],
        "answer": answer.strip(),
    }


def _deepen(state: RetrievalState, ctx: Context, step: Step, round_no: int) -> list[Send]:
    """One selection branch per batch of the coarse top-N (HyMem's Eq. 1: batches of d =
    ``retrieval.llm_batch_size``), reading this round's query q_i (none offline).

    The model reads HyMem's N best entries over every event kind (the coarse pool holds each kind's N). Each branch
    gets an equal share of what the token budget has left (``llm_budget``), so together they cannot overspend it.
    """
    if step.model is None or not affords(ctx, state.get("events", [])):
        return []  # offline, or no room left for the selection's call: the coarse top-N is backtracked as it is
    coarse = state.get("coarse", [])[: ctx.coarse_n]
    size = ctx.retrieval.llm_batch_size
    batches = [coarse[i : i + size] for i in range(0, len(coarse), size)][: ctx.max_fanout]
    query = (state.get("active") or state["sub_queries"])[0]
    calls = state.get("llm_calls", [])
    ceiling = llm.branch_budget(ctx.llm_token_budget, calls, len(batches))
    return [
        Send(
            "select_level1",
            {"query": query, "entries": b, "round": round_no, "llm_calls": calls, "llm_budget": ceiling},
        )
        for b in batches
    ]
