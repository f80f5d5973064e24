"""``memstrata bench chat-turn``: what a chat user waits for, a question at a time, in LLM mode.

The bundled example conversation is written to a fresh store (offline), then each question is asked through
:meth:`memstrata.Memstrata.astream`, the way a chat app streams its answer, in each mode:

- ``light``: the default pipeline, the model's self-check answering from the summaries;
- ``deep``: the default pipeline, the self-check asking to search deeper;
- ``chat``: the chat preset (``llm_retrieval="chat"``): offline retrieval, one streamed answer call;
- ``paper-light`` / ``paper-deep``: HyMem's Algorithm 1 as published (``retrieval.light_check="structured"``,
  ``llm_depth=None``): every step may ask the model, reflection grades the light answer.

Each model call waits ``latency_ms`` before its reply (or its first token) starts, as a hosted model's would: the
scripted reader's by default (its replies are fixed and instant: the bench measures memstrata's call structure,
never answer quality), or, with ``reader``, a real OpenAI-compatible server's on top of its own time. For each
mode it reports the time to the first answer token, the time to the result, the model calls made before the
first token, the sequential depth (the trace's ``sequential_calls``: calls made one after another up to the first
token, side-by-side calls counted once) and the calls and tokens of the whole turn.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage

from memstrata.testing import ScriptedChatModel
from memstrata_bench.tuning import TUNED

if TYPE_CHECKING:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
    from langchain_core.outputs import ChatGenerationChunk, ChatResult

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "conversation.json"
USER = "bench-chat-turn"
QUESTIONS = ("Who is Priya's manager?", "Where does Priya work?", "When did Tom run the Brighton half marathon?")
MODES: dict[str, dict[str, Any]] = {
    "light": {},
    "deep": {},
    "chat": {"llm_retrieval": "chat"},
    "paper-light": {"retrieval.light_check": "structured", "llm_depth": None},
    "paper-deep": {"retrieval.light_check": "structured", "llm_depth": None},
}
ANSWER = (
    "Priya's manager at Tidewater Labs is Rui, who gave her the shipping-data pipeline on her second day "
    "[s2:t3]; she started there as a data engineer on 6 May [s1:t6]."
)


class LatentScript(ScriptedChatModel):
    """A scripted reader whose every call waits ``latency_s`` (without blocking the loop) before replying."""

    latency_s: float = 0.0

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        await asyncio.sleep(self.latency_s)
        return self._generate(messages, stop)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        await asyncio.sleep(self.latency_s)
        for chunk in self._stream(messages, stop):
            yield chunk


def scripted_reply(deep: bool) -> Callable[[list[BaseMessage]], Any]:
    """What the scripted reader says to each retrieval prompt (recognised by its role), light or deep."""

    def reply(messages: list[BaseMessage]) -> Any:
        system, user = str(messages[0].content), str(messages[-1].content)
        if "plan memory lookups" in system:
            question = user.removeprefix("<question>").split("</question>")[0]
            return {"sub_queries": [{"id": "q1", "question": question}]}
        if "label how far back" in system:  # a separate scope call, in pipelines that make one
            ids = [line.split(":")[0] for line in user.splitlines() if line[:1] == "q" and ":" in line]
            return {"items": [{"id": i, "scope": "Mixed"} for i in ids]}
        if "chat user's question from summaries" in system:
            return "SEARCH" if deep else f"ANSWER\n{ANSWER}"
        if "answer questions from summaries" in system:
            return {"finished": 2, "answer": ""} if deep else {"finished": 0, "answer": ANSWER}
        if "pick memory entries" in system:
            return {"ids": [0, 1]}
        if "find what is still missing" in system:
            return {"answer": ANSWER, "missing": False, "query": ""}
        if "review whether a question" in system:
            return {"finished": True, "new_question": ""}
        if "rewrite a sub-question" in system:
            return {"question": user}
        return ANSWER

    return reply


def reader_model(reader: str | None, reader_name: str, latency_s: float, deep: bool) -> BaseChatModel:
    """The scripted reader, or a ``ChatOpenAI`` at ``reader``, each call delayed by ``latency_s``."""
    if reader is None:
        return LatentScript(default=scripted_reply(deep), latency_s=latency_s)
    from langchain_openai import ChatOpenAI

    class LatentOpenAI(ChatOpenAI):
        latency: float = 0.0

        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(self.latency)
            return await super()._agenerate(*args, **kwargs)

        async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            await asyncio.sleep(self.latency)
            async for chunk in super()._astream(*args, **kwargs):
                yield chunk

    return LatentOpenAI(
        model=reader_name, base_url=reader, api_key="not-needed", max_retries=0, stream_usage=True, latency=latency_s
    )


async def one_turn(mem: Any, question: str, model: BaseChatModel, settings: dict[str, Any]) -> dict[str, Any]:
    """Ask once through ``astream``: seconds to the first token and to the result, and what the trace counted."""
    calls = getattr(model, "calls", None)
    started = time.perf_counter()
    first: float | None = None
    before_first: int | None = None
    result = None
    async for kind, value in mem.astream(question, user_id=USER, model=model, **settings):
        if kind == "token" and first is None:
            first = time.perf_counter() - started
            before_first = len(calls) if calls is not None else None
        elif kind == "result":
            result = value
    total = time.perf_counter() - started
    llm = result.trace["llm"] if result is not None else {}
    return {
        "question": question,
        "ttft_s": round(first, 3) if first is not None else None,
        "total_s": round(total, 3),
        "calls_before_first_token": before_first,
        "sequential_calls": result.trace.get("sequential_calls") if result is not None else None,
        "calls": llm.get("calls", 0),
        "prompt_tokens": llm.get("prompt_tokens", 0),
        "completion_tokens": llm.get("completion_tokens", 0),
        "path": result.trace.get("path") if result is not None else None,
        "answered": bool(result is not None and result.answer),
    }


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the turns of one mode, and the worst sequential depth."""
    keys = ("ttft_s", "total_s", "calls_before_first_token", "calls", "prompt_tokens", "completion_tokens")
    depths = [r["sequential_calls"] for r in rows if r.get("sequential_calls") is not None]
    return {
        "turns": len(rows),
        **{key: _median(rows, key) for key in keys},
        "sequential_calls_max": max(depths) if depths else None,
        "paths": sorted({str(r["path"]) for r in rows}),
    }


