"""The wire path against a REAL OpenAI-compatible server (llama.cpp serving SmolLM2-135M on loopback).

A 135M model is often wrong in content: these tests assert on form and on the
trace, never on what the model says.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, TypedDict

import httpx
import pytest
from conftest import HashEmbeddings
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import HumanMessage, SystemMessage
from langgraph.graph import END, START, StateGraph
from plugins.llm_server import make_chat_model
from pydantic import BaseModel, Field

from memstrata import Memstrata
from memstrata.errors import LLMError
from memstrata.runtime.llm import GOOD_OUTCOMES, Meter, decide, stream_answer

pytestmark = pytest.mark.llm_server
logger = logging.getLogger(__name__)
FINAL_OUTCOMES = {*GOOD_OUTCOMES, "fallback"}


class Verdict(BaseModel):
    """Whether the context answers the question."""

    answerable: bool = Field(description="true if the context contains the answer")
    evidence_ids: list[int] = Field(default_factory=list, description="ids of the lines that hold the answer")


CONTEXT = "[1] Priya: I adopted a cat named Miso.\n[2] Tom: I started learning the cello.\n[3] Priya: I move to Lisbon."
QUESTIONS = ["What is Priya's cat called?", "What instrument does Tom play?", "Where does Priya move?"]
FALLBACK = Verdict(answerable=False, evidence_ids=[])


def offered(verdict: Verdict) -> Verdict:
    if any(i not in (1, 2, 3) for i in verdict.evidence_ids):
        msg = "evidence_ids must be among 1, 2, 3"
        raise ValueError(msg)
    return verdict


def assert_trace_consistent(meter: Meter) -> dict[str, Any]:
    summary = meter.summary()
    assert summary["calls"] == len(meter.calls) > 0
    assert summary["prompt_tokens"] > 0 and summary["completion_tokens"] > 0
    assert summary["prompt_tokens"] + summary["completion_tokens"] == meter.tokens
    assert set(summary["usage_sources"]) <= {"usage_metadata", "local_tokenizer"} and summary["usage_sources"]
    assert all(c.usage_source != "none" and c.seconds > 0 for c in meter.calls)
    return summary


async def test_decide_against_the_real_server(chat_model: Any) -> None:
    meter = Meter()
    results = []
    for question in QUESTIONS:
        value, outcome = await decide(
            chat_model,
            Verdict,
            "Decide whether the numbered context answers the question.",
            f"<context>\n{CONTEXT}\n</context>\n<question>{question}</question>",
            node="gate",
            fallback=lambda: FALLBACK,
            meter=meter,
            timeout=120,
            retries=1,
            validate=offered,
        )
        assert isinstance(value, Verdict) and outcome in FINAL_OUTCOMES
        assert value == FALLBACK or outcome in GOOD_OUTCOMES
        results.append(outcome)
    summary = assert_trace_consistent(meter)
    # Each decision leaves one final record, plus an "invalid" one when it needed a repair.
    assert [c.outcome for c in meter.calls if c.outcome != "invalid"] == results
    assert summary["outcomes"].get("invalid", 0) == sum(o in ("repaired", "fallback") for o in results)
    logger.warning("decide outcomes from SmolLM2: %s", json.dumps(summary["outcomes"]))


class Answer(TypedDict, total=False):
    question: str
    answer: str


async def test_stream_answer_streams_tokens_from_the_real_server(chat_model: Any) -> None:
    meter = Meter()

    async def answer(state: Answer) -> Answer:
        prompt = [SystemMessage("Answer in one short sentence."), HumanMessage(state["question"])]
        return {"answer": await stream_answer(chat_model, prompt, meter=meter, timeout=60)}

    builder = StateGraph(Answer)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    tokens: list[str] = []
    final: dict[str, Any] = {}
    async for mode, chunk in builder.compile().astream(
        {"question": "What colour is the sky?"}, stream_mode=["messages", "values"]
    ):
        if mode == "messages":
            tokens.append(chunk[0].content)
        else:
            final = chunk
    assert final["answer"].strip() and "".join(tokens) == final["answer"]
    assert len([t for t in tokens if t]) > 1, "the answer arrived in one piece, not streamed"
    call = meter.calls[0]
    assert (call.node, call.outcome) == ("answer", "ok")
    assert call.usage_source in ("usage_metadata", "local_tokenizer") and call.completion_tokens > 0
    logger.warning("stream usage source: %s", call.usage_source)


def small_conversation() -> list[dict[str, str]]:
    return [
        {
            "speaker": "Priya",
            "text": "I finally signed the lease. I'm moving to Lisbon at the end of April.",
            "timestamp": "2024-03-02T18:05:00",
        },
        {
            "speaker": "Tom",
            "text": "Congratulations! Which neighbourhood did you pick?",
            "timestamp": "2024-03-02T18:07:00",
        },
        {
            "speaker": "Priya",
            "text": "Alfama, close to the castle, with a balcony over the river.",
            "timestamp": "2024-03-02T18:09:00",
        },
        {"speaker": "Tom", "text": "Are you taking Miso with you?", "timestamp": "2024-03-02T18:11:00"},
        {
            "speaker": "Priya",
            "text": "Of course, the cat flies in the cabin with me.",
            "timestamp": "2024-03-02T18:13:00",
        },
        {
            "speaker": "Tom",
            "text": "By the way, I started learning the cello last week.",
            "timestamp": "2024-03-02T20:40:00",
        },
        {"speaker": "Priya", "text": "Nice! Who is your teacher?", "timestamp": "2024-03-02T20:42:00"},
        {
            "speaker": "Tom",
            "text": "A retired orchestra player called Ines, on Thursdays.",
            "timestamp": "2024-03-02T20:44:00",
        },
    ]


async def test_ingestion_in_llm_mode(chat_model: Any, tmp_path: Any) -> None:
    from memstrata import Memstrata

    mem = Memstrata(path=tmp_path / "chroma", model=chat_model)
    stats = await mem.aingest(small_conversation(), user_id="u", conversation_id="priya-tom", close=True)
    episodes = mem.store.count("episode", user_id="u")
    summaries = mem.store.count("summary", user_id="u")
    assert episodes > 0 and summaries == episodes
    llm = stats["llm"]
    assert llm["summarize"]["calls"] >= 1
    for node_stats in llm.values():
        assert node_stats["prompt_tokens"] > 0 and node_stats["usage_sources"]
        assert set(node_stats["outcomes"]) <= {*FINAL_OUTCOMES, "invalid", "error", "skipped_budget"}
    logger.warning("ingestion LLM outcomes: %s", {n: s["outcomes"] for n, s in llm.items()})
    # Parallel summarize branches and the segment node all report: one summarize call per episode at least.
    assert llm["summarize"]["calls"] >= episodes
    assert llm["segment"]["calls"] >= 1


class FirstToken(AsyncCallbackHandler):
    """Sets an event when the first token with text arrives.

    llama.cpp's first streamed chunk carries only the assistant role (an empty token), sent
    before the prompt is read; a test that waited for it could kill the server before any
    character was streamed.
    """

    def __init__(self) -> None:
        super().__init__()
        self.first_token = asyncio.Event()

    async def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        if token:
            self.first_token.set()


class RequestSent:
    """An HTTP client whose event is set once a request is written out and its reply is awaited.

    httpcore reports each step of a request to the ``trace`` extension; the client's request
    hook puts one on every request. ``receive_response_headers.started`` comes after the
    whole body is on the socket, so the request is then in flight, whatever the server does.
    """

    def __init__(self) -> None:
        self.sent = asyncio.Event()
        self.client = httpx.AsyncClient(timeout=120, event_hooks={"request": [self._hook]})

    async def _hook(self, request: httpx.Request) -> None:
        request.extensions["trace"] = self._trace

    async def _trace(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith("receive_response_headers.started"):
            self.sent.set()


class Story(BaseModel):
    """A long story."""

    title: str
    story: str = Field(description="a story of at least 500 words")


# SmolLM2's end tokens (<|endoftext|>, <|im_end|>): banning them keeps a stream going until it is killed.
ENDLESS = {0: -100, 2: -100}


async def test_a_server_killed_mid_call_ends_in_the_fallback_and_llm_error(llama_server_factory: Any) -> None:
    """Kill a private server while an answer streams and a decision waits behind it.

    llama.cpp serves one request at a time, so the decision is on the wire, queued
    behind the endless stream, when the process dies: both calls are in flight.
    """
    server = llama_server_factory()
    streaming, deciding = FirstToken(), RequestSent()
    meter = Meter()
    answer = asyncio.create_task(
        stream_answer(
            make_chat_model(server.base_url, logit_bias=ENDLESS, callbacks=[streaming]),
            [HumanMessage("Write a very long story about a cat who moves to Lisbon.")],
            meter=meter,
            timeout=30,
        )
    )
    await asyncio.wait_for(streaming.first_token.wait(), 60)
    decision = asyncio.create_task(
        decide(
            make_chat_model(server.base_url, http_async_client=deciding.client),
            Story,
            "You are a novelist.",
            "Write a story about a cat.",
            node="story",
            fallback=lambda: Story(title="fallback", story=""),
            meter=meter,
            timeout=60,
            retries=2,
        )
    )
    await asyncio.wait_for(deciding.sent.wait(), 30)  # the decision is on the wire, queued behind the stream
    assert not answer.done() and not decision.done()

    killed = time.monotonic()
    server.process.kill()
    with pytest.raises(LLMError, match=r"connection to the model failed after [1-9][0-9]* streamed characters"):
        await asyncio.wait_for(answer, 60)
    value, outcome = await asyncio.wait_for(decision, 60)
    assert time.monotonic() - killed < 30
    assert (value.title, outcome) == ("fallback", "error")
    records = {c.node: c for c in meter.calls}
    assert records["answer"].outcome == "error" and records["answer"].completion_tokens > 0
    assert records["story"].outcome == "error" and "Connection" in (records["story"].error or "")
    await deciding.client.aclose()


async def test_middleware_and_store_with_the_real_server(llama_server: str, tmp_path: Any) -> None:
    """An agent on the real llama.cpp model, with memstrata as its middleware and its store (memstrata offline)."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from memstrata.integrations.middleware import MemstrataMiddleware
    from memstrata.integrations.store import MemstrataStore

    mem = Memstrata(path=tmp_path / "chroma", embeddings=HashEmbeddings())
    store = MemstrataStore(mem)
    for i, message in enumerate(small_conversation()):
        await store.aput(("u", "chat"), f"m{i}", message)
    found = await store.asearch(("u",), query="Where is Priya moving?")
    assert found and all(item.namespace[0] == "u" for item in found)

    # An HTTP client of this test's own: langchain-openai shares one per URL, bound to the first test's event loop.
    model = make_chat_model(llama_server, http_async_client=httpx.AsyncClient(timeout=120))
    agent = create_agent(
        model,
        tools=[],
        checkpointer=InMemorySaver(),
        store=store,
        middleware=[MemstrataMiddleware(mem, user_id="u", context_budget=400)],
    )
    out = await agent.ainvoke(
        {"messages": [("user", "Where is Priya moving?")]}, {"configurable": {"thread_id": "live"}}
    )
    assert isinstance(out["messages"][-1].content, str)
    written = mem.store.get("turn", user_id="u", conversation_id="live")
    assert [r.payload["speaker"] for r in sorted(written, key=lambda r: r.payload["position"])][:1] == ["user"]


