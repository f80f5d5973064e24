"""A chat turn in LLM mode: few sequential calls before the first answer token, tokens on every path, the chat
preset, statements over repeated questions, memory that adds what the thread lacks, and one citation form.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import EXAMPLE, HashEmbeddings
from langchain_core.messages import BaseMessage

from memstrata import Memstrata
from memstrata.graphs.retrieval import graph as retrieval
from memstrata.nodes.retrieve.depth import depth
from memstrata.runtime.llm import Meter, read_verdict, stream_checked
from memstrata.testing import ScriptedChatModel

QUERY = "Where does Priya work?"
ANSWER = "Priya works at Tidewater Labs as a data engineer [s1:t6]."
ROLES = {
    "plan memory lookups": "decompose",
    "chat user's question from summaries": "gate_check",
    "answer questions from summaries": "gate",
    "pick memory entries": "select_level1",
    "find what is still missing": "follow_up",
    "review whether a question": "reflect",
    "answer questions about past conversations": "answer",
}


class Chat:
    """A scripted model that logs the order of its calls; the self-check answers (light) or asks to search."""

    def __init__(self, *, light: bool) -> None:
        self.light = light
        self.order: list[str] = []
        self.model = ScriptedChatModel(default=self)

    def __call__(self, messages: list[BaseMessage]) -> Any:
        system = str(messages[0].content)
        node = next(n for role, n in ROLES.items() if role in system)
        self.order.append(node)
        return {
            "decompose": {"sub_queries": [{"id": "q1", "question": QUERY, "scope": "Short"}], "scope": "Short"},
            "gate_check": f"ANSWER\n{ANSWER}" if self.light else "SEARCH",
            "gate": {"finished": 0, "answer": ANSWER} if self.light else {"finished": 2, "answer": ""},
            "select_level1": {"ids": [0]},
            "follow_up": {"answer": "Tidewater Labs [s1:t6]", "missing": False, "query": ""},
            "reflect": {"finished": True, "new_question": ""},
            "answer": ANSWER,
        }[node]


@pytest.fixture
def mem(data_dir: str, hash_embeddings: Any) -> Memstrata:
    m = Memstrata(path=data_dir, embeddings=hash_embeddings)
    m.ingest(EXAMPLE, user_id="u")
    return m


async def _turn(mem: Memstrata, chat: Chat, **overrides: Any) -> tuple[list[str], int, Any]:
    """The streamed tokens, the model calls made when the first token arrived, and the result."""
    tokens: list[str] = []
    at_first: int | None = None
    result = None
    async for kind, value in mem.astream(QUERY, user_id="u", model=chat.model, **overrides):
        if kind == "token":
            at_first = len(chat.order) if at_first is None else at_first
            tokens.append(value)
        elif kind == "result":
            result = value
    assert at_first is not None, "no token was streamed"
    return tokens, at_first, result


async def test_light_path_streams_its_answer_after_two_calls(mem: Memstrata) -> None:
    chat = Chat(light=True)
    tokens, at_first, result = await _turn(mem, chat)
    assert chat.order == ["decompose", "gate_check"] and at_first == 2  # one plan, one streamed check + answer
    assert "".join(tokens) == ANSWER and len(tokens) > 1  # token by token, without the verdict line
    assert result.answer == ANSWER and result.trace["path"] == "light"
    assert result.trace["sequential_calls"] == 2 and result.evidence


async def test_one_plan_call_gives_sub_queries_scopes_and_time_windows(mem: Memstrata) -> None:
    plan = {
        "scope": "Short",
        "start_date": "2024-03-01",
        "end_date": "2024-03-31",
        "sub_queries": [
            {"id": "q1", "question": "Which company hired Priya?", "scope": "Long"},
            {"id": "q2", "question": "Where is its office?"},  # no scope: the rules label it
        ],
    }
    chat = Chat(light=True)
    model = ScriptedChatModel(default=lambda m: plan if "plan memory lookups" in str(m[0].content) else chat(m))
    result = await mem.aask(QUERY, user_id="u", model=model)
    assert chat.order == ["gate_check"]  # the plan was the only other call: no scope call
    scopes = next(e for e in result.trace["events"] if e["node"] == "predict_scope")["scopes"]
    assert scopes["q0"] == ["Short", "2024-03-01T00:00:00", "2024-03-31T23:59:59.999999"]
    assert scopes["q1"][0] == "Long" and scopes["q2"][0] in ("Short", "Long", "Mixed")
    assert result.trace["windows"]["q0"]  # the plan's window reached the tree


async def test_deep_path_reaches_its_answer_within_four_sequential_calls(mem: Memstrata) -> None:
    chat = Chat(light=False)
    tokens, at_first, result = await _turn(mem, chat)
    assert "".join(tokens) == ANSWER and result.trace["path"] == "deep" and at_first == len(chat.order)
    assert chat.order[:2] == ["decompose", "gate_check"] and chat.order[-1] == "answer"
    assert set(chat.order[2:-1]) == {"select_level1"}  # the batches, side by side: one wait
    assert result.trace["sequential_calls"] <= 4
    assert "follow_up" not in chat.order and "reflect" not in chat.order  # no room: their rules ran instead
    assert any(e["node"] == "follow_up" and e["how"] == "offline" for e in result.trace["events"])


async def test_without_a_depth_bound_the_deep_path_follows_up_and_reflects(mem: Memstrata) -> None:
    chat = Chat(light=False)
    tokens, _, result = await _turn(mem, chat, llm_depth=None)
    assert {"follow_up", "reflect"} <= set(chat.order) and "".join(tokens) == ANSWER
    assert result.trace["sequential_calls"] == 6  # plan, check, selection, follow-up, reflection, answer


async def test_the_published_algorithms_light_answer_streams_too(mem: Memstrata) -> None:
    chat = Chat(light=True)
    tokens, at_first, result = await _turn(mem, chat, retrieval={"light_check": "structured"}, llm_depth=None)
    assert chat.order == ["decompose", "gate", "reflect"] and at_first == 3  # reflection grades it first
    assert "".join(tokens) == ANSWER and len(tokens) > 1 and result.answer == ANSWER


async def test_messages_stream_carries_the_light_answer(mem: Memstrata) -> None:
    chat = Chat(light=True)
    chunks = [
        (message, meta)
        async for message, meta in retrieval.astream(
            {"query": QUERY}, context=mem.context(user_id="u", model=chat.model), stream_mode="messages"
        )
    ]
    text = "".join(str(m.content) for m, _ in chunks)
    assert text == ANSWER and "ANSWER\n" not in text
    assert {meta["langgraph_node"] for _, meta in chunks} == {"gate"}


async def test_chat_preset_makes_one_streamed_call(mem: Memstrata) -> None:
    chat = Chat(light=True)
    tokens, at_first, result = await _turn(mem, chat, llm_retrieval="chat")
    assert chat.order == ["answer"] and at_first == 1 and "".join(tokens) == ANSWER
    assert result.trace["sequential_calls"] == 1
    offline = mem.retrieve(QUERY, user_id="u")
    assert [e.turn_id for e in result.evidence] == [e.turn_id for e in offline.evidence]  # offline retrieval


async def test_retrieve_with_a_model_streams_nothing(mem: Memstrata) -> None:
    chat = Chat(light=True)
    ctx = mem.context(user_id="u", model=chat.model, generate_answer=False)
    chunks = [c async for c in retrieval.astream({"query": QUERY}, context=ctx, stream_mode="messages")]
    assert chunks == [] and "gate_check" not in chat.order and "gate" in chat.order


def test_depth_counts_parallel_branches_once() -> None:
    events = [
        {"node": "decompose", "calls": 1},
        {"node": "gate", "round": 1, "calls": 1},
        {"node": "select_level1", "round": 1, "calls": 1},
        {"node": "select_level1", "round": 1, "calls": 2},  # one branch was repaired
        {"node": "gate", "round": 2, "calls": 1},
        {"node": "backtrack_level2", "round": 1},
    ]
    assert depth(events) == 5


# ---- the streamed self-check -------------------------------------------------------------------------------


def test_read_verdict_forms() -> None:
    words = ["ANSWER", "SEARCH"]
    assert read_verdict("ANSWER: Pepper.", words) == ("ANSWER", 8)
    assert read_verdict("**SEARCH**\n", words) == ("SEARCH", 11)
    assert read_verdict("SEAR", words) is None  # not yet
    assert read_verdict("Pepper is the dog's name.", words) == (None, 0)
    assert read_verdict("ANSWER", words) is None and read_verdict("ANSWER", words, done=True) == ("ANSWER", 6)


async def test_stream_checked_stops_at_search_and_falls_back_without_a_verdict() -> None:
    meter = Meter()
    found = await stream_checked(
        ScriptedChatModel(script=["SEARCH and then many words the model should never finish"]),
        [],
        words=["ANSWER", "SEARCH"],
        answer_word="ANSWER",
        node="gate",
        meter=meter,
    )
    assert (found.verdict, found.answer, found.outcome) == ("SEARCH", "", "ok")
    assert meter.calls[0].completion_tokens < 5  # the stream was closed after the verdict
    found = await stream_checked(
        ScriptedChatModel(script=["Pepper is the dog's name."]),
        [],
        words=["ANSWER", "SEARCH"],
        answer_word="ANSWER",
        node="gate",
        meter=Meter(),
    )
    assert (found.verdict, found.outcome) == (None, "fallback")


async def test_a_check_without_verdict_falls_back_to_the_offline_gate(mem: Memstrata) -> None:
    chat = Chat(light=True)
    model = ScriptedChatModel(
        default=lambda m: "I think so." if "chat user's question" in str(m[0].content) else chat(m)
    )
    result = await mem.aask(QUERY, user_id="u", model=model)
    gate = next(e for e in result.trace["events"] if e["node"] == "gate")
    assert gate["how"] == "fallback" and result.answer == ANSWER  # the answer node wrote it from the raw turns


# ---- statements over questions -------------------------------------------------------------------------------


def test_a_repeated_question_yields_to_the_turn_that_answers_it(tmp_path) -> None:
    mem = Memstrata(path=tmp_path, embeddings=HashEmbeddings())
    chat = [
        ("Ann", "I adopted a dog last week, her name is Pepper."),
        ("bot", "Congratulations! Pepper is a lovely name."),
        ("Ann", "We went to the beach on Sunday."),
        ("Ann", "What's my dog called?"),
        ("bot", "Pepper."),
        ("Ann", "What is my dog called again?"),
        ("Ann", "Do you remember what my dog is called?"),
    ]
    for speaker, text in chat:
        mem.ingest([{"speaker": speaker, "text": text}], user_id="ann", conversation_id="c")
    result = mem.retrieve("What's my dog called?", user_id="ann", context_budget=300)
    texts = [e.text for e in result.evidence]
    assert texts[0] in {"I adopted a dog last week, her name is Pepper.", "Pepper."}
    assert "What's my dog called?" not in texts and "What is my dog called again?" not in texts  # folded
    asked = result.trace["asked_again"]
    assert asked["folded"] == 2 and asked["demoted"] == 1
    paraphrase = "Do you remember what my dog is called?"
    assert paraphrase not in texts or texts.index(paraphrase) > texts.index("Pepper.")


def test_statements_are_not_demoted() -> None:
    from memstrata.memory.query import Hit
    from memstrata.memory.search.selection import statements_first

    hits = [
        Hit(kind="turn", unit_id="a", conversation_id="c", score=0.9, text="Remind me where Priya works?"),
        Hit(kind="turn", unit_id="b", conversation_id="c", score=0.5, text="Priya works at Tidewater Labs."),
        Hit(kind="turn", unit_id="c", conversation_id="c", score=0.6, text="Did you know? Priya started at Tidewater."),
    ]
    kept, demoted, folded = statements_first(hits, QUERY)
    scores = {h.unit_id: h.score for h in kept}
    assert (demoted, folded) == (1, 0) and scores == {"a": 0.45, "b": 0.5, "c": 0.6}


# ---- integrations: the thread's own turns, and one citation form -----------------------------------------------


def test_middleware_memory_leaves_out_the_threads_own_turns(tmp_path) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import SystemMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from memstrata.integrations.middleware import MemstrataMiddleware

    mem = Memstrata(path=tmp_path, embeddings=HashEmbeddings())
    mem.ingest(
        [{"speaker": "user", "text": "My sister Lena lives in Ghent and teaches piano."}],
        user_id="u",
        conversation_id="old",
    )
    model = ScriptedChatModel(default="Noted.")
    agent = create_agent(
        model, tools=[], middleware=[MemstrataMiddleware(mem, user_id="u")], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [("user", "My sister Lena just got a cat.")]}, config)
    agent.invoke({"messages": [("user", "Where does my sister Lena live?")]}, config)
    system = next(str(m.content) for m in model.calls[-1] if isinstance(m, SystemMessage))
    memory = system.rsplit("<memory>", 1)[1]
    assert "Ghent" in memory  # older memory is there
    assert "just got a cat" not in memory and "Noted." not in memory  # the thread already shows these
    assert mem.store.count("turn", user_id="u", conversation_id="t1") == 4


def test_search_tool_cites_session_and_turn_not_message_ids(tmp_path) -> None:
    from memstrata.integrations.langchain import MemstrataRetriever, memory_search_tool

    mem = Memstrata(path=tmp_path, embeddings=HashEmbeddings())
    messages = [
        {"speaker": "user", "text": "I adopted a dog named Pepper.", "id": "6f1c2a7e-3b0d-4c1e-9f7a-2d5b8e4c1a90"},
        {"speaker": "assistant", "text": "Pepper is a lovely name!", "id": "0b9e4d2c-8a1f-4e6b-b3c5-7d2e9f0a1b34"},
    ]
    mem.ingest(messages, user_id="u", conversation_id="chat")
    text = memory_search_tool(mem, user_id="u").invoke({"query": "What is my dog called?"})
    assert "Pepper" in text and "6f1c2a7e" not in text and "0b9e4d2c" not in text
    assert text.startswith("[s") and "\nt0 user: I adopted a dog named Pepper." in text
    docs = MemstrataRetriever(memstrata=mem, user_id="u").invoke("What is my dog called?")
    assert {d.metadata["citation"] for d in docs} <= {"[s0:t0]", "[s0:t1]", "[s1:t0]", "[s1:t1]"}
    assert all(d.metadata["turn_id"] in {m["id"] for m in messages} for d in docs)


def test_search_tool_context_stays_in_its_budget(mem: Memstrata) -> None:
    from memstrata.integrations.langchain import memory_search_tool
    from memstrata.memory.tokens import TokenCounter

    text = memory_search_tool(mem, user_id="u", context_budget=120).invoke({"query": QUERY})
    assert 0 < TokenCounter().count(text) <= 120 and text.startswith("[s")


# ---- a real small model ----------------------------------------------------------------------------------------


@pytest.mark.llm_server
@pytest.mark.parametrize("settings", [{}, {"llm_retrieval": "chat"}], ids=["full", "chat"])
async def test_every_path_streams_with_the_real_server(chat_model: Any, tmp_path, settings: dict[str, Any]) -> None:
    # SmolLM's self-check may answer, search, or give no verdict at all: whichever path it takes, the answer
    # reaches the stream token by token, and the verdict never does.
    mem = Memstrata(path=tmp_path, embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="u")
    tokens: list[str] = []
    result = None
    async for kind, value in mem.astream(QUERY, user_id="u", model=chat_model, llm_timeout_s=60, **settings):
        if kind == "token":
            tokens.append(value)
        elif kind == "result":
            result = value
    assert result is not None and result.answer and "".join(tokens).strip() == result.answer.strip()
    assert len([t for t in tokens if t]) > 1 and not "".join(tokens).lstrip().upper().startswith(("ANSWER", "SEARCH"))
    assert result.trace["sequential_calls"] <= (1 if settings else 4 + 2)  # the full path: repairs may add two


async def test_the_agents_stream_holds_its_answer_and_nothing_of_memorys_model(data_dir: str) -> None:
    from langchain.agents import create_agent

    from memstrata.integrations.middleware import MemstrataMiddleware

    chat = Chat(light=True)
    mem = Memstrata(path=data_dir, embeddings=HashEmbeddings(), model=chat.model)  # memory in LLM mode
    mem.ingest(EXAMPLE, user_id="u")
    agent = create_agent(
        ScriptedChatModel(script=["Priya works at Tidewater Labs."]),
        tools=[],
        middleware=[MemstrataMiddleware(mem, user_id="u", write_back=False)],
    )
    tokens = [
        str(message.content)
        async for message, _meta in agent.astream({"messages": [("user", QUERY)]}, stream_mode="messages")
    ]
    assert "decompose" in chat.order  # memory's own model planned the search, out of sight
    assert "".join(tokens) == "Priya works at Tidewater Labs." and len([t for t in tokens if t]) > 1


# ---- the bench ---------------------------------------------------------------------------------------------------


async def test_the_chat_turn_bench_counts_the_waits() -> None:
    from memstrata_bench.chat_turn import run_chat_turn

    out = await run_chat_turn(latency_ms=20, modes=["light", "deep", "chat"], embeddings=HashEmbeddings())
    summary = {mode: row["summary"] for mode, row in out["modes"].items()}
    assert [summary[m]["sequential_calls_max"] for m in ("chat", "light", "deep")] == [1, 2, 4]
    assert [summary[m]["calls_before_first_token"] for m in ("chat", "light")] == [1, 2]
    assert summary["light"]["ttft_s"] >= 0.04 and summary["chat"]["ttft_s"] >= 0.02  # the injected waits
    assert all(t["answered"] for row in out["modes"].values() for t in row["turns"])