async def run_chat_turn(
    *,
    latency_ms: float = 500.0,
    reader: str | None = None,
    reader_name: str = "smollm2",
    modes: list[str] | None = None,
    repeats: int = 1,
    data_dir: str | None = None,
    embeddings: Any = None,
) -> dict[str, Any]:
    """Write the example, then ask every question in every mode ``repeats`` times; per-turn rows and medians."""
    from memstrata import Memstrata

    chosen = modes or list(MODES)
    unknown = sorted(set(chosen) - set(MODES))
    if unknown:
        msg = f"modes: unknown {unknown}; choose from {', '.join(MODES)}"
        raise ValueError(msg)
    with tempfile.TemporaryDirectory(prefix="memstrata-chat-turn-") as tmp:
        mem = Memstrata(path=data_dir or tmp, embeddings=embeddings, **TUNED)
        await mem.aingest(str(EXAMPLE), user_id=USER)
        out: dict[str, Any] = {"latency_ms": latency_ms, "reader": reader or "scripted", "modes": {}}
        for mode in chosen:
            rows = []
            for _ in range(repeats):
                for question in QUESTIONS:
                    model = reader_model(reader, reader_name, latency_ms / 1000, deep=mode.endswith("deep"))
                    rows.append(await one_turn(mem, question, model, MODES[mode]))
            out["modes"][mode] = {"summary": summarize(rows), "turns": rows}
        mem.close()
    return out
