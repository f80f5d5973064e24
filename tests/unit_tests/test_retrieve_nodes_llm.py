"""The retrieval nodes called one by one with the scripted model (``test_retrieve_nodes.py`` has them offline):
a real ``Context`` and ``Runtime``, no graph.

Each test gives a node the state it would get in the graph and checks the ``Command`` (or update) it returns:
the gate's light and deep routes, reflection's stop, finish and rewrite, the follow-up's missing-info query, each
node's fallback when the model's call fails, and the missing-info search on a small real store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, HashEmbeddings
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from memstrata import Memstrata
from memstrata.context import Context, nested
from memstrata.memory.query import Query
from memstrata.nodes.retrieve.follow_up import follow_up, search_missing
from memstrata.nodes.retrieve.gate import gate
from memstrata.nodes.retrieve.reflect import reflect
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.testing import ScriptedChatModel

QUESTION = "Where does Priya work?"


def runtime(tmp_path: Path, *script: Any, model: bool = True, **settings: Any) -> Runtime[Context]:
    """A runtime whose context reads a fresh store with hash embeddings and, with ``model``, the scripted model."""
    chat = ScriptedChatModel(script=list(script)) if model else None
    ctx = Context(
        user_id="u",
        data_dir=str(tmp_path / "chroma"),
        embeddings=HashEmbeddings(),
        model=chat,
        llm_depth=None,
        llm_retries=0,
        **nested(settings),
    )
    return Runtime(context=ctx)


def state(**extra: Any) -> dict[str, Any]:
    q0 = Query(id="q0", text=QUESTION)
    return {"query": QUESTION, "sub_queries": [q0], "active": [q0], **extra}


def failing(messages: Any) -> Exception:
    return RuntimeError("the model is down")


# ---- gate ---------------------------------------------------------------------------------------------------


async def test_gate_light_answer_goes_on_to_the_next_wave_with_the_answer_pooled(tmp_path: Path) -> None:
    rt = runtime(tmp_path, {"finished": 0, "answer": "Tidewater Labs"}, retrieval={"light_check": "structured"})
    cmd = await gate(state(), rt)  # type: ignore[arg-type]
    assert isinstance(cmd, Command) and cmd.goto == "next_wave"
    update = cmd.update
    assert update["round"] == 1 and update["events"][0]["path"] == "light"
    assert update["events"][0]["reason"] == "model self-check: finished=0"
    assert [p["answer"] for p in update["pool"]] == ["Tidewater Labs"] and update["pool"][0]["path"] == "light"
    assert len(rt.context.model.calls) == 1  # type: ignore[union-attr]


async def test_gate_deep_with_nothing_coarse_backtracks(tmp_path: Path) -> None:
    rt = runtime(tmp_path, {"finished": 2, "answer": ""}, retrieval={"light_check": "structured"})
    cmd = await gate(state(), rt)  # type: ignore[arg-type]
    assert cmd.goto == "backtrack_level2"
    assert cmd.update["events"][0]["path"] == "deep" and "pool" not in cmd.update


async def test_gate_deep_fans_the_coarse_pool_out_to_selection(tmp_path: Path) -> None:
    rt = runtime(
        tmp_path,
        {"finished": 2},
        retrieval={"light_check": "structured"},
        **{"retrieval.llm_batch_size": 2},
        max_fanout=3,
    )
    cmd = await gate(state(coarse=["a", "b", "c", "d", "e"]), rt)  # type: ignore[arg-type]
    sends = cmd.goto
    assert isinstance(sends, list) and all(isinstance(s, Send) and s.node == "select_level1" for s in sends)
    assert [s.arg["entries"] for s in sends] == [["a", "b"], ["c", "d"], ["e"]]
    assert all(s.arg["round"] == 1 and s.arg["query"].id == "q0" for s in sends)


async def test_gate_model_failure_falls_back_to_the_offline_confidence(tmp_path: Path) -> None:
    rt = runtime(tmp_path, failing, retrieval={"light_check": "structured"})
    cmd = await gate(state(), rt)  # type: ignore[arg-type]
    event = cmd.update["events"][0]
    # no summaries were found, so the offline confidence says deep; the reason is the rule's, not the model's
    assert cmd.goto == "backtrack_level2" and event["path"] == "deep"
    assert event["how"] == "error" and event["reason"].startswith("coverage ")
    assert "pool" not in cmd.update


async def test_gate_offline_without_summaries_goes_deep(tmp_path: Path) -> None:
    cmd = await gate(state(), runtime(tmp_path, model=False))  # type: ignore[arg-type]
    assert cmd.goto == "backtrack_level2" and cmd.update["events"][0]["path"] == "deep"
    assert cmd.update["llm_calls"] == []


async def test_streamed_gate_answer_ends_the_query(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "ANSWER Priya works at Tidewater Labs.", retrieval={"light_check": "streamed"})
    cmd = await gate(state(searched=["q0"]), rt)  # type: ignore[arg-type]  # no sub-query waits
    assert cmd.goto == "answer"
    event = cmd.update["events"][0]
    assert event["streamed"] is True and event["reason"] == "model self-check: ANSWER"
    assert cmd.update["pool"][0]["answer"] == "Priya works at Tidewater Labs."


async def test_streamed_gate_is_not_used_while_a_sub_query_waits(tmp_path: Path) -> None:
    rt = runtime(tmp_path, {"finished": 0, "answer": "Tidewater Labs"}, retrieval={"light_check": "streamed"})
    cmd = await gate(state(), rt)  # type: ignore[arg-type]  # q0 not searched yet: the structured check decides
    assert cmd.goto == "next_wave" and "streamed" not in cmd.update["events"][0]


async def test_streamed_gate_search_goes_deep(tmp_path: Path) -> None:
    rt = runtime(tmp_path, "SEARCH", retrieval={"light_check": "streamed"})
    cmd = await gate(state(searched=["q0"]), rt)  # type: ignore[arg-type]
    assert cmd.goto == "backtrack_level2"
    assert cmd.update["events"][0]["streamed"] is False and "pool" not in cmd.update


# ---- reflect ------------------------------------------------------------------------------------------------


async def test_reflect_stops_at_the_iteration_cap_without_a_call(tmp_path: Path) -> None:
    rt = runtime(tmp_path, {"finished": False, "new_question": "never asked"}, max_iterations=1)
    cmd = await reflect(state(iteration=1), rt)  # type: ignore[arg-type]
    assert cmd.goto == "answer" and cmd.update["iteration"] == 2
    assert cmd.update["events"][0]["decision"] == "stop" and cmd.update["events"][0]["how"] == "budget"
    assert rt.context.model.calls == []  # type: ignore[union-attr]


async def test_reflect_finished_goes_to_the_answer(tmp_path: Path) -> None:
    rt = runtime(tmp_path, {"finished": True, "new_question": ""}, max_iterations=3)
    cmd = await reflect(state(), rt)  # type: ignore[arg-type]
    assert cmd.goto == "answer"
    event = cmd.update["events"][0]
    assert event["decision"] == "finish" and event["reason"] == "the answer is complete"


async def test_reflect_rewrite_loops_back_with_the_models_question(tmp_path: Path) -> None:
    rt = runtime(tmp_path, {"finished": False, "new_question": "Which lab hired Priya?"}, max_iterations=3)
    cmd = await reflect(state(), rt)  # type: ignore[arg-type]
    assert cmd.goto == "lookup_level1"
    [query] = cmd.update["active"]
    assert (query.id, query.text, query.dense_text) == ("r1.0", "Which lab hired Priya?", None)
    assert query.weight == pytest.approx(rt.context.retrieval.rewrite_decay)
    assert cmd.update["events"][0]["new_queries"] == ["Which lab hired Priya?"]


async def test_reflect_model_failure_falls_back_to_the_coverage_rule(tmp_path: Path) -> None:
    rt = runtime(tmp_path, failing, max_iterations=3)
    cmd = await reflect(state(), rt)  # type: ignore[arg-type]
    # nothing was found, so the rule says the sub-question is uncovered and rewrites it, searching as its source
    assert cmd.goto == "lookup_level1"
    event = cmd.update["events"][0]
    assert event["decision"] == "rewrite" and event["how"] == "error"
    assert [q.dense_text for q in cmd.update["active"]] == [QUESTION]


# ---- follow_up ----------------------------------------------------------------------------------------------


def task(**extra: Any) -> dict[str, Any]:
    return {
        "question": QUESTION,
        "query": Query(id="q0", text=QUESTION),
        "evidence": [],
        "prerequisites": [],
        "pool": [],
        "main": True,
        "iteration": 0,
        "round": 1,
        "llm_calls": [],
        "llm_budget": None,
        "offline": False,
        **extra,
    }


async def test_follow_up_answer_joins_the_pool_and_nothing_is_missing(tmp_path: Path) -> None:
    rt = runtime(tmp_path, {"answer": "Tidewater Labs", "missing": False, "query": ""})
    update = await follow_up(task(), rt)  # type: ignore[arg-type]
    assert update["sub_answers"][0]["answer"] == "Tidewater Labs" and update["sub_answers"][0]["id"] == "q0"
    assert update["pool"][0]["path"] == "deep" and "missing" not in update
    assert update["events"][0]["query"] is None


async def test_follow_up_model_failure_falls_back_to_the_rule_with_no_answer(tmp_path: Path) -> None:
    rt = runtime(tmp_path, failing)
    update = await follow_up(task(), rt)  # type: ignore[arg-type]
    assert "sub_answers" not in update and "pool" not in update
    assert update["events"][0]["how"] == "error" and update["events"][0]["query"] == "priya work"
    # the rule's missing-info query (the question's slot words) searches densely as the sub-query it came from
    [item] = update["missing"]
    assert (item["query"].id, item["query"].scope, item["query"].dense_text) == ("q0.follow_up", "Short", QUESTION)


async def test_follow_up_offline_branch_makes_no_call(tmp_path: Path) -> None:
    rt = runtime(tmp_path, {"answer": "never", "missing": False})
    update = await follow_up(task(offline=True), rt)  # type: ignore[arg-type]
    assert rt.context.model.calls == [] and "sub_answers" not in update  # type: ignore[union-attr]
    assert update["events"][0]["how"] not in GOOD_OUTCOMES and update["events"][0]["calls"] == 0


# ---- search_missing: reads a real store ---------------------------------------------------------------------


async def test_search_missing_searches_only_this_rounds_queries_in_the_store(tmp_path: Path) -> None:
    Memstrata(path=str(tmp_path / "chroma"), embeddings=HashEmbeddings()).ingest(EXAMPLE, user_id="u")
    rt = runtime(tmp_path, model=False)
    now = Query(id="q0.follow_up", text="Brighton half marathon", scope="Short")
    old = Query(id="q1.follow_up", text="violin concerto Vienna", scope="Short")
    missing = [{"iteration": 0, "round": 1, "query": now}, {"iteration": 0, "round": 0, "query": old}]
    update = await search_missing(state(iteration=0, round=1, missing=missing), rt)  # type: ignore[arg-type]
    [event] = update["events"]
    assert event["queries"] == {"q0.follow_up": "Brighton half marathon"}  # the earlier round's query is not searched
    assert event["found"]["q0.follow_up"] == len(update["candidates"]) > 0
    assert {h.query_id for h in update["candidates"]} == {"q0.follow_up"}
    assert any("Brighton half marathon" in h.text for h in update["candidates"])