class LongText(BaseModel):
    """A long piece of text."""

    text: str = Field(description="a story of at least five hundred words")


async def test_a_model_instance_is_held_to_the_completion_cap(llama_server: str) -> None:
    """A model passed as an instance (no max_tokens of its own) still stops at the cap, structured or streamed:
    without it a small model can fill a schema's grammar until the context ends.
    """
    model, meter = make_chat_model(llama_server), Meter()
    assert model.max_tokens is None
    _, outcome = await decide(
        model,
        LongText,
        "Write what is asked.",
        "Write a long story about a cat.",
        node="cap",
        fallback=lambda: LongText(text=""),
        meter=meter,
        timeout=120.0,
        max_tokens=8,
    )
    assert outcome in FINAL_OUTCOMES
    assert all(0 < c.completion_tokens <= 8 for c in meter.calls if c.usage_source == "usage_metadata")
    await stream_answer(
        model, [HumanMessage("Write a long story about a cat.")], meter=meter, timeout=120.0, max_tokens=8
    )
    streamed = meter.calls[-1]  # llama.cpp sends no usage in a stream: the local tokenizer counts the text
    limit = 8 if streamed.usage_source == "usage_metadata" else 24  # MiniLM's pieces are not SmolLM2's
    assert 0 < streamed.completion_tokens <= limit


