"""HMO's persona coupling: the importance call hears the persona (Eq. 3), a record aligns with its own conversation's
persona (Eq. 5's A), and the drift gate (Eq. 6) runs per conversation, so writes that alternate between two
conversations whose personas stay put re-rank nothing, while a persona that changes re-ranks its conversation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLE, PORTO, HashEmbeddings, assert_store_ok, session_messages

from memstrata import Memstrata
from memstrata.memory.tiers.anchor import drift_gate, read_anchor
from memstrata.memory.tiers.persona import (
    ITEM_CHARS,
    PROMPT_CHARS,
    PROMPT_ITEMS,
    ConversationPersona,
    PersonaLine,
    persona_block,
    read_personas,
)
from memstrata.memory.tiers.priority import DAY, PriorityWeights, alignment, persona_vector, priority

# both conversations' records stay in the active tiers; a threshold this low re-ranks on any real change
TIERS = {"scale.max_turns": 5, "tiers": True, "tier.recent_sessions": 1, "tier.pivotal": 2, "tier.buffer": 4}
SENSITIVE = {**TIERS, "tier.drift": 1e-4}


def _session(conv: str, n: int, when: str, lines: list[tuple[str, str]]) -> dict[str, Any]:
    return {"conversation_id": conv, "messages": session_messages(n, when, lines)}


def _scores(mem: Memstrata, conv: str) -> dict[str, tuple[float | None, float | None]]:
    return {
        c.unit_id: (c.priority, c.scored_at)
        for c in mem.store.counters.all("ann", kind="summary")
        if c.conversation_id == conv
    }


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    memory = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    yield memory
    memory.close()


# ---- the pure parts --------------------------------------------------------------------------------------------
def test_the_persona_block_is_bounded_first_items_first_and_says_none_yet_when_empty() -> None:
    dims = ["basic_info", "interests", "personality", "values", "relationships"]
    lines = tuple(
        PersonaLine(speaker, d, rank, f"{speaker} {d} statement {rank} " + "word " * 20)
        for rank in range(4)
        for speaker in ("Ann", "Bo")
        for d in dims
    )
    block = persona_block([ConversationPersona(None, lines[::-1])])  # stored order does not matter
    body = block.removeprefix("<persona>\n").removesuffix("\n</persona>").splitlines()
    assert block.startswith("<persona>\n") and block.endswith("\n</persona>")
    assert 0 < len(body) <= PROMPT_ITEMS and len("\n".join(body)) <= PROMPT_CHARS
    assert all(" statement 0 " in line for line in body)  # every dimension's first item before any second one
    assert body[0].startswith("Ann, basic_info: Ann basic_info statement 0")
    long = PersonaLine("Ann", "values", 0, "x" * 1000)
    assert len(long.render()) == len("Ann, values: ") + ITEM_CHARS and long.render().endswith("…")
    assert persona_block([]) == persona_block([ConversationPersona(None, ())]) == "<persona>none yet</persona>"


def test_the_drift_gate_reranks_only_the_conversations_that_moved_from_their_own_anchor() -> None:
    a, b = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    gate = drift_gate({"a": a, "b": b}, {"a": a, "b": b}, threshold=0.05)
    assert gate.rerank == frozenset() and gate.anchors == {} and gate.drift == pytest.approx({"a": 0.0, "b": 0.0})
    moved = drift_gate({"a": a, "b": a, "c": b, "d": None}, {"a": a, "b": b}, threshold=0.05)
    assert moved.rerank == {"b", "c"} and set(moved.anchors) == {"b", "c"}  # moved, and a first anchor
    never = drift_gate({"c": b}, {}, threshold=2.0)  # a gate that never fires still takes the first anchor
    assert never.rerank == frozenset() and set(never.anchors) == {"c"}


# ---- the importance call hears the persona -------------------------------------------------------------------
def test_the_importance_call_hears_the_current_persona_once_there_is_one(tmp_path: Path) -> None:
    from memstrata.prompts import PROMPTS
    from memstrata.testing import ScriptedChatModel

    def reply(messages: list[Any]) -> Any:
        system, user = str(messages[0].content), str(messages[1].content)
        if system.startswith(PROMPTS["IMPORTANCE_PROMPT"][:40]):
            return {"scores": [{"index": i, "score": 7} for i in range(user.count("<record index="))]}
        return "no structured reply"  # every other decision falls back (the persona is the offline one)

    model = ScriptedChatModel(default=reply)
    mem = Memstrata(path=tmp_path / "llm", embeddings=HashEmbeddings(), model=model)

    def importance_prompts() -> list[str]:
        return [
            str(m[1].content) for m in model.calls if str(m[0].content).startswith(PROMPTS["IMPORTANCE_PROMPT"][:40])
        ]

    first = _session("small", 1, "2024-01-01T10:00:00", [("Ann", "Hi Bo!"), ("Bo", "Hey Ann, all good?")])
    mem.ingest(first, user_id="ann", close=True, **TIERS)
    assert mem.store.count("persona", user_id="ann") == 0
    (alone,) = importance_prompts()
    assert alone.startswith("<persona>none yet</persona>\n") and '<record index="0">' in alone
    model.calls.clear()
    mem.ingest(
        EXAMPLE,
        user_id="ann",
        close=True,
        **TIERS,
        tier={"importance_batch": 4},
    )
    prompts = importance_prompts()
    current = [
        r.payload for r in mem.store.get("persona", user_id="ann", conversation_id="priya-tom", where={"current": True})
    ]
    priya = next(p for p in current if p["speaker"] == "Priya" and p["dimension"] == "basic_info")
    assert len(prompts) == 2 and priya["items"]
    for prompt in prompts:
        block = prompt[: prompt.index("</persona>")]
        assert "none yet" not in block and len(block) <= PROMPT_CHARS + len("<persona>\n")
        assert f"Priya, basic_info: {priya['items'][0]['text'][:60]}" in block  # the item's own text, as data
        assert 0 < block.count("\n") - 1 <= PROMPT_ITEMS
    mem.close()


# ---- alignment and the drift gate, per conversation ----------------------------------------------------------
def test_alternating_writes_to_two_stable_conversations_rerank_nothing_and_a_changed_persona_does(
    mem: Memstrata,
) -> None:
    mem.ingest(EXAMPLE, user_id="ann", close=True, **SENSITIVE)
    second = mem.ingest(_session("ann-bo", 1, "2024-01-10T10:00:00", PORTO), user_id="ann", close=True, **SENSITIVE)
    assert second["tiers_reranked"] is True  # the conversation's first anchor
    personas = read_personas(mem.store, "ann", ["priya-tom", "ann-bo"])
    assert set(read_anchor(mem.store, "ann")) == {"priya-tom", "ann-bo"}
    assert alignment(personas["priya-tom"].vector, personas["ann-bo"].vector) < 0.9  # far apart: a shared anchor
    # would see each alternate write drift far past the threshold
    for i, (conv, speaker) in enumerate([("priya-tom", "Tom"), ("ann-bo", "Bo"), ("priya-tom", "Priya")] * 2):
        before = {c: _scores(mem, c) for c in ("priya-tom", "ann-bo")}
        filler = _session(conv, 10 + i, f"2024-08-{i + 1:02d}T10:00:00", [(speaker, "Ok, talk soon!")])
        stats = mem.ingest(filler, user_id="ann", close=True, **SENSITIVE)
        assert stats["records_scored"] == 1
        assert stats["tiers_reranked"] is False and stats["persona_drift"] == pytest.approx(0.0, abs=1e-6)
        after = {c: _scores(mem, c) for c in ("priya-tom", "ann-bo")}
        assert all(after[c][k] == v for c in before for k, v in before[c].items())  # nothing scored again
    stable = read_personas(mem.store, "ann", ["priya-tom", "ann-bo"])
    assert all(np.array_equal(stable[c].vector, personas[c].vector) for c in personas)  # the premise held
    # a record aligns with its own conversation's persona: the last Bo write's record, scored as Eq. 5 says
    (newest,) = [
        c
        for c in mem.store.counters.all("ann", kind="summary")
        if c.conversation_id == "ann-bo" and c.session_key == "ann-bo/14"
    ]
    (vector,) = [
        r.metadata["_vector"]
        for r in mem.store.get(
            "summary", user_id="ann", conversation_id="ann-bo", unit_ids=[newest.unit_id], with_vectors=True
        )
    ]
    own, mixed = personas["ann-bo"].vector, persona_vector([personas["priya-tom"].vector, personas["ann-bo"].vector])
    age = (newest.scored_at - newest.record_time) / DAY

    def eq5(persona: np.ndarray | None) -> float:
        return round(
            priority(newest.importance, alignment(vector, persona), recalls=0, age_days=age, weights=PriorityWeights()),
            6,
        )

    assert newest.priority == pytest.approx(eq5(own), abs=1e-6) and eq5(own) != pytest.approx(eq5(mixed), abs=1e-4)
    # control: Priya's persona really changes; her conversation's active records are scored again, Bo's are not
    before = {c: _scores(mem, c) for c in ("priya-tom", "ann-bo")}
    active = {c.unit_id for c in mem.store.counters.active("ann") if c.conversation_id == "priya-tom"}
    news = [
        ("Priya", "I quit Tidewater Labs and now I surf every morning in Ericeira."),
        ("Priya", "I believe the ocean heals everything, and I volunteer at the beach clean-up every Sunday."),
    ]
    moved = mem.ingest(_session("priya-tom", 30, "2024-09-01T10:00:00", news), user_id="ann", close=True, **SENSITIVE)
    assert moved["tiers_reranked"] is True and moved["persona_drift"] > SENSITIVE["tier.drift"]
    after = {c: _scores(mem, c) for c in ("priya-tom", "ann-bo")}
    assert active and all(after["priya-tom"][k][1] != before["priya-tom"][k][1] for k in active)  # scored anew
    assert after["ann-bo"] == before["ann-bo"]  # the other conversation's persona did not move
    assert_store_ok(mem.store, "ann")
    assert mem.store.tier_state.count(user_id="ann") == 2  # one anchor per conversation, which forget takes
    mem.delete_user(user_id="ann")
    assert mem.store.tier_state.count(user_id="ann") == 0 and read_anchor(mem.store, "ann") == {}
