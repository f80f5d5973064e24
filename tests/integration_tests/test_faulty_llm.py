"""A faulty model server: a fault-injecting proxy (``tests/plugins/fault_proxy.py``) in front of the real llama.cpp.

Every case ends in retries, the fallback or a clear error, never a hang, and the call
record says which: ``outcome``, ``attempts``, why each retried attempt failed
(``retried``) and the final ``error``. The model's content is never asserted on (a
135M model is often wrong); only the path each call took.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, HashEmbeddings
from langchain_core.messages import HumanMessage, SystemMessage
from plugins.fault_proxy import RETRY_AFTER_S, FaultProxy
from plugins.llm_server import make_chat_model
from pydantic import BaseModel, Field

from memstrata import Memstrata
from memstrata.errors import AnswerError, LLMError
from memstrata.runtime.llm import CallRecord, Meter, decide, stream_answer

pytestmark = pytest.mark.llm_server
pytest_plugins = ["plugins.fault_proxy"]

SLOW_S = 120.0  # per-call timeout where the call must not time out (2 shared cores, a busy server)
HANG_S = 3.0  # per-call timeout where the proxy never answers
NEVER_HANG_S = 900.0  # only a guard: a test that reaches it has hung


class Verdict(BaseModel):
    """Whether the line answers the question."""

    answerable: bool = Field(description="true if the line answers the question")


FALLBACK = Verdict(answerable=False)


async def one_decision(
    proxy: FaultProxy, *faults: str, timeout: float = SLOW_S, retries: int = 2
) -> tuple[Verdict, str, CallRecord]:
    proxy.plan(*faults)
    meter = Meter()
    value, outcome = await asyncio.wait_for(
        decide(
            make_chat_model(proxy.base_url),
            Verdict,
            "Decide whether the line answers the question.",
            "<line>Priya: I adopted a cat named Miso.</line>\n<question>What is the cat called?</question>",
            node="gate",
            fallback=lambda: FALLBACK,
            meter=meter,
            timeout=timeout,
            retries=retries,
            max_tokens=64,
        ),
        NEVER_HANG_S,
    )
    assert meter.calls[-1].outcome == outcome
    return value, outcome, meter.calls[0]  # the first reply's record holds its transport attempts


async def test_500s_are_retried_until_the_server_recovers(fault_proxy: FaultProxy) -> None:
    _, outcome, record = await one_decision(fault_proxy, "500", "500")
    assert fault_proxy.log[:3] == ["500", "500", "pass"]
    assert outcome != "error"  # the server answered (whether SmolLM2's answer validates varies)
    assert record.attempts == 3 and all("Error code: 500" in why for why in record.retried)


async def test_500s_past_the_retries_end_in_the_fallback(fault_proxy: FaultProxy) -> None:
    value, outcome, record = await one_decision(fault_proxy, "500", "500", "500", retries=2)
    assert (value, outcome) == (FALLBACK, "error")
    assert fault_proxy.log == ["500", "500", "500"]
    assert record.attempts == 3 and len(record.retried) == 2
    assert all("Error code: 500" in why for why in [*record.retried, record.error or ""])


async def test_a_200_with_an_html_page_is_the_fallback_with_the_page_named(fault_proxy: FaultProxy) -> None:
    value, outcome, record = await one_decision(fault_proxy, "html")
    assert (value, outcome, record.attempts) == (FALLBACK, "error", 1)  # bad content is not retried
    assert "502 Bad Gateway" in (record.error or "")


async def test_a_reply_that_never_arrives_ends_at_the_per_call_timeout(fault_proxy: FaultProxy) -> None:
    value, outcome, record = await one_decision(fault_proxy, "hang", "hang", timeout=HANG_S, retries=1)
    assert (value, outcome) == (FALLBACK, "error")
    assert fault_proxy.log == ["hang", "hang"]
    assert record.attempts == 2 and record.error == f"TimeoutError: no reply within {HANG_S:g}s"
    assert record.retried == [record.error]  # the first wait ended the same way, and was retried


async def test_a_connection_reset_mid_reply_is_retried(fault_proxy: FaultProxy) -> None:
    _, outcome, record = await one_decision(fault_proxy, "reset")
    assert fault_proxy.log[:2] == ["reset", "pass"] and outcome != "error"
    assert record.attempts == 2 and "Connection" in record.retried[0], record.retried


async def test_an_empty_choices_list_is_the_fallback_with_a_clear_error(fault_proxy: FaultProxy) -> None:
    value, outcome, record = await one_decision(fault_proxy, "empty")
    assert (value, outcome, record.attempts) == (FALLBACK, "error", 1)
    assert record.error == "EmptyReplyError: the server's reply held no choices (an empty `choices` list)"


async def test_a_429_waits_for_retry_after_and_then_succeeds(fault_proxy: FaultProxy) -> None:
    _, _, record = await one_decision(fault_proxy, "429")
    assert fault_proxy.log[:2] == ["429", "pass"]
    assert record.attempts == 2 and "RateLimit" in record.retried[0]
    assert record.seconds >= RETRY_AFTER_S  # it waited as long as the server asked, not the 0.2 s backoff


# ---- the streamed answer -------------------------------------------------------------------------------------


async def stream(proxy: FaultProxy, *faults: str, timeout: float = SLOW_S) -> tuple[str | LLMError, CallRecord]:
    proxy.plan(*faults)
    meter = Meter()
    prompt = [SystemMessage("Answer in one sentence."), HumanMessage("Name a colour of the sky.")]
    try:
        text: str | LLMError = await asyncio.wait_for(
            stream_answer(make_chat_model(proxy.base_url), prompt, meter=meter, timeout=timeout, retries=2),
            NEVER_HANG_S,
        )
    except LLMError as exc:
        text = exc
    assert len(meter.calls) == 1
    return text, meter.calls[0]


async def test_a_stream_recovers_from_500_and_429_before_its_first_token(fault_proxy: FaultProxy) -> None:
    text, record = await stream(fault_proxy, "500", "429")
    assert isinstance(text, str) and text.strip()
    assert fault_proxy.log[:3] == ["500", "429", "pass"]
    assert (record.outcome, record.attempts, len(record.retried)) == ("ok", 3, 2)


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("reset", "the connection to the model failed"),
        ("empty", "EmptyReplyError: the model streamed no text"),
        ("html", "the model raised an error"),
        ("hang", f"TimeoutError: no reply within {HANG_S:g}s"),
    ],
)
async def test_a_broken_stream_is_one_clear_error(fault_proxy: FaultProxy, fault: str, says: str) -> None:
    text, record = await stream(fault_proxy, fault, timeout=HANG_S if fault == "hang" else SLOW_S)
    assert isinstance(text, LLMError) and says in str(text), text
    assert fault_proxy.log == [fault]  # a stream that failed this way is not retried
    assert record.outcome == "error" and record.error and record.error in str(text)
    if fault == "reset":
        assert "after 0 streamed" not in str(text)  # it broke mid-stream, after the first tokens


# ---- a whole query ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["500", "empty"])
def test_a_query_against_a_broken_server_ends_with_the_trace_saying_why(
    fault_proxy: FaultProxy, tmp_path: Path, fault: str
) -> None:
    mem = Memstrata(path=tmp_path / "m", embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="demo")
    fault_proxy.plan(*[fault] * 500)  # every call of the query fails this way
    try:
        with pytest.raises(AnswerError, match=r"^answer failed: ") as failed:  # one clear error, not a None
            mem.ask(
                "Where does Priya work?",
                user_id="demo",
                model=make_chat_model(fault_proxy.base_url),
                llm_retries=1,
                llm_timeout_s=SLOW_S,
            )
    finally:
        mem.close()
    result = failed.value.result
    records: list[dict[str, Any]] = result.trace["llm"]["records"]
    assert records and all(r["outcome"] in ("error", "skipped_budget") for r in records)
    assert result.answer is None and result.trace["answer"].startswith("answer failed: ")
    assert result.answer_error and result.trace["answer"] == f"answer failed: {result.answer_error}"  # typed
    assert result.evidence  # the offline path still found the evidence
    attempts, says = (2, "Error code: 500") if fault == "500" else (1, "EmptyReplyError")
    for r in (r for r in records if r["outcome"] == "error"):
        assert r["attempts"] == attempts, r  # llm_retries holds for every call, the answer stream included
        assert says in r["error"] and all(says in why for why in r["retried"]), r
    assert len(fault_proxy.log) == sum(r["attempts"] for r in records if r["outcome"] == "error")