async def test_stage2_self_checks_with_the_real_server(chat_model: Any, minilm: Any, tmp_path: Any) -> None:
    """Stage II of xMemory with a real reader: each self-check is metered, and whatever SmolLM2 says (or fails to
    say), the trace's counts agree with the calls made and the evidence stays this user's.
    """
    from test_theme_retrieval import _conversation

    from memstrata import Memstrata

    mem = Memstrata(path=tmp_path / "chroma", embeddings=minilm)
    await mem.aingest(_conversation(), user_id="ann", close=True)  # themes built offline; the reader is the model
    result = await mem.aretrieve(
        "What do we know about Ann's cat Miso?",
        user_id="ann",
        context_budget=400,
        model=chat_model,
        experimental={"theme_stage2": True},
        max_iterations=0,
        llm_depth=None,  # Stage II's self-checks are sequential calls: no bound, so they all run
    )
    rounds = [e["stage2"] for e in result.trace["events"] if e["node"] == "lookup_level1" and "stage2" in e]
    assert rounds and all(0 < r["checked"] <= 4 and r["admitted"] <= r["checked"] for r in rounds)
    checks = result.trace["llm"]["per_node"]["stage2"]
    assert checks["calls"] == sum(r["checked"] for r in rounds)
    assert checks["fallbacks"] == sum(r["fallbacks"] for r in rounds)
    assert all(e.conversation_id == "ann-bo" for e in result.evidence)
    mem.close()


