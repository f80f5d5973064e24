"""Deletes are final, updates are kept: no later write (a thread sent again, a re-ingest, the store adapter) brings
back what a user deleted or replaced; and a message written without a time gets the write's time.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from conftest import HashEmbeddings, assert_store_ok
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver

from memstrata import Memstrata
from memstrata.integrations.middleware import MemstrataMiddleware
from memstrata.integrations.store import MemstrataStore
from memstrata.testing import ScriptedChatModel


@pytest.fixture
def mem(tmp_path: Path) -> Memstrata:
    memory = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    yield memory
    memory.close()


def _texts(mem: Memstrata, user: str) -> list[str]:
    return [r["unit"]["text"] for r in mem.memories(user_id=user, limit=1000)]


def test_a_message_deleted_from_a_middleware_thread_stays_deleted_when_the_thread_is_sent_again(mem: Memstrata):
    agent = create_agent(
        ScriptedChatModel(script=["Noted.", "OK, forgotten.", "Sure."]),
        tools=[],
        checkpointer=InMemorySaver(),
        middleware=[MemstrataMiddleware(mem, user_id="ann")],
    )
    cfg = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [("user", "My bank PIN is 4321.")]}, cfg)
    pin = next(r for r in mem.memories(user_id="ann") if "PIN" in r["text"])
    agent.invoke({"messages": [("user", "Please forget my PIN.")]}, cfg)
    mem.delete(pin["id"], user_id="ann", conversation_id="t1")
    agent.invoke({"messages": [("user", "What's the weather like?")]}, cfg)  # re-sends the whole thread
    assert not any("4321" in t for t in _texts(mem, "ann"))
    assert "4321" not in mem.retrieve("What is my bank PIN?", user_id="ann").context
    assert "What's the weather like?" in _texts(mem, "ann")  # the new turn is written
    assert not any("4321" in json.dumps(e) for e in mem.history(user_id="ann"))  # history never keeps deleted words
    mem.flush()  # the last turn's derivation runs after the reply
    assert_store_ok(mem.store, "ann")


TIMED = [
    {"speaker": "Ann", "text": "I live in Porto.", "timestamp": "2024-03-01T10:00:00"},
    {"speaker": "Ann", "text": "My sister is called Rita.", "timestamp": "2024-03-01T10:01:00"},
]


def test_a_reingest_undoes_neither_an_update_nor_a_delete(mem: Memstrata):
    mem.ingest(TIMED, user_id="ann", conversation_id="c")
    first, second = mem.memories(user_id="ann")
    mem.update(first["id"], "I live in Lisbon now.", user_id="ann", conversation_id="c")
    mem.delete(second["id"], user_id="ann", conversation_id="c")
    stats = mem.ingest(TIMED, user_id="ann", conversation_id="c")  # the same two again: a nightly sync
    assert _texts(mem, "ann") == ["I live in Lisbon now."]
    assert stats["turns_buried"] == 2
    assert [e["event"] for e in mem.history(user_id="ann")] == ["update", "delete"]
    assert all(datetime.fromisoformat(e["at"]).tzinfo is not None for e in mem.history(user_id="ann"))
    assert_store_ok(mem.store, "ann")


def test_messages_with_their_own_ids_stay_deleted_and_updated_and_a_new_message_is_still_written(mem: Memstrata):
    sent = [{**m, "id": f"m{i}"} for i, m in enumerate(TIMED)]
    mem.ingest(sent, user_id="ann", conversation_id="c")
    mem.update("m0", "I live in Lisbon now.", user_id="ann", conversation_id="c")
    mem.delete("m1", user_id="ann", conversation_id="c")
    mem.ingest([*sent, {"speaker": "Ann", "text": "I bought a bike.", "id": "m2"}], user_id="ann", conversation_id="c")
    assert _texts(mem, "ann") == ["I live in Lisbon now.", "I bought a bike."]
    # an update back to an earlier text is a deliberate change, and is kept
    mem.update("m0", "I live in Porto.", user_id="ann", conversation_id="c")
    mem.ingest(sent, user_id="ann", conversation_id="c")
    assert _texts(mem, "ann") == ["I live in Porto.", "I bought a bike."]
    assert_store_ok(mem.store, "ann")


def test_a_deleted_conversation_does_not_come_back_from_its_file(mem: Memstrata, tmp_path: Path):
    path = tmp_path / "conv.json"
    path.write_text(json.dumps({"conversation_id": "c", "messages": TIMED}))
    mem.ingest(str(path), user_id="ann")
    mem.delete(user_id="ann", conversation_id="c")
    mem.ingest(str(path), user_id="ann")
    assert mem.memories(user_id="ann") == []
    # deletes are per user: another user's same file is written
    mem.ingest(str(path), user_id="bob")
    assert _texts(mem, "bob") == [m["text"] for m in TIMED]
    # forgetting a user drops its tombstones with everything else
    assert mem.delete_user(user_id="ann")["tombstones"] == 2


def test_the_store_adapter_deletes_for_good_and_a_new_put_of_the_key_is_kept(mem: Memstrata):
    store = MemstrataStore(mem)
    store.put(("ann", "c"), "pin", {"speaker": "Ann", "text": "My PIN is 4321."})
    store.put(("ann", "c"), "cat", {"speaker": "Ann", "text": "My cat is Miso."})
    store.delete(("ann", "c"), "pin")
    mem.ingest([{"speaker": "Ann", "text": "My PIN is 4321.", "id": "pin"}], user_id="ann", conversation_id="c")
    assert _texts(mem, "ann") == ["My cat is Miso."]
    store.put(("ann", "c"), "pin", {"speaker": "Ann", "text": "My PIN is 9999."})  # a deliberate write
    assert sorted(_texts(mem, "ann")) == ["My PIN is 9999.", "My cat is Miso."]
    assert store.get(("ann", "c"), "pin").value["text"] == "My PIN is 9999."
    assert_store_ok(mem.store, "ann")


def test_saying_the_same_words_again_later_is_a_new_message(mem: Memstrata):
    mem.ingest([{"speaker": "Ann", "text": "ok"}], user_id="ann", conversation_id="c", now="2024-05-01T10:00:00")
    mem.delete(mem.memories(user_id="ann")[0]["id"], user_id="ann", conversation_id="c")
    mem.ingest([{"speaker": "Ann", "text": "ok"}], user_id="ann", conversation_id="c", now="2024-05-01T10:05:00")
    assert _texts(mem, "ann") == ["ok"]


def test_a_message_without_a_time_gets_the_writes_time_unless_told_not_to(mem: Memstrata):
    before = datetime.now().astimezone().replace(tzinfo=None)
    mem.ingest([{"speaker": "Ann", "text": "I adopted a cat named Miso."}], user_id="ann", conversation_id="c")
    (row,) = mem.memories(user_id="ann")
    stamped = datetime.fromisoformat(row["time"])
    # the stamp is UTC; the bounds allow for any local offset without hiding a missing time
    assert abs((stamped - before).total_seconds()) < 15 * 3600
    assert mem.memories(user_id="ann", since=stamped.isoformat())  # since/until match it
    mem.ingest([{"speaker": "Ann", "text": "Untimed."}], user_id="bob", conversation_id="c", stamp_untimed=False)
    assert mem.memories(user_id="bob")[0]["time"] is None
    given = "2024-03-01T10:00:00"
    mem.ingest([{"speaker": "Ann", "text": "Dated.", "timestamp": given}], user_id="cy", conversation_id="c")
    assert mem.memories(user_id="cy")[0]["time"] == given


def test_a_pinned_now_stamps_untimed_messages_and_starts_a_new_session_after_the_gap(mem: Memstrata):
    mem.ingest([{"speaker": "Ann", "text": "Morning."}], user_id="ann", conversation_id="c", now="2024-05-01T08:00")
    mem.ingest([{"speaker": "Ann", "text": "Evening."}], user_id="ann", conversation_id="c", now="2024-05-01T20:00")
    rows = mem.memories(user_id="ann")
    assert [r["time"] for r in rows] == ["2024-05-01T08:00:00", "2024-05-01T20:00:00"]
    assert len({r["session_id"] for r in rows}) == 2  # 12 hours apart: the session gap applies


# ---- a property: random interleavings never bring a deleted text back ------------------------------------------

WORDS = ["Miso", "Porto", "Rita", "Lisbon", "bike", "piano", "tea", "Oslo"]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(WORDS), st.booleans()),  # a new message, with an id or a time
        st.tuples(st.just("resend"), st.integers(0, 20), st.booleans()),  # everything sent so far, again
        st.tuples(st.just("update"), st.integers(0, 20), st.sampled_from(WORDS)),
        st.tuples(st.just("delete"), st.integers(0, 20), st.booleans()),
    ),
    min_size=3,
    max_size=9,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_random_writes_resends_updates_deletes_and_reingests_never_bring_back_a_deleted_text(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple]
):
    mem = Memstrata(path=tmp_path_factory.mktemp("prop"), embeddings=HashEmbeddings())
    try:
        _replay(mem, ops)
    finally:
        mem.close()


def _replay(mem: Memstrata, ops: list[tuple]) -> None:
    sent: list[dict] = []  # every message as its sender has it (the source a re-ingest reads)
    deleted: set[str] = set()
    for n, (op, arg, extra) in enumerate(ops):
        if op == "write":
            text = f"Note {n}: {arg}."
            message = {"speaker": "Ann", "text": text}
            message |= {"id": f"m{n}"} if extra else {"timestamp": f"2024-01-01T10:{n:02d}:00"}
            sent.append(message)
            mem.ingest([message], user_id="u", conversation_id="c")
        elif op == "resend" and sent:
            mem.ingest(sent if extra else sent[: arg % len(sent) + 1], user_id="u", conversation_id="c")
        elif op in ("update", "delete") and (stored := mem.memories(user_id="u", limit=1000)):
            row = stored[arg % len(stored)]
            if op == "update":
                deleted.add(row["unit"]["text"])
                new = f"Changed {n}: {extra}."
                mem.update(row["id"], new, user_id="u", conversation_id="c")
                deleted.discard(new)
            else:
                deleted.add(row["unit"]["text"])
                mem.delete(row["id"], user_id="u", conversation_id="c")
        kept = set(_texts(mem, "u"))
        assert not kept & deleted, (ops[: n + 1], kept & deleted)
    assert_store_ok(mem.store, "u")
