"""`decide` and `stream_answer` against scripted bad output, broken transports and budgets (no network)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import httpx
import httpx2
import openai
import pytest
from langchain_core.exceptions import ModelConnectionError
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel, Field

from memstrata.errors import LLMError
from memstrata.runtime.llm import Meter, decide, extract_json, is_transient, stream_answer
from memstrata.testing import ScriptedChatModel


class Pick(BaseModel):
    """Ids of the relevant items."""

    ids: list[int] = Field(description="chosen item ids")
    reason: str = ""


FALLBACK = Pick(ids=[], reason="fallback")


def only_offered(pick: Pick) -> Pick:
    if any(i not in (1, 2, 3) for i in pick.ids):
        msg = "ids must be among 1, 2, 3"
        raise ValueError(msg)
    return pick


async def run(model: Any, *, meter: Meter | None = None, **kwargs: Any) -> tuple[Pick, str, Meter]:
    meter = meter or Meter()
    kwargs = {"timeout": 5.0, "retries": 2, **kwargs}
    value, outcome = await decide(
        model, Pick, "Pick ids.", "Items: 1, 2, 3", node="pick", fallback=lambda: FALLBACK, meter=meter, **kwargs
    )
    return value, outcome, meter


def outcomes(meter: Meter) -> list[str]:
    return [c.outcome for c in meter.calls]


def conn_error() -> openai.APIConnectionError:
    return openai.APIConnectionError(request=httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions"))


class ThreadedModel(ScriptedChatModel):
    """Runs the script off the event loop, as real clients do, so a slow reply can time out."""

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return await asyncio.to_thread(self._generate, messages, stop)


class StreamModel(ScriptedChatModel):
    """Streams fixed chunks, then optionally reports usage, fails, or goes silent."""

    chunks: list[str] = Field(default_factory=lambda: ["Miso ", "is ", "a ", "cat."])
    usage: dict[str, int] | None = None
    then: Any = None  # an exception to raise, or seconds to hang, after the chunks

    async def _astream(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None, **kwargs: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        for text in self.chunks:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
            if run_manager:
                await run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk
        if isinstance(self.then, BaseException):
            raise self.then
        if isinstance(self.then, (int, float)):
            await asyncio.sleep(self.then)
        if self.usage:
            yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=self.usage))


# ---- decide: good and recoverable output --------------------------------------------------


async def test_valid_tool_call_is_ok() -> None:
    value, outcome, meter = await run(ScriptedChatModel(script=[{"ids": [1, 3]}]))
    assert (value.ids, outcome, outcomes(meter)) == ([1, 3], "ok", ["ok"])
    assert meter.calls[0].usage_source == "local_tokenizer"
    assert meter.calls[0].prompt_tokens > 0 and meter.calls[0].completion_tokens > 0


async def test_json_in_prose_is_parsed_text() -> None:
    reply = 'Sure! Here it is:\n```json\n{"ids": [2], "reason": "cat"}\n```\nAnything else?'
    value, outcome, _ = await run(ScriptedChatModel(script=[reply]))
    assert (value.ids, outcome) == ([2], "parsed_text")


async def test_object_wrapped_in_schema_name_is_unwrapped() -> None:
    value, outcome, _ = await run(ScriptedChatModel(script=[{"Pick": {"ids": [3]}}]))
    assert (value.ids, outcome) == ([3], "ok")


async def test_usage_metadata_is_preferred_over_the_local_tokenizer() -> None:
    usage = {"input_tokens": 40, "output_tokens": 7, "total_tokens": 47}
    reply = AIMessage("", tool_calls=[{"name": "Pick", "args": {"ids": [1]}, "id": "c1"}], usage_metadata=usage)
    _, outcome, meter = await run(ScriptedChatModel(script=[reply]))
    call = meter.calls[0]
    assert (outcome, call.prompt_tokens, call.completion_tokens, call.usage_source) == ("ok", 40, 7, "usage_metadata")


async def test_invalid_then_valid_is_repaired_and_the_repair_names_the_error() -> None:
    model = ScriptedChatModel(script=[{"ids": "first and third"}, {"ids": [1, 3]}])
    value, outcome, meter = await run(model)
    assert (value.ids, outcome, outcomes(meter)) == ([1, 3], "repaired", ["invalid", "repaired"])
    repair_prompt = model.calls[1][-1]
    assert isinstance(repair_prompt, HumanMessage) and "ids" in repair_prompt.text and "invalid" in repair_prompt.text


async def test_out_of_range_ids_are_rejected_by_validate_then_repaired() -> None:
    model = ScriptedChatModel(script=[{"ids": [1, 99]}, {"ids": [2]}])
    value, outcome, meter = await run(model, validate=only_offered)
    assert (value.ids, outcome, outcomes(meter)) == ([2], "repaired", ["invalid", "repaired"])
    assert "among 1, 2, 3" in model.calls[1][-1].text


async def test_validate_may_return_none_and_keep_the_value() -> None:
    value, outcome, _ = await run(ScriptedChatModel(script=[{"ids": [2]}]), validate=lambda p: None)
    assert (value.ids, outcome) == ([2], "ok")


async def test_validate_indexing_errors_count_as_invalid_output() -> None:
    offered = ["a", "b"]
    model = ScriptedChatModel(script=[{"ids": [7]}, {"ids": [9]}])
    value, outcome, _ = await run(model, validate=lambda p: p.model_copy(update={"reason": offered[p.ids[0]]}))
    assert (value, outcome) == (FALLBACK, "fallback")


# ---- decide: garbage ends in the fallback, never in a crash -----------------------------


GARBAGE = {
    "invalid json text": '{"ids": [1, 2,, "reason": }',
    "missing keys": {"reason": "no ids at all"},
    "wrong types": {"ids": {"one": 1}, "reason": 5},
    "empty string": "",
    "10 kB ramble": ("Well, let me think about this carefully. { maybe } " * 200)[:10_000],
    "garbage tool args": AIMessage(
        "",
        invalid_tool_calls=[
            {"name": "Pick", "args": "{ids: [1, 2", "id": "c1", "error": "bad json", "type": "invalid_tool_call"}
        ],
    ),
    "json array": "[1, 2, 3]",
    "null args": {"ids": None},
}


@pytest.mark.parametrize("reply", GARBAGE.values(), ids=GARBAGE.keys())
async def test_garbage_twice_ends_in_the_fallback(reply: Any) -> None:
    model = ScriptedChatModel(script=[reply, reply])
    started = time.monotonic()
    value, outcome, meter = await run(model)
    assert (value, outcome, outcomes(meter)) == (FALLBACK, "fallback", ["invalid", "fallback"])
    assert len(model.calls) == 2 and time.monotonic() - started < 5
    assert all(c.error for c in meter.calls)
    assert len(model.calls[1][-2].text) <= 2000  # the bad reply shown back to the model is capped


async def test_a_ten_kilobyte_ramble_then_valid_json_is_repaired() -> None:
    model = ScriptedChatModel(script=["blah " * 2000, 'ok: {"ids": [3]}'])
    value, outcome, _ = await run(model)
    assert (value.ids, outcome) == ([3], "repaired")


def test_extract_json_survives_unbalanced_and_nested_braces() -> None:
    assert extract_json("}{ not json { still not") is None
    assert extract_json('noise {"a": {"b": [1, {"c": 2}]}} tail') == {"a": {"b": [1, {"c": 2}]}}
    assert extract_json('{bad} then {"ok": true}') == {"ok": True}


# ---- decide: transport errors, timeouts, budgets -----------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        conn_error(),
        httpx2.ReadError("reset"),
        httpx.ConnectError("refused"),
        ConnectionResetError("reset"),
        TimeoutError(),
    ],
    ids=["openai", "httpx2", "httpx", "builtin", "timeout"],
)
async def test_a_transport_error_then_success_is_retried(error: BaseException) -> None:
    model = ScriptedChatModel(script=[error, {"ids": [1]}])
    value, outcome, meter = await run(model)
    assert (value.ids, outcome, outcomes(meter), len(model.calls)) == ([1], "ok", ["ok"], 2)


async def test_repeated_transport_errors_end_in_the_fallback() -> None:
    model = ScriptedChatModel(script=[conn_error()] * 5)
    value, outcome, meter = await run(model, retries=2)
    assert (value, outcome, outcomes(meter), len(model.calls)) == (FALLBACK, "error", ["error"], 3)
    assert "APIConnectionError" in (meter.calls[0].error or "")


async def test_non_transport_errors_are_not_retried() -> None:
    bad_request = openai.BadRequestError(
        "context too long", response=httpx2.Response(400, request=httpx2.Request("POST", "http://x")), body=None
    )
    model = ScriptedChatModel(script=[bad_request, {"ids": [1]}])
    value, outcome, _ = await run(model)
    assert (value, outcome, len(model.calls)) == (FALLBACK, "error", 1)


async def test_a_slow_model_times_out_into_the_fallback() -> None:
    def slow(messages: list[BaseMessage]) -> dict[str, Any]:
        time.sleep(1.0)
        return {"ids": [1]}

    started = time.monotonic()
    value, outcome, meter = await run(ThreadedModel(script=[slow]), timeout=0.1, retries=0)
    assert (value, outcome) == (FALLBACK, "error")
    assert time.monotonic() - started < 0.9
    assert "no reply within 0.1s" in (meter.calls[0].error or "")


async def test_an_exhausted_budget_skips_the_call() -> None:
    model = ScriptedChatModel(script=[{"ids": [1]}])
    meter = Meter(budget=0)
    value, outcome, _ = await run(model, meter=meter)
    assert (value, outcome, outcomes(meter), model.calls) == (FALLBACK, "skipped_budget", ["skipped_budget"], [])
    assert meter.summary()["calls"] == 0 and meter.summary()["fallbacks"] == 1


async def test_a_budget_too_small_for_the_prompt_skips_the_call() -> None:
    model = ScriptedChatModel(script=[{"ids": [1]}])
    _, outcome, _ = await run(model, meter=Meter(budget=3))
    assert (outcome, model.calls) == ("skipped_budget", [])


async def test_a_budget_spent_by_the_first_reply_skips_the_repair() -> None:
    usage = {"input_tokens": 90, "output_tokens": 20, "total_tokens": 110}
    model = ScriptedChatModel(script=[AIMessage("rubbish", usage_metadata=usage), {"ids": [1]}])
    meter = Meter(budget=100)
    value, outcome, _ = await run(model, meter=meter)
    assert (value, outcome, outcomes(meter), len(model.calls)) == (
        FALLBACK,
        "skipped_budget",
        ["invalid", "skipped_budget"],
        1,
    )
    assert meter.exhausted and meter.remaining == 0


async def test_offline_mode_returns_the_fallback_without_a_record() -> None:
    value, outcome, meter = await run(None)
    assert (value, outcome, meter.calls) == (FALLBACK, "offline", [])


async def test_the_schema_is_bound_as_the_one_named_tool() -> None:
    seen: dict[str, Any] = {}

    class Recorder(ScriptedChatModel):
        def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
            seen["tool_choice"] = tool_choice
            return super().bind_tools(tools, tool_choice=tool_choice, **kwargs)

    await run(Recorder(script=[{"ids": [1]}]))
    assert seen["tool_choice"] == "Pick"


async def test_internal_calls_are_tagged_nostream() -> None:
    seen: list[list[str]] = []

    class Tags(ScriptedChatModel):
        async def _agenerate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            seen.append(list(run_manager.tags) if run_manager else [])
            return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    await run(Tags(script=[{"ids": [1]}]))
    assert "nostream" in seen[0]


async def test_concurrent_decisions_share_one_meter() -> None:
    meter = Meter()
    model = ScriptedChatModel(script=[{"ids": [1]}, "junk", {"ids": [2]}, conn_error(), {"ids": [3]}], default="junk")
    results = await asyncio.gather(*(run(model, meter=meter) for _ in range(4)))
    assert len(results) == 4
    summary = meter.summary()
    assert summary["calls"] == len(meter.calls) == len(model.calls) - 1  # the dropped connection leaves no record
    assert sum(summary["outcomes"].values()) == len(meter.calls)
    assert summary["prompt_tokens"] + summary["completion_tokens"] == meter.tokens


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (conn_error(), True),
        (openai.APITimeoutError(request=httpx2.Request("POST", "http://x")), True),
        (
            openai.RateLimitError(
                "slow down", response=httpx2.Response(429, request=httpx2.Request("GET", "http://x")), body=None
            ),
            True,
        ),
        (
            openai.InternalServerError(
                "boom", response=httpx2.Response(503, request=httpx2.Request("GET", "http://x")), body=None
            ),
            True,
        ),
        (httpx2.RemoteProtocolError("peer closed"), True),
        (httpx.ReadTimeout("slow"), True),
        (TimeoutError(), True),
        (
            openai.AuthenticationError(
                "no", response=httpx2.Response(401, request=httpx2.Request("GET", "http://x")), body=None
            ),
            False,
        ),
        (ValueError("bad json"), False),
        (KeyError("x"), False),
        (ModelConnectionError("provider-neutral"), True),
        (RuntimeError("Event loop is closed"), True),
        (RuntimeError("something else"), False),
    ],
)
def test_is_transient(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


# ---- stream_answer ---------------------------------------------------------------------


async def test_stream_answer_returns_the_text_and_meters_it_locally() -> None:
    meter = Meter()
    text = await stream_answer(StreamModel(), [HumanMessage("What is Miso?")], meter=meter, timeout=1)
    call = meter.calls[0]
    assert text == "Miso is a cat."
    assert (call.node, call.outcome, call.usage_source) == ("answer", "ok", "local_tokenizer")
    assert call.prompt_tokens > 0 and call.completion_tokens > 0


async def test_stream_answer_prefers_the_final_chunk_usage() -> None:
    meter = Meter()
    usage = {"input_tokens": 21, "output_tokens": 4, "total_tokens": 25}
    await stream_answer(StreamModel(usage=usage), [HumanMessage("q")], node="synth", meter=meter, timeout=1)
    call = meter.calls[0]
    assert (call.node, call.prompt_tokens, call.completion_tokens, call.usage_source) == (
        "synth",
        21,
        4,
        "usage_metadata",
    )


async def test_stream_answer_raises_llm_error_when_the_connection_drops_mid_stream() -> None:
    meter = Meter()
    model = StreamModel(then=httpx2.RemoteProtocolError("peer closed connection without sending complete message"))
    with pytest.raises(LLMError, match="connection to the model failed after 14 streamed characters"):
        await stream_answer(model, [HumanMessage("q")], meter=meter, timeout=1)
    assert meter.calls[0].outcome == "error" and meter.calls[0].completion_tokens > 0


async def test_stream_answer_raises_llm_error_when_the_server_goes_silent() -> None:
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"no reply within 0\.2s"):
        await stream_answer(StreamModel(then=30.0), [HumanMessage("q")], meter=Meter(), timeout=0.2)
    assert time.monotonic() - started < 2


async def test_stream_answer_retries_a_transport_error_before_the_first_token() -> None:
    meter = Meter()
    model = ScriptedChatModel(script=[conn_error(), "Recovered answer."])
    assert await stream_answer(model, [HumanMessage("q")], meter=meter, timeout=1) == "Recovered answer."
    assert [c.outcome for c in meter.calls] == ["ok"] and len(model.calls) == 2


async def test_stream_answer_raises_llm_error_when_the_transport_stays_down() -> None:
    meter = Meter()
    model = ScriptedChatModel(script=[conn_error()] * 3)
    with pytest.raises(LLMError, match=r"connection to the model failed after 0 streamed characters.*APIConnection"):
        await stream_answer(model, [HumanMessage("q")], meter=meter, timeout=1, retries=2)
    assert len(model.calls) == 3 and [c.outcome for c in meter.calls] == ["error"]


async def test_stream_answer_does_not_retry_a_model_error_or_silence() -> None:
    model = ScriptedChatModel(script=[ValueError("bad request"), "never"])
    with pytest.raises(LLMError, match=r"the model raised an error.*bad request"):
        await stream_answer(model, [HumanMessage("q")], meter=Meter(), timeout=1)
    assert len(model.calls) == 1
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"no reply within 0\.2s"):
        await stream_answer(StreamModel(chunks=[], then=30.0), [HumanMessage("q")], meter=Meter(), timeout=0.2)
    assert time.monotonic() - started < 2


class AnswerState(TypedDict, total=False):
    question: str
    answer: str
    ids: list[int]


async def test_in_a_graph_only_the_answer_reaches_the_messages_stream() -> None:
    """The planner's JSON stays internal (nostream); the answer's tokens stream."""
    model = ScriptedChatModel(script=[{"ids": [2]}, "Miso is Priya's cat."])
    meter = Meter()

    async def answer_node(state: AnswerState) -> AnswerState:
        pick, _ = await decide(
            model, Pick, "Pick ids.", state["question"], node="plan", fallback=lambda: FALLBACK, meter=meter
        )
        text = await stream_answer(model, [HumanMessage(state["question"])], meter=meter, timeout=5)
        return {"answer": text, "ids": pick.ids}

    graph = StateGraph(AnswerState)
    graph.add_node("answer", answer_node)
    graph.add_edge(START, "answer")
    graph.add_edge("answer", END)
    tokens, final = [], {}
    async for mode, chunk in graph.compile().astream({"question": "Who is Miso?"}, stream_mode=["messages", "values"]):
        if mode == "messages":
            message, metadata = chunk
            tokens.append(message.content)
            assert metadata.get("memstrata_node") == "answer"
        else:
            final = chunk
    assert "".join(tokens) == "Miso is Priya's cat."
    assert len(tokens) > 1 and '"ids"' not in "".join(tokens)
    assert final["ids"] == [2] and [c.outcome for c in meter.calls] == ["ok", "ok"]
