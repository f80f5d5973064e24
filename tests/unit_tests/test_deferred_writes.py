"""Deferred writes: the raw turns now, what is derived from them after the reply (issue 53, item 3).

``ingest(..., defer=True)`` stores the raw turns and their views and returns; ``complete`` (or the next write of the
conversation) derives the rest; the middleware queues that derivation on the ``Memstrata``'s own thread, one
conversation's at a time and in order, and ``close`` and process exit wait for it. Every test starts from an empty
user, on real conversations (the example file, LoCoMo's first conversation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, LOCOMO, REPO, HashEmbeddings, assert_store_ok

from memstrata import Memstrata
from memstrata.memory.pending import pending_sessions

DERIVED = ("episode", "summary", "fact", "theme", "tree_node", "entity", "persona")
QUIET = timedelta(minutes=30)


def _units(mem: Memstrata, user: str) -> dict[str, list[tuple[str, str, str]]]:
    """(conversation, id, text) of every derived unit of the user, per kind."""
    return {
        kind: sorted((r.metadata["conversation_id"], r.unit_id, r.document) for r in mem.store.get(kind, user_id=user))
        for kind in DERIVED
    }


def _locomo(session: int, start: datetime, turns: range, *, silence_before: int | None = None) -> list[dict[str, Any]]:
    """Some turns of a session of LoCoMo's first conversation, a minute apart after ``start`` (40 minutes before
    turn ``silence_before``).
    """
    said = json.loads(LOCOMO.read_text())[0]["conversation"][f"session_{session}"]
    out, at = [], start
    for i in turns:
        at += timedelta(minutes=40 if i == silence_before else 1)
        out.append({"speaker": said[i]["speaker"], "text": said[i]["text"], "timestamp": at.isoformat()})
    return out


def _pending(mem: Memstrata, user: str, conv: str) -> list[str]:
    return pending_sessions(mem.store, user, conv, now=None, max_turns=12, quiet=QUIET, max_gap=QUIET).sessions


@pytest.fixture
def mem(tmp_path: Path) -> Memstrata:
    memory = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    yield memory
    memory.close()


# ---- (a) a deferred write stores the raw record and nothing derived -------------------------------------------
def test_a_deferred_write_stores_every_turn_and_its_view_and_derives_nothing(mem: Memstrata) -> None:
    said = json.loads(EXAMPLE.read_text())["messages"]
    stats = mem.ingest(EXAMPLE, user_id="ann", defer=True)
    turns = mem.store.get("turn", user_id="ann", conversation_id="priya-tom")
    assert sorted(r.payload["text"] for r in turns) == sorted(m["text"] for m in said)  # every message, verbatim
    views = mem.store.get("turn_context", user_id="ann", conversation_id="priya-tom")
    assert sorted(r.metadata["turn_id"] for r in views) == sorted(r.unit_id for r in turns)  # and each one's view
    assert all(mem.store.count(kind, user_id="ann") == 0 for kind in DERIVED)
    assert stats["turns_deferred"] == len(said) and stats["summaries_written"] == 0
    assert stats["deferred"] == [["priya-tom", s] for s in ("1", "2", "3")]
    assert set(stats["stage_seconds"]) == {"turns", "contexts"}
    assert _pending(mem, "ann", "priya-tom") == ["1", "2", "3"]  # the store alone says what is left
    assert mem.retrieve("Which neighbourhood did Priya pick?", user_id="ann").evidence  # the raw turns answer
    assert_store_ok(mem.store, "ann")


def test_a_write_that_closes_or_changes_a_stored_message_is_derived_at_once(mem: Memstrata) -> None:
    first = [{"id": "m1", "speaker": "Ann", "text": "I adopted a cat named Miso.", "timestamp": "2024-05-01T10:00"}]
    closing = mem.ingest(first, user_id="ann", conversation_id="c", defer=True, close=True)
    assert closing["turns_deferred"] == 0 and closing["summaries_written"] == 1
    changed = [{**first[0], "text": "I adopted a cat named Mochi."}]
    update = mem.ingest(changed, user_id="ann", conversation_id="c", defer=True)
    assert update["turns_deferred"] == 0 and "episodes" in update["stage_seconds"]
    assert "Mochi" in " ".join(d for _, _, d in _units(mem, "ann")["summary"])
    assert _pending(mem, "ann", "c") == []


# ---- (b) completion derives what an inline write derives --------------------------------------------------------
def test_completing_a_deferred_file_makes_the_units_of_an_inline_write(mem: Memstrata) -> None:
    mem.ingest(EXAMPLE, user_id="inline")
    stats = mem.ingest(EXAMPLE, user_id="deferred", defer=True)
    done = mem.complete(user_id="deferred", conversation_id="priya-tom", sessions=[s for _, s in stats["deferred"]])
    assert done["summaries_written"] > 0 and done["facts_written"] > 0
    deferred, inline = _units(mem, "deferred"), _units(mem, "inline")
    assert all(inline[k] for k in ("episode", "summary", "fact", "tree_node", "entity", "persona"))
    assert deferred == inline
    # idempotent, and cheap: nothing pending, nothing written
    again = mem.complete(user_id="deferred", conversation_id="priya-tom")
    assert again["sessions_touched"] == 0 and again["summaries_written"] == 0
    assert "episodes" not in again["stage_seconds"]
    assert _units(mem, "deferred") == inline
    # an inline write leaves nothing pending
    assert mem.complete(user_id="inline", conversation_id="priya-tom")["sessions_touched"] == 0
    assert_store_ok(mem.store, "deferred")


def test_a_chat_deferred_and_completed_message_by_message_is_the_inline_chat(mem: Memstrata) -> None:
    """Two sessions, a silence inside the first (an episode closes there), one message per write."""
    first = _locomo(1, datetime(2023, 5, 8, 13), range(18), silence_before=7)
    chat = first + _locomo(2, datetime(2023, 5, 12, 9), range(8))
    for message in chat:
        mem.ingest([message], user_id="inline", conversation_id="c")
        stats = mem.ingest([message], user_id="deferred", conversation_id="c", defer=True)
        if stats["deferred"]:
            assert mem.store.count("turn", user_id="deferred") == mem.store.count("turn", user_id="inline")
            mem.complete(user_id="deferred", conversation_id="c", sessions=[s for _, s in stats["deferred"]])
    deferred, inline = _units(mem, "deferred"), _units(mem, "inline")
    closed = [r for r in mem.store.get("episode", user_id="inline") if not r.payload["open"]]
    assert len(closed) >= 3 and inline["summary"] and inline["fact"]
    assert deferred == inline
    assert_store_ok(mem.store, "deferred")


# ---- (c) the middleware: the reply first, the derivation after it ----------------------------------------------
class GatedEmbeddings(HashEmbeddings):
    """Once ``armed``, embedding a summary (offline, it opens with its date in brackets) waits for ``release``: the
    derivation is held at its first summary, while raw turns, views and queries are embedded at once.
    """

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.release, self.held = threading.Event(), threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.armed and any(t.startswith("[") for t in texts):
            self.held.set()
            if not self.release.wait(timeout=120):
                msg = "the derivation was never released"
                raise TimeoutError(msg)
        return super().embed_documents(texts)


class Recording(Memstrata):
    """Logs when each derivation starts and ends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, str]] = []

    async def acomplete(self, *, user_id: str, conversation_id: str, **kwargs: Any) -> dict[str, Any]:
        self.log.append(("start", conversation_id))
        try:
            return await super().acomplete(user_id=user_id, conversation_id=conversation_id, **kwargs)
        finally:
            self.log.append(("end", conversation_id))