async def test_persona_calibration_and_the_persona_line_with_the_real_server(
    chat_model: Any, minilm: Any, tmp_path: Any
) -> None:
    """Bi-Mem's persona (Eq. 7) and calibration (Eq. 8) with SmolLM2, end to end: each call is counted with its
    outcome, a persona item cites only stored facts whatever the model wrote, and an inference question gets the
    persona line (the first session is written offline, so the speaker surely has facts).
    """
    from conftest import PORTO, session_messages
    from test_persona import LISBON

    from memstrata import Memstrata

    offline = Memstrata(path=tmp_path / "chroma", embeddings=minilm)
    await offline.aingest(
        {"conversation_id": "c", "messages": session_messages(1, "2024-01-10T10:00:00", PORTO)},
        user_id="ann",
        close=True,
    )
    offline.close()
    mem = Memstrata(
        path=tmp_path / "chroma",
        embeddings=minilm,
        model=chat_model,
        persona={"calibrations": 2, "llm_growth": 1.0},
        themes={"llm_calls": 1},
        tree={"llm_calls": 1},
    )  # rebuild at any new fact
    stats = await mem.aingest(
        {"conversation_id": "c", "messages": session_messages(2, "2024-03-05T10:00:00", LISBON)},
        user_id="ann",
        close=True,
    )
    per_node = stats["llm"]["persona"]["per_node"]
    assert 1 <= per_node["persona"]["calls"] <= 2 and per_node["calibrate"]["calls"] >= 1  # a repair is a call
    assert stats["persona_llm"] <= 1 - per_node["persona"]["fallbacks"]  # a fallback leaves the offline items
    # one call checks up to persona_calibration_batch (8) scenes; a scene the reply skips is not counted as checked
    assert stats["scenes_calibrated"] <= stats["scenes_checked"] <= 8 * per_node["calibrate"]["calls"]
    logger.warning("persona stage with SmolLM2: %s, %s", per_node, {k: v for k, v in stats.items() if "scene" in k})
    facts = {r.unit_id for r in mem.store.get("fact", user_id="ann")}
    for versions in mem.persona_history("Ann", user_id="ann").values():
        assert all({i.fact_id, *i.fact_ids} <= facts for v in versions for i in v.items)
    result = await mem.aretrieve(
        "Would Ann likely enjoy a landscape painting class?", user_id="ann", context_budget=400, max_iterations=0
    )
    assert result.trace["persona"]["included"] and result.context.startswith("[persona · Ann · ")
    mem.close()
