"""Integration: the real packaged MiniLM and embedded Chroma on one LoCoMo conversation."""

from __future__ import annotations

import json

import pytest

from memstrata import Memstrata
from memstrata.memory.levels import levels

KINDS = [lv.kind for lv in levels()]

pytestmark = pytest.mark.integration
CONV = "conv-26"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, locomo_path, minilm):
    path = tmp_path_factory.mktemp("locomo") / "chroma"
    mem = Memstrata(path=path, embeddings=minilm)
    stats = mem.ingest(locomo_path, user_id="u1", only_conversation=CONV)
    return mem, stats


def test_one_conversation_ingests_under_its_sample_id(ingested, locomo_path) -> None:
    mem, stats = ingested
    data = json.loads(locomo_path.read_text())
    conv = next(c for c in data if c["sample_id"] == CONV)
    n_turns = sum(len(v) for k, v in conv["conversation"].items() if k.startswith("session_") and isinstance(v, list))
    assert stats["conversations"] == 1 and stats["turns_added"] == n_turns
    assert mem.store.count("turn", user_id="u1", conversation_id=CONV) == n_turns
    turn = mem.store.get("turn", user_id="u1", conversation_id=CONV, unit_ids=["D1:3"])[0]
    assert turn.payload["text"] == conv["conversation"]["session_1"][2]["text"]
    assert turn.payload["timestamp_raw"] == conv["conversation"]["session_1_date_time"]


def test_reingest_adds_zero_and_other_user_sees_none(ingested, locomo_path) -> None:
    mem, _ = ingested
    before = {k: mem.store.count(k, user_id="u1") for k in KINDS}
    again = mem.ingest(locomo_path, user_id="u1", only_conversation=CONV)
    assert again["turns_added"] == 0 and again["episodes_written"] == 0 and again["summaries_written"] == 0
    assert {k: mem.store.count(k, user_id="u1") for k in KINDS} == before
    assert all(mem.store.count(k, user_id="u2") == 0 for k in KINDS)
    assert mem.retrieve("What did Caroline research?", user_id="u2").evidence == []


def test_offline_retrieval_finds_gold_evidence(ingested) -> None:
    mem, _ = ingested
    result = mem.retrieve("When did Caroline go to the LGBTQ support group?", user_id="u1", context_budget=1500)
    assert result.context_tokens <= 1500
    assert "D1:3" in [e.turn_id for e in result.evidence]
    assert result.trace["path"] in ("light", "deep")


def test_facts_entities_and_the_graph_on_a_real_conversation(ingested) -> None:
    mem, stats = ingested
    assert stats["facts_written"] > 400 and stats["entities_written"] > 10 and stats["relations_written"] > 10
    speakers = {
        r.unit_id: r.payload
        for r in mem.store.get("entity", user_id="u1", conversation_id=CONV, unit_ids=["ent:caroline", "ent:melanie"])
    }
    assert {p["type"] for p in speakers.values()} == {"speaker"} and len(speakers) == 2
    assert "Mel" not in speakers["ent:melanie"]["aliases"]  # a nickname is an overlap edge, not the same entity
    overlaps = mem.store.edges.get("u1", conversation_id=CONV, rel="overlaps")
    assert any(e.src == "ent:mel" and e.dst == "ent:melanie" for e in overlaps)
    support_group = [
        r.payload
        for r in mem.store.get("fact", user_id="u1", conversation_id=CONV, where={"session_id": "1"})
        if "support group" in r.payload["text"] and r.payload["subject_id"] == "ent:caroline"
    ]
    assert any("(7 May 2023)" in f["text"] for f in support_group)  # "yesterday", said on 8 May 2023
    result = mem.retrieve("What activities has Melanie done with her family?", user_id="u1", context_budget=1500)
    assert any(e.via.startswith("Melanie") for e in result.evidence)