def _agent(mem: Memstrata, **settings: Any) -> Any:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from memstrata.integrations.middleware import MemstrataMiddleware
    from memstrata.testing import ScriptedChatModel

    middleware = MemstrataMiddleware(mem, user_id="ann", user_name="Ann", assistant_name="Ada", **settings)
    return create_agent(
        ScriptedChatModel(default="Noted."), tools=[], middleware=[middleware], checkpointer=InMemorySaver()
    )


def _said(text: str) -> dict[str, Any]:
    return {"messages": [("user", text)]}


def test_the_reply_returns_before_the_derivation_which_runs_in_order_and_close_flushes(tmp_path: Path) -> None:
    embedder = GatedEmbeddings()
    mem = Recording(path=tmp_path / "store", embeddings=embedder)
    agent, config = _agent(mem), {"configurable": {"thread_id": "t1"}}
    embedder.armed = True
    agent.invoke(_said("I adopted a cat named Miso."), config)
    assert embedder.held.wait(timeout=120)  # the reply is back while the derivation waits at its first summary
    assert mem.store.count("turn", user_id="ann", conversation_id="t1") == 2  # stored before the run ended
    assert mem.store.count("turn_context", user_id="ann", conversation_id="t1") == 2
    assert mem.store.count("summary", user_id="ann") == 0 and mem.queued(user_id="ann", conversation_id="t1") == 1
    agent.invoke(_said("She is grey and loves boxes."), config)  # the next turn queues behind the held one
    assert (
        mem.store.count("turn", user_id="ann", conversation_id="t1") == 4
        and mem.queued(user_id="ann", conversation_id="t1") == 2
    )
    embedder.release.set()
    mem.close()  # waits for both
    assert mem.queued() == 0
    assert mem.log == [("start", "t1"), ("end", "t1"), ("start", "t1"), ("end", "t1")]  # one at a time, in order
    assert mem.store.count("summary", user_id="ann") >= 1 and _pending(mem, "ann", "t1") == []
    assert_store_ok(mem.store, "ann")
    mem.close()


