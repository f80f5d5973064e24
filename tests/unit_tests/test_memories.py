"""Single memories, managed as a mem0 user would: list, get, update, delete one turn or a conversation, history.

Two users hold the same conversation (same ids and text); every operation on one leaves the other's memory exactly
as it was, and ``memstrata check`` reports nothing after each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, HashEmbeddings, assert_store_ok
from test_concurrency import digest

from memstrata import Memstrata
from memstrata.errors import IngestError


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    memory = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    for user in ("ann", "bob"):
        memory.ingest(EXAMPLE, user_id=user, close=True)
    yield memory
    memory.close()


def test_list_and_get_with_filters_and_paging(mem: Memstrata) -> None:
    [conv] = mem.conversations(user_id="ann")
    assert (conv["conversation_id"], conv["turns"], conv["sessions"]) == ("priya-tom", 36, 3)
    everything = mem.memories(user_id="ann", limit=1000)
    assert len(everything) == 36 and all(
        m["kind"] == "turn" and m["conversation_id"] == "priya-tom" for m in everything
    )
    first, second = mem.memories(user_id="ann", limit=2), mem.memories(user_id="ann", limit=2, offset=2)
    assert [m["id"] for m in first + second] == [m["id"] for m in everything[:4]]
    priya = mem.memories(user_id="ann", speaker="Priya", limit=1000)
    assert priya and all(m["speaker"] == "Priya" for m in priya)
    april = mem.memories(user_id="ann", since="2024-04-01", until="2024-04-30", limit=1000)
    assert april and all(m["time"].startswith("2024-04") for m in april)
    facts = mem.memories(user_id="ann", kind="fact", limit=5)
    assert facts and all(m["kind"] == "fact" for m in facts)
    one = mem.memory(everything[0]["id"], user_id="ann")
    assert one["text"] == everything[0]["text"]
    with pytest.raises(LookupError, match="no turn 'nope' for user 'ann'"):
        mem.memory("nope", user_id="ann")
    with pytest.raises(KeyError, match="unknown unit kind 'memo'"):
        mem.memories(user_id="ann", kind="memo")
    with pytest.raises(ValueError, match="could not read 'someday'"):
        mem.memories(user_id="ann", since="someday")
    assert mem.conversations(user_id="nobody") == [] and mem.memories(user_id="nobody") == []


def test_update_rebuilds_what_the_turn_supported_and_touches_no_other_user(mem: Memstrata) -> None:
    bob = digest(mem.store, "bob")
    turn = next(m for m in mem.memories(user_id="ann", limit=100) if "Lisbon" in m["text"])
    done = mem.update(turn["id"], "I am staying in Porto after all.", user_id="ann", conversation_id="priya-tom")
    assert done["updated"] == turn["id"] and done["removed"]["turn"] == 1
    assert mem.memory(turn["id"], user_id="ann")["text"].endswith("I am staying in Porto after all.")
    facts = " ".join(m["text"] for m in mem.memories(user_id="ann", kind="fact", limit=1000))
    summaries = " ".join(m["text"] for m in mem.memories(user_id="ann", kind="summary", limit=1000))
    assert "Porto" in facts + summaries  # rebuilt from the new text
    found = mem.retrieve("Is Priya staying in Porto?", user_id="ann", context_budget=300).context
    assert "I am staying in Porto after all." in found
    assert "Porto after all" not in mem.retrieve("Is Priya staying in Porto?", user_id="bob").context
    assert digest(mem.store, "bob") == bob
    assert_store_ok(mem.store, "ann")
    assert_store_ok(mem.store, "bob")
    with pytest.raises(ValueError, match="empty"):
        mem.update(turn["id"], "  ", user_id="ann", conversation_id="priya-tom")


def test_delete_one_turn_then_a_conversation_and_the_history_says_so(mem: Memstrata) -> None:
    bob = digest(mem.store, "bob")
    turn = next(m for m in mem.memories(user_id="ann", limit=100) if "Tidewater" in m["text"])
    removed = mem.delete(turn["id"], user_id="ann", conversation_id="priya-tom")
    assert removed["turn"] == 1 and removed["summary"] >= 1
    with pytest.raises(LookupError):
        mem.memory(turn["id"], user_id="ann")
    assert "Tidewater" not in " ".join(m["text"] for m in mem.memories(user_id="ann", kind="fact", limit=1000))
    assert len(mem.memories(user_id="ann", limit=1000)) == 35
    assert_store_ok(mem.store, "ann")  # the session's other turns were rebuilt into episodes and summaries
    with pytest.raises(LookupError):
        mem.delete("nope", user_id="ann", conversation_id="priya-tom")
    mem.delete(user_id="ann", conversation_id="priya-tom")
    assert mem.conversations(user_id="ann") == [] and mem.memories(user_id="ann", kind="fact") == []
    with pytest.raises(LookupError, match="no conversation 'priya-tom' for user 'ann'"):
        mem.delete(user_id="ann", conversation_id="priya-tom")
    events = [(e["event"], e["turn_id"]) for e in mem.history(user_id="ann")]
    assert events == [("delete", turn["id"]), ("delete_conversation", None)]
    assert mem.history(user_id="bob") == [] and digest(mem.store, "bob") == bob
    assert_store_ok(mem.store, "ann")
    mem.delete_user(user_id="ann")
    assert mem.history(user_id="ann") == []


def test_user_id_is_keyword_only_on_every_management_call(tmp_path: Path) -> None:
    """A user id passed by position is refused before anything is read or written (issue 55, item 6)."""
    import inspect

    from memstrata import repair
    from memstrata.memories import Memories
    from memstrata.portable import export_user

    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    refused: list[Any] = [
        lambda: mem.history("ann"),
        lambda: mem.memories("ann"),
        lambda: mem.conversations("ann"),
        lambda: mem.memory("ann", "s1:t0"),
        lambda: mem.update("ann", "c1", "s1:t0", "I moved to Porto."),
        lambda: mem.delete("ann", "c1", "s1:t0"),
        lambda: mem.delete("ann"),  # a turn id, then no user_id=
        lambda: mem.persona("ann", "Ann"),
        lambda: mem.persona_history("ann", "Ann"),
        lambda: mem.export("ann", tmp_path / "ann.jsonl"),
        lambda: mem.rebuild("ann"),
        lambda: mem.score_tiers("ann"),
        lambda: mem.delete_user("ann"),
        lambda: mem.context("ann"),
        lambda: mem.complete("ann", "c1"),
        lambda: mem.acomplete("ann", "c1"),
        lambda: mem.complete_later("ann", "c1"),
        lambda: mem.queued("ann"),
        lambda: mem.managed.history("ann"),
        lambda: export_user(mem, "ann", tmp_path / "ann.jsonl"),
    ]
    for call in refused:
        with pytest.raises(TypeError):
            call()
    # the rule, for every public method of the facade and every public function that takes one: keyword-only
    public = [getattr(Memstrata, n) for n in dir(Memstrata) if not n.startswith("_")]
    public += [getattr(Memories, n) for n in dir(Memories) if not n.startswith("_")]
    public += [getattr(repair, n) for n in dir(repair) if not n.startswith("_")]
    takes_user = [
        fn
        for fn in [*public, export_user]
        if inspect.isfunction(fn)
        and "user_id" in (params := inspect.signature(fn).parameters)
        and next(iter(params)) in ("self", "mem")
    ]
    for fn in takes_user:
        assert inspect.signature(fn).parameters["user_id"].kind is inspect.Parameter.KEYWORD_ONLY, fn.__qualname__
    assert len(takes_user) >= 30
    assert mem.history(user_id="ann") == [] and mem.queued(user_id="ann") == 0
    mem.close()


def test_the_command_line_lists_updates_deletes_and_shows_the_history(minilm: Any, tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from memstrata.cli import app

    mem = Memstrata(path=tmp_path / "cli", embeddings=minilm)  # the command line opens it with the packaged MiniLM
    mem.ingest(EXAMPLE, user_id="ann", close=True)
    folder = str(mem.context(user_id="ann").data_dir)
    run = CliRunner()
    listed = run.invoke(app, ["list", "-u", "ann", "--speaker", "Tom", "--limit", "3", "--json", "--data-dir", folder])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert len(rows) == 3 and all(r["speaker"] == "Tom" for r in rows)
    done = run.invoke(
        app,
        [
            "update",
            "-u",
            "ann",
            "-c",
            "priya-tom",
            "--turn",
            rows[0]["id"],
            "--text",
            "I never ran a marathon.",
            "--data-dir",
            folder,
        ],
    )
    assert done.exit_code == 0, done.output
    gone = run.invoke(
        app, ["delete", "-u", "ann", "-c", "priya-tom", "--turn", rows[1]["id"], "--yes", "--data-dir", folder]
    )
    assert gone.exit_code == 0 and json.loads(gone.output)["turn"] == 1
    shown = run.invoke(app, ["history", "-u", "ann", "--data-dir", folder])
    assert [json.loads(line)["event"] for line in shown.output.splitlines()] == ["update", "delete"]
    missing = run.invoke(
        app, ["delete", "-u", "ann", "-c", "priya-tom", "--turn", "nope", "--yes", "--data-dir", folder]
    )
    assert missing.exit_code == 2 and "no turn 'nope'" in missing.output
    bad = run.invoke(app, ["list", "-u", "ann", "--kind", "memo", "--data-dir", folder])
    assert bad.exit_code == 2 and "unknown unit kind 'memo'" in bad.output
    assert_store_ok(mem.store, "ann")


def test_metadata_attached_at_write_time_filters_listings_for_that_user_only(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "meta", embeddings=HashEmbeddings())
    for user, topic in (("ann", "pets"), ("bob", "travel")):  # the same messages, other metadata
        mem.ingest(
            [
                {
                    "speaker": "Ann",
                    "text": "I adopted a grey cat named Miso last week.",
                    "metadata": {"topic": topic, "app": "chat"},
                }
            ],
            user_id=user,
            conversation_id="c1",
        )
        mem.ingest(
            [{"speaker": "Ann", "text": "My sister Lena flies to Lisbon on Friday."}],
            user_id=user,
            conversation_id="c1",
            metadata={"topic": "family", "priority": 2},
            close=True,
        )
    pets = mem.memories(user_id="ann", metadata={"topic": "pets"})
    assert [m["text"] for m in pets] == ["Ann: I adopted a grey cat named Miso last week."]  # the turn as read
    assert pets[0]["metadata"] == {"topic": "pets", "app": "chat"}
    assert mem.memories(user_id="bob", metadata={"topic": "pets"}) == []  # bob's copy says travel
    assert [m["metadata"] for m in mem.memories(user_id="bob", metadata={"topic": "travel", "app": "chat"})] == [
        {"topic": "travel", "app": "chat"}
    ]
    family = mem.memories(user_id="ann", metadata={"topic": "family", "priority": 2})
    assert len(family) == 1 and "Lisbon" in family[0]["text"]
    facts = mem.memories(user_id="ann", kind="fact", metadata={"topic": "family"}, limit=100)
    assert facts and all("Lisbon" in f["text"] or "Lena" in f["text"] for f in facts)  # built from that turn only
    assert all("Miso" not in f["text"] for f in facts)
    # an update keeps the turn's metadata; the rebuilt session's units still match it
    mem.update(pets[0]["id"], "I adopted a black cat named Miso last week.", user_id="ann", conversation_id="c1")
    assert mem.memories(user_id="ann", metadata={"topic": "pets"})[0]["text"].startswith("Ann: I adopted a black cat")
    with pytest.raises(IngestError, match="metadata 'tags' must be a string, number or boolean"):
        mem.ingest([{"speaker": "Ann", "text": "Hi", "metadata": {"tags": ["a", "b"]}}], user_id="ann")
    with pytest.raises(ValueError, match="metadata filter must map names"):
        mem.memories(user_id="ann", metadata={"topic": ["pets"]})
    for user in ("ann", "bob"):
        assert_store_ok(mem.store, user)
    mem.close()
