"""A verdict, then a streamed answer: :func:`stream_checked` reads the verdict word a reply opens with, out of
sight, and streams the rest as the answer when the verdict says so; one call for a self-check and its answer.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata, add_usage

from memstrata.errors import EmptyReplyError, LLMError
from memstrata.runtime.llm.meter import CallRecord, Meter, _count_local, _prompt_text, usage_of
from memstrata.runtime.llm.model import INTERNAL_TAGS, _cap_kwargs
from memstrata.runtime.llm.relay import _Relay
from memstrata.runtime.llm.stream import _idle_bounded
from memstrata.runtime.llm.transport import _describe, is_transient

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig


@dataclass
class Checked:
    """What :func:`stream_checked` read: the verdict word (``None``: the reply did not open with one), the streamed
    answer after it, and how the call went (a :class:`CallRecord` outcome).
    """

    verdict: str | None
    answer: str = ""
    outcome: str = "ok"


@overload
def read_verdict(
    text: str, words: Sequence[str], *, done: Literal[True], head: int = ...
) -> tuple[str | None, int]: ...
@overload
def read_verdict(
    text: str, words: Sequence[str], *, done: bool = ..., head: int = ...
) -> tuple[str | None, int] | None: ...
def read_verdict(
    text: str, words: Sequence[str], *, done: bool = False, head: int = 48
) -> tuple[str | None, int] | None:
    r"""The verdict word a reply opens with and where the rest starts; ``None`` while it cannot tell yet (never once
    ``done``).

    The word may be wrapped in markdown or followed by ``:``; the rest starts after the line (or the colon). A
    reply that opens with something else has no verdict: ``(None, 0)``.

    Example:
        >>> read_verdict("ANSWER\nPepper.", ["ANSWER", "SEARCH"])
        ('ANSWER', 7)
        >>> read_verdict("**Search**", ["ANSWER", "SEARCH"], done=True)
        ('SEARCH', 10)
        >>> read_verdict("ANSW", ["ANSWER", "SEARCH"]) is None
        True
    """
    pattern = re.compile(
        r"^[\s*#_`>\"']*(" + "|".join(map(re.escape, words)) + r")\b[*_`\"']*[ \t]*[:.\-]?[ \t]*", re.I
    )
    match = pattern.match(text)
    ended = done or "\n" in text or len(text) >= head
    if match is None:
        return (None, 0) if ended or len(text.lstrip()) >= max(map(len, words)) + 4 else None
    rest = match.end()
    if text[rest : rest + 1] == "\n":
        rest += 1
    elif rest == len(text) and not ended:
        return None
    return match.group(1).upper(), rest


async def stream_checked(
    model: BaseChatModel,
    messages: Sequence[BaseMessage],
    *,
    words: Sequence[str],
    answer_word: str,
    node: str,
    meter: Meter,
    timeout: float = 60.0,
    retries: int = 2,
    max_tokens: int | None = None,
) -> Checked:
    r"""One streamed call whose reply opens with a verdict word; after ``answer_word`` the rest streams as the answer.

    The verdict is read from the first characters, out of sight (the call is tagged ``nostream``). When it is
    ``answer_word``, the rest of the reply is relayed as it arrives through a chat-model run of its own
    (:class:`_Relay`), so a chat UI receives the answer's tokens and never the verdict. Any other verdict, or none,
    ends the stream there: the model stops generating. So a self-check and its answer cost one sequential call.

    Never raises for model trouble before the answer starts (the outcome says what happened: ``error``,
    ``fallback`` when the reply had no verdict, ``skipped_budget``); a failure after answer tokens reached the user
    raises :class:`LLMError`, as :func:`stream_answer` does.

    Example:
        >>> import asyncio
        >>> from memstrata.testing import ScriptedChatModel
        >>> asyncio.run(
        ...     stream_checked(
        ...         ScriptedChatModel(script=["ANSWER\nPepper."]),
        ...         [],
        ...         words=["ANSWER", "SEARCH"],
        ...         answer_word="ANSWER",
        ...         node="gate",
        ...         meter=Meter(),
        ...     )
        ... )
        Checked(verdict='ANSWER', answer='Pepper.', outcome='ok')
    """
    prompt = list(messages)
    if not meter.affords(_count_local(_prompt_text(prompt)) if meter.budget is not None else 0):
        meter.add(CallRecord(node, "skipped_budget"))
        return Checked(None, outcome="skipped_budget")
    started, failed = time.monotonic(), list[str]()
    for attempt in range(retries + 1):
        parts: list[str] = []
        try:
            checked, usage = await _checked_once(
                model, prompt, parts, words=words, answer_word=answer_word, node=node, timeout=timeout, cap=max_tokens
            )
        except Exception as exc:  # before the answer: a retry or the fallback; after it, LLMError
            answered = bool(parts) and read_verdict("".join(parts), words, done=True)[0] == answer_word.upper()
            if answered or attempt == retries or not is_transient(exc) or isinstance(exc, TimeoutError):
                record = CallRecord(
                    node, "error", *usage_of(prompt, AIMessage("".join(parts))), error=_describe(exc, timeout)
                )
                record.seconds, record.attempts, record.retried = time.monotonic() - started, len(failed) + 1, failed
                meter.add(record)
                if answered:
                    msg = f"memstrata.{node}: the answer stream failed ({_describe(exc, timeout)})"
                    raise LLMError(msg) from exc
                return Checked(None, outcome="error")
            failed.append(_describe(exc, timeout))
            await asyncio.sleep(min(2.0, 0.2 * 2**attempt))
            continue
        reply = AIMessage("".join(parts), usage_metadata=usage)
        meter.add(
            CallRecord(
                node,
                checked.outcome,
                *usage_of(prompt, reply),
                seconds=time.monotonic() - started,
                attempts=len(failed) + 1,
                retried=failed,
            )
        )
        return checked
    return Checked(None, outcome="error")  # pragma: no cover - the loop always returns


async def _checked_once(
    model: BaseChatModel,
    prompt: list[BaseMessage],
    parts: list[str],
    *,
    words: Sequence[str],
    answer_word: str,
    node: str,
    timeout: float,
    cap: int | None,
) -> tuple[Checked, UsageMetadata | None]:
    """One attempt of :func:`stream_checked`: read the verdict, then relay the answer (``parts`` gets every piece)."""
    internal: RunnableConfig = {
        "tags": INTERNAL_TAGS,
        "run_name": f"memstrata.{node}.check",
        "metadata": {"memstrata_node": node},
    }
    options = _cap_kwargs(model, cap)
    streaming = model.bind(**options) if options else model
    chunks = _idle_bounded(streaming.astream(prompt, config=internal), timeout)  # an async generator: its own aiter
    usage: UsageMetadata | None = None
    verdict: tuple[str | None, int] | None = None
    try:
        while verdict is None:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                if not "".join(parts).strip():
                    msg = "the model streamed no text (the server sent no choices)"
                    raise EmptyReplyError(msg) from None
                verdict = read_verdict("".join(parts), words, done=True)
                break
            parts.append(chunk.text)
            usage = add_usage(usage, chunk.usage_metadata) if chunk.usage_metadata else usage
            verdict = read_verdict("".join(parts), words)
        word, start = verdict
        if word != answer_word.upper():
            return Checked(word, outcome="ok" if word else "fallback"), usage
        head = "".join(parts)[start:].lstrip("\n")
        box: dict[str, UsageMetadata | None] = {"usage": usage}

        async def rest() -> AsyncIterator[str]:
            if head:
                yield head
            async for more in chunks:
                parts.append(more.text)
                if more.usage_metadata:
                    box["usage"] = add_usage(box["usage"], more.usage_metadata)
                if more.text:
                    yield more.text

        relay = _Relay(pieces=rest())
        config: RunnableConfig = {"run_name": f"memstrata.{node}", "metadata": {"memstrata_node": node}}
        answer = "".join([piece.text async for piece in relay.astream(prompt, config=config)]).strip()
        return Checked(word, answer, "ok" if answer else "fallback"), box["usage"]
    finally:
        await chunks.aclose()