async def test_an_async_agent_returns_first_and_aclose_flushes(tmp_path: Path) -> None:
    embedder = GatedEmbeddings()
    mem = Memstrata(path=tmp_path / "store", embeddings=embedder)
    agent, config = _agent(mem), {"configurable": {"thread_id": "t1"}}
    embedder.armed = True
    await agent.ainvoke(_said("I adopted a cat named Miso."), config)
    assert embedder.held.wait(timeout=120) and mem.store.count("summary", user_id="ann") == 0
    assert mem.store.count("turn", user_id="ann", conversation_id="t1") == 2
    embedder.release.set()
    await mem.aclose()
    assert mem.queued() == 0 and mem.store.count("summary", user_id="ann") >= 1
    assert _pending(mem, "ann", "t1") == []
    assert_store_ok(mem.store, "ann")
    mem.close()


def test_derive_inline_keeps_the_write_inside_the_run(mem: Memstrata) -> None:
    _agent(mem, derive="inline").invoke(_said("I adopted a cat named Miso."), {"configurable": {"thread_id": "t1"}})
    assert mem.queued() == 0 and mem.store.count("summary", user_id="ann") == 1  # derived before invoke returned
    with pytest.raises(ValueError, match="derive must be"):
        _agent(mem, derive="later")


def test_the_background_chat_derives_what_the_inline_chat_derives(tmp_path: Path) -> None:
    """The same agent turns, with the background worker and inline: the same episodes, summaries and facts."""
    stores = {}
    for how in ("background", "inline"):
        mem = Memstrata(path=tmp_path / how, embeddings=HashEmbeddings())
        agent, config = _agent(mem, derive=how), {"configurable": {"thread_id": "t1"}}
        for text in ("I adopted a cat named Miso.", "I work as a nurse in Porto.", "I play the cello on Sundays."):
            agent.invoke(_said(text), config)
        mem.flush()
        episodes = sorted(
            (r.payload["start_position"], r.payload["end_position"], r.payload["open"])
            for r in mem.store.get("episode", user_id="ann")
        )
        texts = {k: sorted(r.document for r in mem.store.get(k, user_id="ann")) for k in ("summary", "fact")}
        stores[how] = (episodes, texts)
        assert_store_ok(mem.store, "ann")
        mem.close()
    assert stores["background"] == stores["inline"] and stores["inline"][1]["fact"]


# ---- (d) a kill loses no raw turn; the next write derives what was pending --------------------------------------
SCRIPT = r"""
import json, os, signal, sys
sys.path.insert(0, "tests")
from conftest import HashEmbeddings
from memstrata import Memstrata
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.invariants import check_store

folder, mode, steps = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

def digest(store):
    out = {}
    for kind in store.stored_kinds():
        rows = {}
        for r in store.get(kind, user_id="u", with_vectors=True):
            vector = [round(float(x), 6) for x in r.metadata["_vector"]]
            key = f"{r.metadata['conversation_id']}/{r.unit_id}"
            rows[key] = json.dumps([r.document, r.payload, vector], sort_keys=True)
        out[kind] = rows
    for name, table in (("edges", store.edges.table), ("counters", store.counters.table)):
        out[name] = {r.key: json.dumps(r.fields, sort_keys=True) for r in table.get(user_id="u")}
    return out

if mode == "kill-at":  # die at the first stored unit of this kind, in whatever thread stores it
    plain, kind = MemoryStore.upsert, sys.argv[4]
    def upsert(self, k, *args, **kwargs):
        if k == kind:
            os.kill(os.getpid(), signal.SIGKILL)
        return plain(self, k, *args, **kwargs)
    MemoryStore.upsert = upsert
mem = Memstrata(path=folder, embeddings=HashEmbeddings())
before = digest(mem.store) if mode == "next" else None
for messages, how in steps:
    stats = mem.ingest(messages, user_id="u", conversation_id="c", defer=how != "inline")
    if how == "background":
        mem.complete_later(user_id="u", conversation_id="c", sessions=[s for _, s in stats["deferred"]])
if mode in ("kill", "kill-at"):
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    mem.flush()  # kill-at: the background derivation dies in here
    sys.exit(3)  # it never should get here
if mode != "exit":  # "exit": leave with the derivation queued, no flush, no close
    mem.flush()
    problems = [str(p) for p in check_store(mem.store, "u")]
    print(json.dumps({"before": before, "after": digest(mem.store), "check": problems}))
"""


