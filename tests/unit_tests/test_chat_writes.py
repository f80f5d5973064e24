"""Chat apps write one message at a time: every message kept, a new user's first turns work, bounded cost.

Every test here starts from an empty user.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import HashEmbeddings, assert_store_ok
from langchain_core.messages import AIMessage, HumanMessage
from typer.testing import CliRunner

from memstrata import Memstrata
from memstrata.cli import app
from memstrata.testing import ScriptedChatModel

REPO = Path(__file__).resolve().parents[2]
CAT = ["I adopted a cat named Miso.", "She is grey and loves boxes.", "Tomorrow I fly to Lisbon."]


def _turns(mem: Memstrata, user: str, conv: str | None = None) -> list[tuple[str, int, str]]:
    """(session, position, text) of every stored turn, in conversation order."""
    recs = mem.store.get("turn", user_id=user, conversation_id=conv)
    return sorted((r.payload["session_id"], r.payload["position"], r.payload["text"]) for r in recs)


def _episodes(mem: Memstrata, user: str) -> list[tuple[int, int, bool]]:
    return sorted(
        (r.payload["start_position"], r.payload["end_position"], r.payload["open"])
        for r in mem.store.get("episode", user_id=user)
    )


@pytest.fixture
def mem(tmp_path: Path) -> Memstrata:
    return Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())


# ---- append semantics ------------------------------------------------------------------------------------
def test_three_messages_written_one_at_a_time_are_three_turns_and_the_cat_is_found(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "store")  # the packaged MiniLM, as a new user has it
    for i, text in enumerate(CAT):
        stats = mem.ingest(
            [{"speaker": "Ann", "text": text, "timestamp": f"2024-03-02T10:0{i}:00"}], user_id="u", conversation_id="c"
        )
        assert stats["turns_added"] == 1
    assert _turns(mem, "u") == [("1", 0, CAT[0]), ("1", 1, CAT[1]), ("1", 2, CAT[2])]
    found = mem.retrieve("What is the cat called?", user_id="u", context_budget=300)
    assert "Miso" in found.context
    assert_store_ok(mem.store, "u")


def test_a_retrieval_before_the_first_write_leaves_nothing_that_breaks_the_next(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "store")
    assert mem.retrieve("hello", user_id="new", context_budget=300).evidence == []
    mem.ingest([{"speaker": "Ann", "text": CAT[0], "id": "m1"}], user_id="new", conversation_id="c")
    found = mem.retrieve("What is the cat called?", user_id="new", context_budget=300)
    assert [e.turn_id for e in found.evidence] == ["m1"]
    again = Memstrata(path=tmp_path / "store")  # a second instance of the same process sees it too
    assert "Miso" in again.retrieve("What is the cat called?", user_id="new", context_budget=300).context


def test_ids_make_a_resend_change_nothing_and_an_update_by_id_replaces_the_text(mem: Memstrata) -> None:
    mem.ingest([{"speaker": "Ann", "text": "I live in Porto.", "id": "a"}], user_id="u")
    mem.ingest([{"speaker": "Ann", "text": "I work at a bakery.", "id": "b"}], user_id="u")
    assert mem.ingest([{"speaker": "Ann", "text": "I live in Porto.", "id": "a"}], user_id="u")["turns_added"] == 0
    mem.ingest([{"speaker": "Ann", "text": "I live in Lisbon now.", "id": "a"}], user_id="u")
    assert _turns(mem, "u") == [("1", 0, "I live in Lisbon now."), ("1", 1, "I work at a bakery.")]
    assert "Porto" not in json.dumps([r.document for r in mem.store.get("summary", user_id="u")])


def test_a_timed_message_sent_again_is_the_stored_one_and_an_untimed_one_is_appended(mem: Memstrata) -> None:
    timed = {"speaker": "Ann", "text": "ok", "timestamp": "2024-03-02T10:00:00"}
    mem.ingest([timed], user_id="u")
    mem.ingest([timed], user_id="u")
    assert len(_turns(mem, "u")) == 1
    mem.ingest([{"speaker": "Ann", "text": "ok"}], user_id="u")
    mem.ingest([{"speaker": "Ann", "text": "ok"}], user_id="u")
    # stamped with the write's time, long after 2024: a new session, where both are appended
    assert _turns(mem, "u") == [("1", 0, "ok"), ("2", 0, "ok"), ("2", 1, "ok")]


def test_a_silence_longer_than_the_session_gap_starts_a_new_session_across_calls(mem: Memstrata) -> None:
    for stamp, text in [("2024-03-02T10:00", "a"), ("2024-03-02T11:00", "b"), ("2024-03-03T09:00", "c")]:
        mem.ingest([{"speaker": "Ann", "text": text, "timestamp": stamp}], user_id="u")
    assert _turns(mem, "u") == [("1", 0, "a"), ("1", 1, "b"), ("2", 0, "c")]
    assert {r.unit_id for r in mem.store.get("turn", user_id="u")} == {"s1:t0", "s1:t1", "s2:t0"}


async def test_the_async_client_appends(mem: Memstrata) -> None:
    for text in CAT:
        await mem.aingest([{"speaker": "Ann", "text": text}], user_id="u", conversation_id="c")
    assert [t for _, _, t in _turns(mem, "u")] == CAT


def test_langchain_messages_without_ids_are_appended(mem: Memstrata) -> None:
    mem.ingest([HumanMessage("I adopted a cat named Miso.")], user_id="u")
    mem.ingest([AIMessage("What a lovely name!"), HumanMessage("She is grey.")], user_id="u")
    assert [(p, t) for _, p, t in _turns(mem, "u")] == [
        (0, "I adopted a cat named Miso."),
        (1, "What a lovely name!"),
        (2, "She is grey."),
    ]


def test_the_cli_appends_a_json_list_to_a_stored_conversation(tmp_path: Path) -> None:
    runner = CliRunner()
    for i, text in enumerate(CAT):
        path = tmp_path / f"m{i}.json"
        path.write_text(json.dumps([{"speaker": "Ann", "text": text}]))
        result = runner.invoke(app, ["ingest", str(path), "--user", "u", "--data-dir", str(tmp_path / "store")])
        assert result.exit_code == 0, result.output
    mem = Memstrata(path=tmp_path / "store")
    assert [t for _, _, t in _turns(mem, "u")] == CAT


# ---- open tails ------------------------------------------------------------------------------------------
def _chat(n: int, start: datetime, step: timedelta = timedelta(minutes=1)) -> list[dict[str, Any]]:
    return [
        {
            "speaker": "Ann" if i % 2 == 0 else "Bo",
            "text": f"Message number {i} about topic {i // 5}.",
            "timestamp": (start + i * step).isoformat(),
            "id": f"m{i}",
        }
        for i in range(n)
    ]


def test_closed_episodes_are_never_cut_again_and_the_tail_stays_open_until_done(mem: Memstrata) -> None:
    start = datetime(2024, 3, 2, 10, 0)
    messages = _chat(30, start)
    previous: list[tuple[int, int]] = []
    for i, m in enumerate(messages):  # a live chat: each message is written when it is sent
        mem.ingest([m], user_id="u", now=start + i * timedelta(minutes=1))
        eps = _episodes(mem, "u")
        assert sum(open_ for *_, open_ in eps) == 1  # exactly one open episode: the start of the tail
        # a message that closes nothing waits raw after it (no episode, summary or fact is rewritten for it)
        assert max(e for _, e, _ in eps) <= i
        assert max(e for _, e, o in eps if o) == max(e for _, e, _ in eps)
        closed = [(s, e) for s, e, o in eps if not o]
        assert set(closed) >= set(previous)  # what was closed stays as it was
        previous = closed
        assert all(e - s + 1 <= mem.context(user_id="u").episodes.max_turns + 1 for s, e, _ in eps)
    # quiet: an hour later, the next write closes the tail
    mem.ingest(
        [
            {
                "speaker": "Ann",
                "text": "Back again.",
                "id": "late",
                "timestamp": (start + timedelta(hours=1)).isoformat(),
            }
        ],
        user_id="u",
        now=start + timedelta(hours=1),
    )
    assert [o for s, e, o in _episodes(mem, "u") if e == 29] == [False]
    assert_store_ok(mem.store, "u")


def test_a_later_session_or_close_true_closes_the_tail(mem: Memstrata) -> None:
    start = datetime(2024, 3, 2, 10, 0)
    mem.ingest(_chat(4, start), user_id="u", now=start)
    assert [o for *_, o in _episodes(mem, "u")] == [True]
    mem.ingest(
        [{"speaker": "Ann", "text": "Next morning.", "timestamp": "2024-03-03T09:00"}],
        user_id="u",
        now=datetime(2024, 3, 3, 9, 0),
    )
    assert sorted((r.payload["session_id"], r.payload["open"]) for r in mem.store.get("episode", user_id="u")) == [
        ("1", False),
        ("2", True),
    ]  # session 1 is over once session 2 starts
    mem.ingest(
        [{"speaker": "Bo", "text": "Good morning.", "timestamp": "2024-03-03T09:01"}],
        user_id="u",
        now=datetime(2024, 3, 3, 9, 1),
        close=True,
    )
    assert all(not r.payload["open"] for r in mem.store.get("episode", user_id="u"))


def test_a_batch_gives_the_same_episodes_as_cutting_the_whole_session(mem: Memstrata, tmp_path: Path) -> None:
    from memstrata.memory.segmentation import segment_session

    source = REPO / "examples" / "conversation.json"
    mem.ingest(source, user_id="u", close=True)  # a finished record: every episode closes
    assert all(not r.payload["open"] for r in mem.store.get("episode", user_id="u"))
    ctx = mem.context(user_id="u")
    for session in {r.payload["session_id"] for r in mem.store.get("turn", user_id="u")}:
        recs = sorted(
            mem.store.get("turn", user_id="u", where={"session_id": session}, with_vectors=True),
            key=lambda r: r.payload["position"],
        )
        spans = segment_session(
            [r.metadata["_vector"] for r in recs],
            [datetime.fromisoformat(r.payload["timestamp"]) for r in recs],
            max_turns=ctx.episodes.max_turns,
            min_turns=ctx.episodes.min_turns,
            overlap=ctx.episodes.overlap,
            max_gap=timedelta(minutes=ctx.episodes.max_gap_minutes),
            window=ctx.episodes.window,
            depth=ctx.episodes.depth,
        )
        stored = sorted(
            (r.payload["start_position"], r.payload["end_position"])
            for r in mem.store.get("episode", user_id="u", where={"session_id": session})
        )
        assert stored == sorted(spans)


def test_an_open_episode_is_searchable_and_the_evidence_says_it_is_open(mem: Memstrata) -> None:
    now = datetime(2024, 3, 2, 10, 5)
    mem.ingest([{"speaker": "Ann", "text": CAT[0], "timestamp": "2024-03-02T10:00", "id": "m1"}], user_id="u", now=now)
    found = mem.retrieve("What is the cat called?", user_id="u", context_budget=300)
    assert [(e.turn_id, e.open_episode) for e in found.evidence] == [("m1", True)]
    assert found.trace["open_episode_turns"] == ["m1"]
    assert mem.store.count("entity", user_id="u") == 0  # entities wait for the episode to close
    mem.ingest(
        [{"speaker": "Ann", "text": "Bye.", "timestamp": "2024-03-02T10:01", "id": "m2"}], user_id="u", close=True
    )
    found = mem.retrieve("What is the cat called?", user_id="u", context_budget=300)
    assert not any(e.open_episode for e in found.evidence)
    assert mem.store.count("entity", user_id="u") > 0


# ---- the model's cost per message ------------------------------------------------------------------------
def test_with_a_model_each_message_costs_the_same_however_long_the_session(tmp_path: Path) -> None:
    model = ScriptedChatModel(
        default=lambda messages: {"starts": [], "keywords": ["k"], "facts": [], "replaced": [], "summary": "s"}
    )
    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings(), model=model)
    start = datetime(2024, 3, 2, 10, 0)
    sizes: list[int] = []
    for i, m in enumerate(_chat(36, start)):
        before = len(model.calls)
        mem.ingest([m], user_id="u", now=start + i * timedelta(minutes=1))
        sizes.append(sum(len(str(msg.content)) for call in model.calls[before:] for msg in call))
    calls = len(model.calls)
    assert calls <= 2 * 36  # at most two model calls a message on average
    first, last = sum(sizes[:12]), sum(sizes[-12:])
    assert last <= 1.5 * first  # no growth with the session's length
    assert_store_ok(mem.store, "u")


# ---- a brand-new user through every LangChain entry point ------------------------------------------------
def test_a_new_users_agent_with_the_middleware_works_for_five_turns_and_cites_the_first(mem: Memstrata) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import SystemMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from memstrata.integrations.middleware import MemstrataMiddleware

    model = ScriptedChatModel(default="Noted.")
    agent = create_agent(
        model,
        tools=[],
        checkpointer=InMemorySaver(),
        middleware=[MemstrataMiddleware(mem, user_id="bob", user_name="Bob", assistant_name="Ada")],
    )
    said = [
        "I adopted a cat named Miso.",
        "I work as a nurse.",
        "I live in Porto.",
        "I play the cello.",
        "What is my cat called?",
    ]
    for i, text in enumerate(said):  # retrieve before the first write, then write after each turn
        # the question comes in a new thread: in its own thread the turns are already in the messages, and the
        # middleware leaves them out of the memory it adds
        thread = "t2" if i == len(said) - 1 else "t1"
        agent.invoke({"messages": [("user", text)]}, {"configurable": {"thread_id": thread}})
    system = next(str(m.content) for m in model.calls[-1] if isinstance(m, SystemMessage))
    memory = system.split("<memory>\n")[1].split("</memory>")[0]
    first = next(line for line in memory.splitlines() if "Miso" in line)
    assert first.startswith("[s1:t0 · ") and "Bob: I adopted a cat named Miso." in first
    turns = mem.store.get("turn", user_id="bob", conversation_id="t1")
    assert len(turns) == 8 and {r.payload["speaker"] for r in turns} == {"Bob", "Ada"}
    assert len(mem.store.get("turn", user_id="bob", conversation_id="t2")) == 2
    assert all(r.payload["timestamp"] for r in turns)  # each message got its time
    assert "-" not in "".join(line.split("]")[0] for line in memory.splitlines() if line.startswith("["))  # no UUIDs
    mem.flush()  # the last turns' derivations run after the replies
    assert_store_ok(mem.store, "bob")


def test_a_new_user_through_the_store_adapter_recalls_then_remembers(mem: Memstrata) -> None:
    from typing import TypedDict

    from langgraph.graph import START, StateGraph
    from langgraph.store.base import BaseStore

    from memstrata.integrations.store import MemstrataStore

    class State(TypedDict, total=False):
        text: str
        recalled: list[str]

    def recall_then_remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        found = [i.value["text"] for i in store.search(("new",), query=state["text"], limit=5)]
        store.put(
            ("new", "chat"), f"m{len(found)}-{abs(hash(state['text']))}", {"speaker": "Ann", "text": state["text"]}
        )
        return {"recalled": found}

    graph = (
        StateGraph(State)
        .add_node("step", recall_then_remember)
        .add_edge(START, "step")
        .compile(store=MemstrataStore(mem))
    )
    out = [graph.invoke({"text": t})["recalled"] for t in [*CAT, "What is the cat called?"]]
    assert out[0] == [] and any("Miso" in t for t in out[-1])
    assert [t for _, _, t in _turns(mem, "new")] == [*CAT, "What is the cat called?"]
    assert_store_ok(mem.store, "new")


def test_a_new_user_through_the_retriever_and_the_tool(mem: Memstrata) -> None:
    from memstrata.integrations.langchain import MemstrataRetriever, memory_search_tool

    retriever = MemstrataRetriever(memstrata=mem, user_id="fresh", k=3)
    tool = memory_search_tool(mem, user_id="fresh")
    assert retriever.invoke("Where is Ann flying?") == []
    tool.invoke({"query": "Where is Ann flying?"})
    for text in CAT:
        mem.ingest([{"speaker": "Ann", "text": text}], user_id="fresh")
        assert any(text == d.page_content.split(": ", 1)[-1] for d in retriever.invoke(text))
    assert "Lisbon" in tool.invoke({"query": "Where is Ann flying?"})


# ---- two processes appending to one conversation through a Chroma server ---------------------------------
APPENDER = r"""
import sys
sys.path.insert(0, "tests")
from conftest import HashEmbeddings, assert_store_ok
from memstrata import Memstrata
url, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
mem = Memstrata(url=url, embeddings=HashEmbeddings())
for i in range(n):
    mem.ingest([{"speaker": name, "text": f"{name} says {i}"}], user_id="two", conversation_id="c")
