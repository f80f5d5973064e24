"""The streamed answer: :func:`stream_answer`, which bounds the wait for every chunk and turns any failure into
:class:`~memstrata.errors.LLMError`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import TYPE_CHECKING, NoReturn, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata, add_usage

from memstrata.errors import EmptyReplyError, LLMError
from memstrata.runtime.llm.meter import CallRecord, Meter, usage_of
from memstrata.runtime.llm.model import _cap_kwargs
from memstrata.runtime.llm.transport import _describe, is_transient, retry_after

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

ItemT = TypeVar("ItemT")


async def _idle_bounded(stream: AsyncIterator[ItemT], idle: float) -> AsyncGenerator[ItemT, None]:
    """Items of ``stream``; ``TimeoutError`` when one takes longer than ``idle`` seconds."""
    iterator = aiter(stream)
    try:
        while True:
            try:
                # asyncio.timeout keeps the read in this task: the HTTP stream
                # underneath must not hop between tasks.
                async with asyncio.timeout(idle):
                    item = await anext(iterator)
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            await aclose()


async def stream_answer(
    model: BaseChatModel,
    messages: Sequence[BaseMessage],
    *,
    node: str = "answer",
    meter: Meter,
    timeout: float = 60.0,
    retries: int = 2,
    max_tokens: int | None = None,
) -> str:
    """Stream a text answer so LangGraph's ``stream_mode="messages"`` forwards its tokens.

    The call carries no ``nostream`` tag, unlike :func:`decide`. Usage comes from
    the chunks' ``usage_metadata`` when the server sends it, else from the local
    tokenizer. The budget is not checked here: the answer node decides whether
    an exhausted budget still buys an answer.

    Args:
        model: the chat model.
        messages: the prompt.
        node: the node name, for the trace and the run name.
        meter: records the call.
        timeout: the longest wait, in seconds, for the first or any next chunk.
        retries: extra attempts on a transport error before the first chunk; once
            tokens have streamed to the user a failure is final.
        max_tokens: the longest answer, in tokens (``None``: the model's own setting).

    Returns:
        The full answer text.

    Raises:
        LLMError: the transport failed, the server went silent, or the model raised.

    Example:
        >>> import asyncio
        >>> from memstrata.testing import ScriptedChatModel
        >>> asyncio.run(stream_answer(ScriptedChatModel(script=["Miso is a cat."]), [], meter=Meter()))
        'Miso is a cat.'
    """
    prompt, parts, usage, failed = list(messages), list[str](), None, list[str]()
    started = time.monotonic()
    for attempt in range(retries + 1):
        try:
            usage = await _stream_into(parts, model, prompt, node=node, timeout=timeout, max_tokens=max_tokens)
            if not "".join(parts).strip():
                msg = "the model streamed no text (the server sent no choices)"
                raise EmptyReplyError(msg)
            break
        except Exception as exc:  # noqa: BLE001 - every failure becomes one clear LLMError
            # A silent server is not retried: the user is already waiting on the stream.
            if parts or attempt == retries or not is_transient(exc) or isinstance(exc, TimeoutError):
                _stream_failed(
                    prompt, "".join(parts), exc, node=node, meter=meter, timeout=timeout, started=started, failed=failed
                )
            failed.append(_describe(exc, timeout))
            asked = retry_after(exc)
            await asyncio.sleep(max(min(2.0, 0.2 * 2**attempt), min(asked, timeout) if asked is not None else 0.0))
    reply = AIMessage("".join(parts), usage_metadata=usage)
    meter.add(
        CallRecord(
            node,
            "ok",
            *usage_of(prompt, reply),
            seconds=time.monotonic() - started,
            attempts=len(failed) + 1,
            retried=failed,
        )
    )
    return reply.text


async def _stream_into(
    parts: list[str],
    model: BaseChatModel,
    prompt: list[BaseMessage],
    *,
    node: str,
    timeout: float,
    max_tokens: int | None = None,
) -> UsageMetadata | None:
    """Append the streamed text to ``parts``; return the summed usage, if the server sent any."""
    config: RunnableConfig = {"run_name": f"memstrata.{node}", "metadata": {"memstrata_node": node}}
    usage: UsageMetadata | None = None
    cap = _cap_kwargs(model, max_tokens)
    streaming = model.bind(**cap) if cap else model
    async for chunk in _idle_bounded(streaming.astream(prompt, config=config), timeout):
        parts.append(chunk.text)
        usage = add_usage(usage, chunk.usage_metadata) if chunk.usage_metadata else usage
    return usage


def _stream_failed(
    prompt: list[BaseMessage],
    partial: str,
    exc: Exception,
    *,
    node: str,
    meter: Meter,
    timeout: float,
    started: float,
    failed: list[str],
) -> NoReturn:
    """Record the failed stream (tokens so far counted locally) and raise :class:`LLMError`."""
    p, c, src = usage_of(prompt, AIMessage(partial))
    meter.add(
        CallRecord(
            node,
            "error",
            p,
            c,
            src,
            error=_describe(exc, timeout),
            seconds=time.monotonic() - started,
            attempts=len(failed) + 1,
            retried=failed,
        )
    )
    kind = "the connection to the model failed" if is_transient(exc) else "the model raised an error"
    msg = f"memstrata.{node}: {kind} after {len(partial)} streamed characters ({_describe(exc, timeout)})"
    raise LLMError(msg) from exc
