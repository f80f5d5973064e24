"""The retrieval nodes one at a time: each called as LangGraph calls it, with a ``Runtime`` holding a real
``Context``, the scripted model and a real (empty) store, and no graph compiled. Each test asserts the update or the
``Command`` a node returns: where it routes, what it writes to the state, and what it does when the model fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import HashEmbeddings
from langgraph.runtime import Runtime
from langgraph.types import Command, Send

from memstrata.context import Context
from memstrata.memory.query import Hit, Query
from memstrata.nodes.retrieve.backtrack import chosen_episodes
from memstrata.nodes.retrieve.gate import gate
from memstrata.nodes.retrieve.reflect import reflect
from memstrata.nodes.retrieve.select import select_level1
from memstrata.testing import ScriptedChatModel


def _runtime(tmp_path: Path, model: Any = None, **settings: Any) -> Runtime[Context]:
    ctx = Context(user_id="u", data_dir=str(tmp_path / "store"), embeddings=HashEmbeddings(), model=model, **settings)
    return Runtime(context=ctx)


def _entries(n: int) -> list[Hit]:
    return [
        Hit(kind="summary", unit_id=f"sum:ep:s1:{i}", conversation_id="c", score=1.0 - i / 10, text=f"event {i}")
        for i in range(n)
    ]


def _batch(entries: list[Hit], round_no: int = 1) -> dict[str, Any]:
    query = Query(id="q0", text="Where does Priya work?")
    return {"query": query, "entries": entries, "round": round_no, "llm_calls": [], "llm_budget": None}


# ---- the deep module's selection (HyMem's f_gamma) -------------------------------------------------------------
async def test_selection_keeps_the_models_picks_in_its_order_and_records_the_round(tmp_path: Path) -> None:
    entries = _entries(5)
    model = ScriptedChatModel(script=[{"ids": [3, 1, 3]}])
    update = await select_level1(_batch(entries, round_no=2), _runtime(tmp_path, model))  # type: ignore[arg-type]
    assert update["selected"] == [[2, entries[3].key], [2, entries[1].key]]  # repeats dropped, the model's order
    assert update["selection_rounds"] == [2]
    assert update["events"][0]["how"] == "ok" and update["events"][0]["chosen"] == 2
    assert len(model.calls) == 1 and "event 4" in str(model.calls[0][-1].content)  # the batch was listed


async def test_selection_out_of_range_is_repaired_once_then_falls_back_to_the_first_entries(tmp_path: Path) -> None:
    entries = _entries(6)
    model = ScriptedChatModel(script=[{"ids": [40]}, {"ids": [-1]}])
    runtime = _runtime(tmp_path, model, retrieval={"select_fallback": 2})
    update = await select_level1(_batch(entries), runtime)  # type: ignore[arg-type]
    assert update["selected"] == [[1, entries[0].key], [1, entries[1].key]]
    assert update["events"][0]["how"] == "fallback" and len(model.calls) == 2  # the repair, then the fallback


def test_backtracking_reads_the_selection_of_its_own_round_from_the_state() -> None:
    coarse = _entries(4)
    ctx = Context(user_id="u", retrieval={"select_fallback": 1})
    state: dict[str, Any] = {"coarse": coarse, "round": 2, "selected": [[1, coarse[0].key], [2, coarse[2].key]]}
    assert chosen_episodes(state, ctx)[:2] == (coarse, "coarse-top-n")  # round 2 had no selection branch
    state["selection_rounds"] = [1, 2]
    chosen, how, _ = chosen_episodes(state, ctx)
    assert (chosen, how) == ([coarse[2]], "llm-selection")
    state["selected"] = [[1, coarse[0].key]]  # round 2's branch chose nothing
    chosen, how, _ = chosen_episodes(state, ctx)
    assert chosen == coarse[:1] and how.startswith("selection-empty")


# ---- reflection (HyMem's R) ---------------------------------------------------------------------------------------
def _reflecting(candidate: str, iteration: int = 0) -> dict[str, Any]:
    turn = Hit(kind="turn", unit_id="s1:t0", conversation_id="c", score=1.0, text=candidate, turn_ids=["s1:t0"])
    query = Query(id="q0", text="Where does Priya work?")
    return {"query": query.text, "sub_queries": [query], "candidates": [turn], "iteration": iteration}


async def test_reflection_stops_at_the_iteration_cap_without_opening_anything(tmp_path: Path) -> None:
    command = await reflect(_reflecting("Nothing here."), _runtime(tmp_path, max_iterations=0))  # type: ignore[arg-type]
    assert isinstance(command, Command) and command.goto == "answer"
    assert command.update["events"][0]["decision"] == "stop" and "opens" not in command.update
    assert not (tmp_path / "store").exists()  # decided before the store was opened


async def test_offline_reflection_finishes_when_the_evidence_covers_the_question(tmp_path: Path) -> None:
    covered = _reflecting("Priya works at a bakery; that is where Priya does work.")
    command = await reflect(covered, _runtime(tmp_path, max_iterations=1))  # type: ignore[arg-type]
    assert command.goto == "answer" and command.update["events"][0]["decision"] == "finish"


async def test_offline_reflection_rewrites_an_uncovered_question_and_loops(tmp_path: Path) -> None:
    command = await reflect(_reflecting("We talked about the weather."), _runtime(tmp_path, max_iterations=1))  # type: ignore[arg-type]
    assert command.goto == "lookup_level1"
    active = command.update["active"]
    assert active and active[0].id == "r1.0" and active[0].dense_text == "Where does Priya work?"  # a rule rewrite
    assert active[0].weight == pytest.approx(Context(user_id="u").retrieval.rewrite_decay)


async def test_the_models_reflection_writes_the_new_question_and_garbage_falls_back_to_the_rule(tmp_path: Path) -> None:
    asked = ScriptedChatModel(script=[{"finished": False, "new_question": "Which company employs Priya?"}])
    state = _reflecting("Priya works at a bakery; that is where Priya does work.")
    command = await reflect(state, _runtime(tmp_path, asked, max_iterations=1, llm_depth=None))  # type: ignore[arg-type]
    assert command.goto == "lookup_level1"
    assert [q.text for q in command.update["active"]] == ["Which company employs Priya?"]
    assert command.update["active"][0].dense_text is None  # the model's question is embedded itself
    garbage = ScriptedChatModel(script=["not json", "still not json", "nope"])
    command = await reflect(state, _runtime(tmp_path, garbage, max_iterations=1, llm_depth=None))  # type: ignore[arg-type]
    assert command.goto == "answer"  # the rule's verdict: the evidence covers the question
    assert command.update["events"][0]["how"] == "fallback"


# ---- the gate (HyMem's light module and its self-check) --------------------------------------------------------
def _gated(text: str, own: float, coarse: int = 0) -> dict[str, Any]:
    query = Query(id="q0", text="Where does Priya work?")
    summary = Hit(kind="summary", unit_id="sum:ep:s1:0", conversation_id="c", score=own, text=text, level="level1")
    light = Hit(
        kind="turn", unit_id="s1:t0", conversation_id="c", score=own, text=text, level="level1", parts={"own": own}
    )
    return {
        "query": query.text,
        "sub_queries": [query],
        "active": [query],
        "searched": ["q0"],
        "level1": [summary],
        "candidates": [light],
        "coarse": _entries(coarse),
    }


async def test_offline_the_gate_takes_the_light_path_when_the_summaries_cover_the_question(tmp_path: Path) -> None:
    state = _gated("Priya works at a bakery in Porto: where Priya does work.", own=0.9)
    command = await gate(state, _runtime(tmp_path))  # type: ignore[arg-type]
    event = command.update["events"][0]
    assert (event["path"], event["how"], command.update["round"]) == ("light", "offline", 1)
    assert [s.node for s in command.goto] == ["follow_up"]  # the light path goes on to the follow-up


async def test_offline_the_gate_goes_deep_to_the_coarse_entries_when_it_is_unsure(tmp_path: Path) -> None:
    command = await gate(_gated("We talked about the weather.", own=0.2, coarse=12), _runtime(tmp_path))  # type: ignore[arg-type]
    assert command.update["events"][0]["path"] == "deep"
    assert command.goto == "backtrack_level2"  # offline no one selects: the coarse top-N is backtracked


async def test_with_a_model_going_deep_fans_out_one_selection_branch_per_batch(tmp_path: Path) -> None:
    model = ScriptedChatModel(script=[{"finished": 2, "answer": ""}])
    runtime = _runtime(
        tmp_path, model, retrieval={"light_check": "structured", "llm_batch_size": 5}, llm_depth=None, max_fanout=4
    )
    command = await gate(_gated("Priya works at a bakery.", own=0.9, coarse=12), runtime)  # type: ignore[arg-type]
    assert command.update["events"][0]["path"] == "deep" and command.update["events"][0]["how"] == "ok"
    sends = command.goto
    assert all(isinstance(s, Send) and s.node == "select_level1" for s in sends)
    assert [len(s.arg["entries"]) for s in sends] == [5, 5, 2] and {s.arg["round"] for s in sends} == {1}