"""


def test_two_processes_appending_to_one_conversation_store_every_message_once_in_order(chroma_server) -> None:
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "ANONYMIZED_TELEMETRY": "False",
        "PATH": "/usr/bin:/bin",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, chroma_server.url, name, "12"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("Ann", "Bo")
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    mem = Memstrata(url=chroma_server.url, embeddings=HashEmbeddings())
    turns = _turns(mem, "two", "c")
    assert sorted(t for *_, t in turns) == sorted(f"{n} says {i}" for n in ("Ann", "Bo") for i in range(12))
    assert [p for _, p, _ in turns] == list(range(24))  # 24 distinct positions, none taken twice
    for name in ("Ann", "Bo"):  # each writer's messages in the order it sent them
        assert [t for *_, t in turns if t.startswith(name)] == [f"{name} says {i}" for i in range(12)]
    assert_store_ok(mem.store, "two")


# Two writers of one conversation through a Chroma server read, cut and write in turn; what one deletes after the
# other read it must not stay linked. The two tests below put one such interleaving in order on purpose.
def test_a_summary_deleted_by_another_writer_while_the_tree_is_written_leaves_no_node_or_edge(
    mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstrata.memory.store.invariants import check_store
    from memstrata.memory.tree import persist
    from memstrata.nodes.ingest import episodes as episode_stage
    from memstrata.nodes.ingest import tree as tree_stage

    deleted: list[str] = []

    def save_after_another_writer(store: Any, update: Any, units: Any) -> int:
        if not deleted:  # the other writer re-cuts the first episode, between this tree's read and its write
            first = min(update.summaries.values(), key=lambda s: s.episode_id)
            old = store.get("episode", user_id="u", conversation_id="c", unit_ids=[first.episode_id])
            episode_stage._drop_stale(store, "u", "c", old, [])
            deleted.append(first.id)
        return persist.save_tree(store, update, units)

    monkeypatch.setattr(tree_stage, "save_tree", save_after_another_writer)
    mem.ingest(_chat(12, datetime(2024, 3, 4, 10, 0)), user_id="u", conversation_id="c", close=True)
    assert deleted
    held = {c for r in mem.store.get("tree_node", user_id="u") for c in r.payload["children"]}
    assert deleted[0] not in held
    left = [e for e in mem.store.edges.get("u", conversation_id="c") if deleted[0] in (e.src, e.dst)]
    assert left == []
    # The tree is whole. The deleted episode's facts are still named by entities and themes here: the other
    # writer, which deleted them, redoes those stages after its delete (the next test shows it is told to).
    broken = [p for p in check_store(mem.store, "u") if "tree" in p.unit or "child_of" in p.unit]
    assert broken == []


def test_a_write_that_deletes_an_episode_another_writer_closed_redoes_the_conversations_tree_and_graph(
    mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstrata.nodes.ingest import episodes as episode_stage

    start = datetime(2024, 3, 4, 10, 0)
    first = [*_chat(3, start), {"speaker": "Bo", "text": "Back after lunch.", "timestamp": "2024-03-04T13:00:00"}]
    mem.ingest(first, user_id="u", conversation_id="c", now=datetime(2024, 3, 4, 13, 1))
    assert _episodes(mem, "u") == [(0, 2, False), (2, 3, True)]  # the time gap closed the first, placed in the tree
    placed = mem.store.get("episode", user_id="u", conversation_id="c", where={"open": False})[0]
    stale_copy = dataclasses.replace(
        placed, metadata={**placed.metadata, "open": True, "payload": json.dumps({**placed.payload, "open": True})}
    )
    real, seen = episode_stage._drop_stale, []

    def read_before_it_closed(store: Any, user_id: str, conv_id: str, old: list[Any], keep: list[Any]) -> Any:
        # this writer read the episodes while the first was still open, then cut it again and drops it
        out = real(store, user_id, conv_id, [*old, stale_copy], keep)
        seen.append(out[2])
        return out

    plain = mem.ingest([{"speaker": "Ann", "text": "Lunch was fine."}], user_id="u", conversation_id="c")
    assert plain["entities_written"] == 0  # an append that closes nothing redoes nothing
    monkeypatch.setattr(episode_stage, "_drop_stale", read_before_it_closed)
    # close=True: a write that cuts the tail (an append that closes nothing never reads the episodes)
    mem.ingest([{"speaker": "Bo", "text": "Good to hear."}], user_id="u", conversation_id="c", close=True)
    assert seen == [True]  # the delete found it closed: the tree and graph are redone
    held = {c for r in mem.store.get("tree_node", user_id="u") for c in r.payload["children"]}
    assert placed.payload["summary_id"] not in held
    assert_store_ok(mem.store, "u")


def test_with_a_model_a_tree_window_still_receiving_messages_is_consolidated_once_it_closes(tmp_path: Path) -> None:
    model = ScriptedChatModel(
        default=lambda messages: {
            "starts": [],
            "keywords": ["k"],
            "facts": [],
            "replaced": [],
            "summary": "consolidated",
        }
    )
    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings(), model=model)

    def weeks() -> dict[str, str]:
        return {
            r.payload["window"]: r.payload["method"]
            for r in mem.store.get("tree_node", user_id="u")
            if r.payload["level"] == "week"
        }

    monday = datetime(2024, 3, 4, 10, 0)
    mem.ingest(_chat(6, monday), user_id="u", now=monday, close=True)
    assert weeks() == {"2024-W10": "extractive"}  # the week still holds the newest turn: no model call yet
    later = monday + timedelta(days=7)
    mem.ingest([{**m, "id": f"n{i}"} for i, m in enumerate(_chat(6, later))], user_id="u", now=later, close=True)
    assert weeks() == {"2024-W10": "llm", "2024-W11": "extractive"}  # closed: consolidated by the model, once


# ---- inspect shows each conversation's own summaries ---------------------------------------------------
def test_inspect_shows_each_conversations_own_summaries_in_text_and_html(tmp_path: Path) -> None:
    from memstrata.views.pages import memory_page

    store = tmp_path / "store"
    mem = Memstrata(path=store)
    said = {
        "c1": ["I planted tomatoes in the garden.", "The tomatoes need water daily."],
        "c2": ["My violin lesson moved to Friday.", "The violin teacher is strict."],
    }
    for conv, texts in said.items():  # both conversations get the same episode id, ep:s1:0-1
        mem.ingest([{"speaker": "Ann", "text": t} for t in texts], user_id="u", conversation_id=conv, close=True)
    runner = CliRunner()
    for conv, other in (("c1", "c2"), ("c2", "c1")):
        shown = runner.invoke(app, ["inspect", "--user", "u", "-c", conv, "--data-dir", str(store)]).output
        assert said[conv][0].split()[1] in shown and said[other][0].split()[1] not in shown
    whole = runner.invoke(app, ["inspect", "--user", "u", "--data-dir", str(store)], terminal_width=300).output
    c1, c2 = whole.index("c1 ·"), whole.index("c2 ·")
    assert "tomatoes" in whole[c1:c2] and "violin" not in whole[c1:c2] and "violin" in whole[c2:]
    page = memory_page(mem.store, user_id="u")
    assert page.index("tomatoes") < page.index("c2") < page.index("violin")


# ---- counters never outlive their unit -------------------------------------------------------------------
def test_a_deleted_unit_takes_its_counters_and_a_late_reinforcement_of_one_is_dropped(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    monday = datetime(2024, 3, 4, 10, 0)
    mem.ingest(_chat(12, monday), user_id="u", now=monday + timedelta(days=30), close=True)
    counted = {(c.conversation_id, c.kind, c.unit_id) for c in mem.store.counters.all("u", kind="summary")}
    assert len(counted) >= 2  # the tree reinforced the closed episodes' summaries
    (conv, kind, first), *rest = sorted(counted)
    mem.store.delete(kind, user_id="u", conversation_id=conv, unit_ids=[first])
    after = {(c.conversation_id, c.kind, c.unit_id) for c in mem.store.counters.all("u", kind="summary")}
    assert after == set(rest)
    # a writer that reinforces a summary another process has just deleted: its check drops that counter only
    mem.store.counters.reinforce("u", [(conv, kind, first)], at=monday.timestamp())
    assert mem.store.drop_orphan_counters("u", [(conv, kind, first), *rest]) == 1
    assert {(c.conversation_id, c.kind, c.unit_id) for c in mem.store.counters.all("u", kind="summary")} == set(rest)
