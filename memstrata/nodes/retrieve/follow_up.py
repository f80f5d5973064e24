"""Retrieval: H-Mem's per-sub-query reasoning and missing-info query, one ``Send`` branch per active query,
then one search for the round's missing-info queries (:func:`search_missing`).

Each branch reads what its own query found. With a model, one call answers the
sub-query from its best turns (the sub-answer A_k; for the round's main query it
is HyMem's deep answer answer_i, which joins the memory pool) and says whether a
piece is still missing; the missing-info query must carry an anchor the evidence
found (H-Mem A.4), else it is repaired once and then replaced by the offline
rule. Offline, the missing-info query is the slot the evidence lacks, anchored
on the names of the best evidence (its dates are not used as a time hint: the
missing piece is usually said in other sessions than the ones already found).
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Send
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.plan.rules import anchored_follow_up, has_anchor
from memstrata.memory.query import Query
from memstrata.memory.search.deep import backtrack
from memstrata.memory.search.selection import coverage_texts
from memstrata.memory.tokens import TokenCounter
from memstrata.nodes.common import progress
from memstrata.nodes.retrieve.depth import affords, sequential
from memstrata.nodes.retrieve.prompting import pool_block, ranked_lines
from memstrata.runtime.llm import GOOD_OUTCOMES, branch_budget
from memstrata.runtime.node import open_node
from memstrata.state import RetrievalState, SubQueryTask


class SubAnswer(BaseModel):
    """A sub-query's answer from its evidence, and the one piece still missing, if any."""

    answer: str = Field(default="", description="the answer with cited turns, or empty")
    missing: bool = False
    query: str = Field(default="", description="one short search query for the missing piece, with an anchor")


def follow_up_sends(state: RetrievalState, ctx: Context) -> list[Send]:
    """One reasoning branch per active query, each with the evidence it found itself (else all of it) and an equal
    share of what the token budget has left (``llm_budget``), so together they cannot overspend it.
    """
    ranked = sorted(state.get("candidates", []), key=lambda h: (-h.score, h.key))
    answers = state.get("sub_answers", [])
    offline = not affords(ctx, state.get("events", []))  # no room for the call before the answer's: the rules
    active = list(state.get("active") or [])
    calls = state.get("llm_calls", [])
    ceiling = branch_budget(ctx.llm_token_budget, calls, len(active))
    sends = []
    for i, query in enumerate(active):
        own = [h for h in ranked if h.query_id == query.id] if query.id != "q0" else ranked
        prereq = [a for a in answers if a["id"] in query.depends_on]
        sends.append(
            Send(
                "follow_up",
                {
                    "question": state["query"],
                    "query": query,
                    "evidence": (own or ranked)[: ctx.retrieval.follow_up_evidence],
                    "prerequisites": prereq,
                    "pool": state.get("pool", []),
                    "main": i == 0,
                    "iteration": state.get("iteration", 0),
                    "round": state.get("round", 0),
                    "llm_calls": calls,
                    "llm_budget": ceiling,
                    "offline": offline,
                },
            )
        )
    return sends


def route_follow_up(state: RetrievalState, runtime: Runtime[Context]) -> list[Send] | Literal["answer"]:
    """After the deep module: reason over each active query's evidence in parallel (or answer, at the budget)."""
    if state.get("halted"):
        return "answer"
    return follow_up_sends(state, runtime.context) or "answer"


def _anchored(texts: list[str]) -> Any:
    def check(value: SubAnswer) -> SubAnswer:
        if value.missing and value.query.strip() and not has_anchor(value.query, texts):
            msg = (
                "the missing-info query must contain a name, place, object or date that the turns above "
                "already mention; ask for the missing piece around it"
            )
            raise ValueError(msg)
        return value

    return check


