"""The ingestion graph: example conversation, idempotence, incremental sessions, links, shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLE, assert_store_ok

from memstrata import Memstrata
from memstrata.errors import IngestError

SNAPSHOTS = Path(__file__).parents[1] / "snapshots"


@pytest.fixture
def mem(data_dir, hash_embeddings) -> Memstrata:
    return Memstrata(path=data_dir, embeddings=hash_embeddings)


def _counts(mem: Memstrata, user: str) -> dict[str, int]:
    return {k: mem.store.count(k, user_id=user) for k in ("turn", "episode", "summary")}


def test_example_ingests_with_linked_levels(mem: Memstrata) -> None:
    events: list[dict] = []
    stats = mem.ingest(EXAMPLE, user_id="u", on_progress=events.append)
    assert stats["turns_added"] == 36 and stats["episodes_written"] == stats["summaries_written"] > 3
    assert {e["stage"] for e in events} >= {"load", "turns", "contexts", "segment", "summaries"}
    store = mem.store
    episodes = {r.unit_id: r for r in store.get("episode", user_id="u")}
    turns = {r.unit_id: r for r in store.get("turn", user_id="u")}
    for s in store.get("summary", user_id="u"):
        ep = episodes[s.payload["episode_id"]]
        assert ep.payload["summary_id"] == s.unit_id
        assert s.payload["turn_ids"] == ep.payload["turn_ids"]
        # Level-2 is verbatim: the episode text is exactly its turns' rendered text.
        assert ep.document == "\n".join(turns[t].document for t in ep.payload["turn_ids"])
    covered = {t for ep in episodes.values() for t in ep.payload["turn_ids"]}
    assert covered == set(turns)
    assert_store_ok(store, "u")


def test_reingest_adds_nothing(mem: Memstrata) -> None:
    mem.ingest(EXAMPLE, user_id="u")
    before = _counts(mem, "u")
    stats = mem.ingest(EXAMPLE, user_id="u")
    assert stats["turns_added"] == 0 and stats["episodes_written"] == 0
    assert _counts(mem, "u") == before
    assert_store_ok(mem.store, "u")


def test_new_session_only_adds(mem: Memstrata) -> None:
    data = json.loads(EXAMPLE.read_text())
    first_two = [m for m in data["messages"] if m["timestamp"] < "2024-05"]
    mem.ingest({"conversation_id": "priya-tom", "messages": first_two}, user_id="u", close=True)
    old = {r.unit_id: r.document for r in mem.store.get("episode", user_id="u")}
    stats = mem.ingest(EXAMPLE, user_id="u")
    assert stats["sessions_touched"] == 1 and stats["episodes_replaced"] == 0
    new = {r.unit_id: r.document for r in mem.store.get("episode", user_id="u")}
    assert all(new[k] == v for k, v in old.items())
    assert_store_ok(mem.store, "u")
    assert len(new) > len(old)


def test_bad_input_leaves_store_untouched(mem: Memstrata, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"speaker": "A", "text": "fine"}, {"speaker": "B", "text": ""}]))
    with pytest.raises(IngestError, match=r"bad.json: conversation default, message #1: empty"):
        mem.ingest(bad, user_id="u")
    assert _counts(mem, "u") == {"turn": 0, "episode": 0, "summary": 0}


def bobs_copy() -> dict:
    """The example conversation with other people and places: near-identical content for a second user."""
    text = EXAMPLE.read_text().replace("Priya", "Meera").replace("Tom", "Sam").replace("Brighton", "Leeds")
    return json.loads(text)


def test_users_are_isolated_after_ingest(mem: Memstrata) -> None:
    mem.ingest(EXAMPLE, user_id="alice")
    mem.ingest(bobs_copy(), user_id="bob")
    assert _counts(mem, "alice") == _counts(mem, "bob") and _counts(mem, "bob")["turn"] == 36
    for user, own, other in (("alice", "Priya", "Meera"), ("bob", "Meera", "Priya")):
        texts = " ".join(
            r.document for kind in ("turn", "episode", "summary") for r in mem.store.get(kind, user_id=user)
        )
        assert own in texts and other not in texts
        result = mem.retrieve(f"Where does {other} work?", user_id=user)
        assert result.evidence and all(other not in e.text for e in result.evidence)
    assert mem.delete_user(user_id="alice")["turn"] == 36
    assert _counts(mem, "alice") == {"turn": 0, "episode": 0, "summary": 0}
    assert _counts(mem, "bob")["turn"] == 36  # forgetting alice leaves bob whole


def test_ingestion_graph_shape_snapshot() -> None:
    from memstrata.graphs.ingestion import graph

    expected = (SNAPSHOTS / "ingestion.mmd").read_text()
    assert graph.get_graph().draw_mermaid() == expected


def test_interrupted_ingest_is_resumed_without_duplicates(mem: Memstrata) -> None:
    mem.ingest(EXAMPLE, user_id="u")
    full = _counts(mem, "u")
    # Simulate a crash after the turns were written: summaries of one session never landed.
    lost = [r.unit_id for r in mem.store.get("summary", user_id="u", where={"session_id": "2"})]
    mem.store.delete("summary", user_id="u", conversation_id="priya-tom", unit_ids=lost)
    stats = mem.ingest(EXAMPLE, user_id="u")
    assert stats["turns_added"] == 0 and stats["sessions_touched"] == 1
    assert _counts(mem, "u") == full
    assert_store_ok(mem.store, "u")


def test_summaries_of_several_conversations_do_not_collide(mem: Memstrata) -> None:
    msgs = [{"speaker": "A", "text": f"topic {i} about gardens and roses"} for i in range(6)]
    stats = mem.ingest(
        [
            {"conversation": {"session_1": msgs}, "sample_id": "a"},
            {"conversation": {"session_1": msgs}, "sample_id": "b"},
        ],
        user_id="u",
    )
    assert stats["summaries_written"] == stats["episodes_written"] == 2 * (stats["episodes_written"] // 2) > 0
    assert mem.store.count("summary", user_id="u") == mem.store.count("episode", user_id="u")


def test_every_turn_gets_a_contextual_view(mem: Memstrata) -> None:
    stats = mem.ingest(EXAMPLE, user_id="u")
    turns = {r.unit_id: r for r in mem.store.get("turn", user_id="u")}
    views = mem.store.get("turn_context", user_id="u")
    assert stats["contexts_written"] == len(views) == len(turns)
    for view in views:
        turn = turns[view.payload["turn_id"]]
        lines = view.document.split("\n")
        # The turn's own rendered text, verbatim, with at most one neighbour of its session each side.
        assert turn.document in lines and 1 <= len(lines) <= 3
        assert view.metadata["session_id"] == turn.metadata["session_id"]
    assert mem.ingest(EXAMPLE, user_id="u")["contexts_written"] == 0


def test_store_without_contexts_is_repaired_by_reingest(mem: Memstrata) -> None:
    mem.ingest(EXAMPLE, user_id="u")
    full = mem.store.count("turn_context", user_id="u")
    lost = [r.unit_id for r in mem.store.get("turn_context", user_id="u", where={"session_id": "1"})]
    mem.store.delete("turn_context", user_id="u", conversation_id="priya-tom", unit_ids=lost)
    # Search still works on a store missing views: the turn vector stands in for its context.
    assert mem.retrieve("Where does Priya work?", user_id="u").evidence
    stats = mem.ingest(EXAMPLE, user_id="u")
    assert stats["turns_added"] == 0 and stats["sessions_touched"] == 1 and stats["contexts_written"] == len(lost)
    assert mem.store.count("turn_context", user_id="u") == full
    assert_store_ok(mem.store, "u")


@pytest.mark.parametrize("mode", ["pooled", "encoded"])
def test_turn_context_vectors_are_pooled_or_encoded(tmp_path: Path, hash_embeddings, mode: str) -> None:
    import numpy as np

    from memstrata.memory.levels.level2.turn_context import pooled_vectors

    mem = Memstrata(
        path=tmp_path / mode,
        embeddings=hash_embeddings,
        episodes={"context_vectors": mode},
    )
    mem.ingest(EXAMPLE, user_id="u")
    turns = mem.store.get("turn", user_id="u", with_vectors=True)
    views = {r.payload["turn_id"]: r for r in mem.store.get("turn_context", user_id="u", with_vectors=True)}
    assert len(views) == len(turns)
    by_session: dict[str, list] = {}
    for r in sorted(turns, key=lambda r: r.metadata["position"]):
        by_session.setdefault(r.metadata["session_id"], []).append(r)
    for recs in by_session.values():
        own = np.array([r.metadata["_vector"] for r in recs])
        got = np.array([views[r.unit_id].metadata["_vector"] for r in recs])
        if mode == "pooled":  # the neighbours' vectors pooled, no model call
            assert np.allclose(got, pooled_vectors(own, width=1), atol=1e-5)
        else:  # the window's text encoded
            want = hash_embeddings.embed_documents([views[r.unit_id].document for r in recs])
            assert np.allclose(got, want, atol=1e-5)
        if len(recs) > 1:
            assert not np.allclose(got, own, atol=1e-3)  # a view is not the turn alone
