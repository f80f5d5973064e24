"""The store check: nothing on a store real ingestion built, and each invariant caught when broken on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLE, HashEmbeddings
from typer.testing import CliRunner

from memstrata import Memstrata
from memstrata.cli import app
from memstrata.memory.store import Edge
from memstrata.memory.store.counters import UnitCounters
from memstrata.memory.store.invariants import check_store


@pytest.fixture
def mem(tmp_path: Path) -> Memstrata:
    memory = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    memory.ingest(EXAMPLE, user_id="u")
    for text in ["I adopted a cat named Miso.", "She is grey.", "Tomorrow I fly to Lisbon."]:  # a chat, open tail
        memory.ingest([{"speaker": "Ann", "text": text}], user_id="u", conversation_id="chat")
    return memory


def _invariants(mem: Memstrata) -> set[str]:
    return {p.invariant for p in check_store(mem.store, "u")}


def _one(mem: Memstrata, kind: str, **where: object) -> object:
    recs = mem.store.get(kind, user_id="u", conversation_id="priya-tom", where=where or None)
    return recs[0]


def test_a_store_built_by_ingestion_has_no_problem(mem: Memstrata) -> None:
    assert check_store(mem.store, "u") == []
    assert check_store(mem.store, "u", "chat") == []


def test_a_missing_parent_is_caught(mem: Memstrata) -> None:
    episode = _one(mem, "episode")
    mem.store.delete("summary", user_id="u", conversation_id="priya-tom", unit_ids=[episode.payload["summary_id"]])
    assert "parent" in _invariants(mem)


def test_a_fact_without_its_episode_is_caught(mem: Memstrata) -> None:
    fact = _one(mem, "fact")
    mem.store.delete("episode", user_id="u", conversation_id="priya-tom", unit_ids=[fact.payload["episode_id"]])
    problems = check_store(mem.store, "u")
    assert any(p.invariant == "parent" and p.unit == f"fact {fact.unit_id}" for p in problems)


def test_an_entity_whose_facts_are_gone_is_caught(mem: Memstrata) -> None:
    entity = _one(mem, "entity")
    mem.store.delete("fact", user_id="u", conversation_id="priya-tom", unit_ids=entity.payload["fact_ids"])
    assert any(p.invariant == "entity" and entity.unit_id in p.unit for p in check_store(mem.store, "u"))


def test_an_edge_to_a_missing_unit_is_caught(mem: Memstrata) -> None:
    mem.store.edges.add(
        "u", [Edge("priya-tom", "ent:priya", "knows", "ent:nobody", src_kind="entity", dst_kind="entity")]
    )
    assert any(p.invariant == "edge" and "ent:nobody" in p.detail for p in check_store(mem.store, "u"))


def test_a_counter_of_a_missing_unit_is_caught(mem: Memstrata) -> None:
    mem.store.counters.put("u", [UnitCounters("priya-tom", "summary", "sum:gone", recall_count=1)])
    assert any(p.invariant == "counter" and "sum:gone" in p.unit for p in check_store(mem.store, "u"))


def test_the_word_index_out_of_step_with_the_store_is_caught(mem: Memstrata) -> None:
    turn = _one(mem, "turn")
    mem.store.collection("turn").delete(ids=[mem.store.storage_key("u", "priya-tom", turn.unit_id)])  # Chroma only
    mem.store.words.put("turn", [("u", "priya-tom", "stray", "a row no unit has")])
    details = {(p.unit, p.detail) for p in check_store(mem.store, "u") if p.invariant == "words"}
    assert (f"turn {turn.unit_id}", "in the word index but not stored") in details
    assert ("turn stray", "in the word index but not stored") in details


def test_a_turn_its_units_link_to_is_caught_when_gone(mem: Memstrata) -> None:
    turn = _one(mem, "turn")
    mem.store.delete("turn", user_id="u", conversation_id="priya-tom", unit_ids=[turn.unit_id])  # Chroma and words
    problems = check_store(mem.store, "u")
    linking = {p.unit.split()[0] for p in problems if p.invariant == "turn" and turn.unit_id in p.detail}
    assert {"episode", "turn_context"} <= linking
    assert not [p for p in problems if p.invariant == "words"]


def test_a_stored_unit_missing_from_the_word_index_is_caught(mem: Memstrata) -> None:
    turn = _one(mem, "turn")
    mem.store.words.delete("turn", user_id="u", conversation_id="priya-tom", unit_ids=[turn.unit_id])  # index only
    problems = [p for p in check_store(mem.store, "u") if p.invariant == "words"]
    assert [(p.unit, p.detail) for p in problems] == [(f"turn {turn.unit_id}", "stored but not in the word index")]


def test_two_turns_at_one_position_are_caught(mem: Memstrata) -> None:
    turn = _one(mem, "turn", session_id="1")
    twin = {**turn.payload, "id": "twin", "text": "A second turn at the same place."}
    from memstrata.memory.levels import Turn

    unit = Turn.model_validate(twin)
    mem.store.upsert("turn", [unit], documents=[unit.embed_text()], extra=[unit.metadata()])
    assert any(p.invariant == "position" for p in check_store(mem.store, "u"))


def test_the_cli_prints_what_it_checked_then_each_problem(tmp_path: Path) -> None:
    runner = CliRunner()
    store = ["--user", "u", "--data-dir", str(tmp_path / "cli")]
    assert (
        runner.invoke(app, ["ingest", str(EXAMPLE), *store]).exit_code == 0
    )  # the packaged embedder, as a user has it
    ok = runner.invoke(app, ["check", *store])
    assert ok.exit_code == 0 and ok.output.startswith("checked user 'u'") and "no problems" in ok.output
    Memstrata(path=tmp_path / "cli").store.counters.put("u", [UnitCounters("priya-tom", "summary", "sum:gone")])
    bad = runner.invoke(app, ["check", *store])
    assert bad.exit_code == 1 and "[counter] priya-tom/summary sum:gone" in bad.output
    elsewhere = runner.invoke(app, ["check", *store, "--conversation", "other"])  # not stored: one line, exit 2
    assert elsewhere.exit_code == 2 and "no memory for conversation 'other'" in elsewhere.output
    mine = runner.invoke(app, ["check", *store, "--conversation", "priya-tom"])  # one conversation only
    assert mine.exit_code == 1 and "[counter] priya-tom/summary sum:gone" in mine.output