async def follow_up(task: SubQueryTask, runtime: Runtime[Context]) -> dict[str, Any]:
    """Answer one sub-query from its evidence and search once more for what it lacks."""
    ctx = runtime.context
    query, evidence = task["query"], task["evidence"]
    texts = coverage_texts(evidence, ctx.retrieval.follow_up_texts)
    rule = anchored_follow_up(
        query.text, texts, evidence[: ctx.retrieval.anchor_hits], names=ctx.retrieval.anchor_names
    )
    run = await open_node(runtime, "follow_up", task)
    step = run.step.sibling(offline=True) if task.get("offline") else run.step
    # the model's prompt; offline the rule decides and no line is rendered
    lines = (
        ranked_lines(evidence, budget=ctx.retrieval.reason_tokens, counter=TokenCounter())
        if step.model is not None
        else []
    )
    info, how = await step.decide(
        SubAnswer,
        "FOLLOW_UP_PROMPT",
        _prompt(task, lines),
        node="follow_up",
        validate=_anchored(lines),
        fallback=lambda: SubAnswer(missing=rule is not None, query=rule or ""),
    )
    event: dict[str, Any] = {
        "node": "follow_up",
        "iteration": task["iteration"],
        "round": task["round"],
        "sub_query": query.id,
        "how": how,
        "calls": sequential(step.meter.own),
        "query": info.query if info.missing else None,
    }
    update: dict[str, Any] = {
        "events": [event],
        "llm_calls": step.records,
        "opens": run.opens,
        **_answers(task, info, how),
    }
    if not info.missing or not info.query.strip() or step.halted:
        return update
    progress("follow_up", f"follow-up: {info.query}")
    modelled = how in GOOD_OUTCOMES
    # No time hint from the evidence's dates: what is missing is usually said elsewhere, and a hint would
    # pull the search back into the sessions already found. The anchors are the evidence's names.
    missing = Query(
        id=f"{query.id}.follow_up",
        text=info.query.strip(),
        scope="Short",
        weight=ctx.retrieval.follow_up_weight,
        dense_text=None if modelled else query.embed_text,
    )
    return {**update, "missing": [{"iteration": task["iteration"], "round": task["round"], "query": missing}]}


async def search_missing(state: RetrievalState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Search this round's missing-info queries (one per branch that asked), each on its own, in one open."""
    ctx = runtime.context
    here = (state.get("iteration", 0), state.get("round", 0))
    queries = [m["query"] for m in state.get("missing", []) if (m["iteration"], m["round"]) == here]
    run = await open_node(runtime, "search_missing", state, search_index=bool(queries), queries=queries)
    found: list[Any] = []
    counts: dict[str, int] = {}
    for i, query in enumerate(queries):
        index, vectors, weights = run.index, run.vectors, run.weights
        assert index is not None and vectors is not None and weights is not None  # set, as queries is not empty
        hits = backtrack(
            index,
            [query],
            vectors[i : i + 1],
            [],
            raw_top=ctx.retrieval.follow_up_turns,
            weights=weights,
            now=run.now,
            scope_kinds=run.scope_kinds,
        )
        counts[query.id] = len(hits)
        found += hits
    return {
        "candidates": found,
        "opens": run.opens,
        "events": [
            {
                "node": "search_missing",
                "iteration": here[0],
                "round": here[1],
                "queries": {q.id: q.text for q in queries},
                "found": counts,
            }
        ],
    }


def _prompt(task: SubQueryTask, lines: list[str]) -> str:
    query = task["query"]
    parts = [f"<question>{task['question']}</question>", f"<sub_question>{query.text}</sub_question>"]
    if task["prerequisites"]:
        found = "\n".join(f"- {a['question']}: {a['answer']}" for a in task["prerequisites"])
        parts.append(f"<prerequisite_answers>\n{found}\n</prerequisite_answers>")
    memory = "\n".join(lines)
    return "\n".join(parts) + f"\n<memory>\n{memory}\n</memory>" + pool_block(task["pool"])


def _answers(task: SubQueryTask, info: SubAnswer, how: str) -> dict[str, Any]:
    """The sub-answer A_k, and for the round's main query HyMem's deep answer answer_i in the pool M."""
    if how not in GOOD_OUTCOMES or not info.answer.strip():
        return {}
    query = task["query"]
    out: dict[str, Any] = {
        "sub_answers": [
            {
                "id": query.id,
                "question": query.text,
                "answer": info.answer.strip(),
                "iteration": task["iteration"],
                "round": task["round"],
            }
        ]
    }
    if task["main"]:
        out["pool"] = [
            {
                "iteration": task["iteration"],
                "round": task["round"],
                "path": "deep",
                "query": query.text,
                "answer": info.answer.strip(),
            }
        ]
    return out