def _run(folder: Path, mode: str, steps: list[tuple[list[dict[str, Any]], str]], *extra: str) -> dict[str, Any] | int:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(folder), mode, json.dumps(steps), *extra],
        cwd=REPO,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
    )
    if mode in ("kill", "kill-at", "exit"):
        assert done.returncode in (-9, 0), done.stderr[-3000:]
        return done.returncode
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


A = _locomo(1, datetime(2023, 5, 8, 13), range(4))  # 13:01 to 13:04
B = _locomo(1, datetime(2023, 5, 8, 13, 4), range(4, 9), silence_before=4)  # from 13:44: A's episode is over
NEXT = _locomo(1, datetime(2023, 5, 8, 13, 48), range(9, 10))  # the same session, a minute after B
LATER = _locomo(2, datetime(2023, 5, 12, 9), range(3))  # days later: a new session
CASES = {
    # name: (what the killed process wrote, how it died, the next write, an inline run it must equal: the messages it
    # left underived and the next write's, in one write)
    "new-user-then-same-session": ([(A, "defer")], ["kill"], [(NEXT, "inline")], [(A + NEXT, "inline")]),
    "new-user-then-later-session": ([(A, "defer")], ["kill"], [(LATER, "inline")], [(A + LATER, "inline")]),
    "killed-in-the-background-derivation": (
        [(A + B, "background")],
        ["kill-at", "fact"],
        [(LATER, "inline")],
        [(A + B + LATER, "inline")],
    ),
    "silence-in-the-deferred-tail": (
        [(A, "inline"), (B, "defer")],
        ["kill"],
        [(NEXT, "inline")],
        [(A, "inline"), (B + NEXT, "inline")],
    ),
    "next-write-deferred-too": ([(A, "defer")], ["kill"], [(LATER, "background")], [(A + LATER, "inline")]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_killed_deferred_write_loses_no_turn_and_the_next_write_derives_it(tmp_path: Path, case: str) -> None:
    wrote, died, nxt, reference = CASES[case]
    assert _run(tmp_path / "killed", died[0], wrote, *died[1:]) == -9  # it really died, before deriving
    resumed = _run(tmp_path / "killed", "next", nxt)
    clean = _run(tmp_path / "clean", "ref", reference)["after"]
    crashed = resumed["before"]
    said = {m["text"] for messages, _ in wrote for m in messages}
    assert {json.loads(b)[1]["text"] for b in crashed["turn"].values()} == said  # no raw turn lost
    assert len(crashed["turn_context"]) == len(crashed["turn"])  # nor its view
    assert crashed != clean
    after = resumed["after"]
    for kind, rows in clean.items():
        assert after[kind].keys() == rows.keys(), f"{kind}: lost {rows.keys() - after[kind].keys()}"
        assert after[kind] == rows, kind
    assert clean["summary"] and clean["fact"]
    assert resumed["check"] == []


def test_a_normal_exit_waits_for_the_queued_derivation(tmp_path: Path) -> None:
    """No flush, no close: the process leaves with the derivation queued, and its exit derives it."""
    assert _run(tmp_path / "exited", "exit", [(A + B, "background")]) == 0
    left = _run(tmp_path / "exited", "next", [])
    clean = _run(tmp_path / "clean", "ref", [(A + B, "inline")])["after"]
    assert left["before"] == clean and clean["summary"] and left["check"] == []
