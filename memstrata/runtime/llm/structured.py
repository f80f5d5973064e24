"""Structured LLM decisions: :func:`decide`, with tool calling, retries, one repair and the caller's fallback.

The schema is bound as the one required tool; tenacity retries transport errors only, with backoff (or a 429's
``Retry-After``, up to the per-call timeout); every attempt has a timeout; a reply that fails validation gets one
repair attempt; then the caller's deterministic fallback is used. Every call is recorded on the
:class:`~memstrata.runtime.llm.meter.Meter`, which also holds the token budget.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from memstrata.errors import EmptyReplyError, LLMError
from memstrata.runtime.llm.meter import CallRecord, Meter, _count_local, _prompt_text, usage_of
from memstrata.runtime.llm.model import INTERNAL_TAGS, _cap_kwargs
from memstrata.runtime.llm.parsing import _INVALID, T, _check, _repair
from memstrata.runtime.llm.transport import _describe, is_transient, retry_after

logger = logging.getLogger(__package__)  # the whole client logs as memstrata.runtime.llm


def _bind(model: BaseChatModel, schema: type[BaseModel], max_tokens: int | None = None) -> Any:
    name = convert_to_openai_tool(schema)["function"]["name"]
    cap = _cap_kwargs(model, max_tokens)
    try:
        # Naming the one tool (rather than tool_choice="any") is what makes
        # llama.cpp's server constrain the reply to the schema's grammar.
        return model.bind_tools([schema], tool_choice=name, **cap)
    except NotImplementedError:  # models without tool calling answer in JSON text
        return model.bind(**cap) if cap else model


def _retrying(retries: int, timeout: float, failed: list[str]) -> AsyncRetrying:
    """Tenacity over transport errors: backoff, or a 429's ``Retry-After`` (capped at ``timeout``); each failure
    that is retried is described into ``failed``.
    """
    backoff = wait_exponential(multiplier=0.2, max=2.0)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after(exc) if exc is not None else None
        return max(backoff(state), min(asked, timeout)) if asked is not None else backoff(state)

    def note(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        failed.append(_describe(exc, timeout) if exc is not None else "unknown")

    return AsyncRetrying(
        stop=stop_after_attempt(retries + 1),
        wait=wait,
        retry=retry_if_exception(is_transient),
        before_sleep=note,
        reraise=True,
    )


async def _invoke(
    model: BaseChatModel,
    schema: type[BaseModel],
    messages: list[BaseMessage],
    *,
    node: str,
    timeout: float,
    retries: int,
    failed: list[str],
    max_tokens: int | None = None,
) -> AIMessage:
    """One reply, each attempt bounded by ``timeout``; only transport errors are retried (each noted in ``failed``)."""
    bound = _bind(model, schema, max_tokens)
    config = {"tags": INTERNAL_TAGS, "run_name": f"memstrata.{node}", "metadata": {"memstrata_node": node}}
    async for attempt in _retrying(retries, timeout, failed):
        with attempt:
            try:
                reply = await asyncio.wait_for(bound.ainvoke(messages, config=config), timeout=timeout)
            except IndexError as exc:  # LangChain reads generations[0] of a reply with no choices
                msg = "the server's reply held no choices (an empty `choices` list)"
                raise EmptyReplyError(msg) from exc
            return reply if isinstance(reply, AIMessage) else AIMessage(str(getattr(reply, "content", reply)))
    msg = "unreachable"
    raise LLMError(msg)  # pragma: no cover


async def decide(
    model: BaseChatModel | None,
    schema: type[T],
    system: str,
    user: str,
    *,
    node: str,
    fallback: Callable[[], T],
    meter: Meter,
    timeout: float = 60.0,
    retries: int = 2,
    validate: Callable[[T], T] | None = None,
    max_tokens: int | None = None,
) -> tuple[T, str]:
    """One structured decision: the model's, repaired once, or the fallback. Never raises for model trouble.

    Args:
        model: the chat model; ``None`` means offline (the fallback, outcome ``offline``).
        schema: the pydantic schema, bound as the one required tool.
        system: the system prompt.
        user: the user message (the data).
        node: the node name, for the trace and the run name.
        fallback: the deterministic answer when the model fails.
        meter: records the call(s) and holds the token budget.
        timeout: seconds per attempt; the worst case is ``2 * (2 * retries + 1) * timeout`` (every
            attempt timing out, or a 429 asking to wait longer than that) plus backoff.
        retries: extra attempts on transport errors (never on bad output).
        validate: may raise ``ValueError`` (or ``LookupError``) for answers that are
            well-formed but impossible, e.g. an id that was never offered; it may
            return a corrected value.
        max_tokens: the longest reply, in tokens (``None``: the model's own setting).

    Returns:
        The value and how it was obtained (the ``outcome`` of its last :class:`CallRecord`).

    Example:
        >>> import asyncio
        >>> from memstrata.testing import ScriptedChatModel
        >>> class Yes(BaseModel):
        ...     yes: bool
        >>> asyncio.run(
        ...     decide(
        ...         ScriptedChatModel(script=["not json"] * 2),
        ...         Yes,
        ...         "s",
        ...         "u",
        ...         node="n",
        ...         fallback=lambda: Yes(yes=False),
        ...         meter=Meter(),
        ...     )
        ... )
        (Yes(yes=False), 'fallback')
    """
    if model is None:
        return fallback(), "offline"
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(user)]
    for attempt in range(2):
        if not meter.affords(_count_local(_prompt_text(messages)) if meter.budget is not None else 0):
            meter.add(CallRecord(node, "skipped_budget"))
            return fallback(), "skipped_budget"
        started, failed = time.monotonic(), list[str]()
        try:
            reply = await _invoke(
                model,
                schema,
                messages,
                node=node,
                timeout=timeout,
                retries=retries,
                failed=failed,
                max_tokens=max_tokens,
            )
        except Exception as exc:  # noqa: BLE001 - any transport failure ends in the fallback
            meter.add(
                CallRecord(
                    node,
                    "error",
                    *usage_of(messages, None),
                    error=_describe(exc, timeout),
                    seconds=time.monotonic() - started,
                    attempts=len(failed) + 1,
                    retried=failed,
                )
            )
            logger.warning(
                "memstrata.%s: LLM call failed after %d attempt(s) (%s); using the fallback",
                node,
                len(failed) + 1,
                _describe(exc, timeout),
            )
            return fallback(), "error"
        seconds, attempts = time.monotonic() - started, len(failed) + 1
        try:
            value = _check(schema, reply, validate)
        except _INVALID as exc:
            outcome = "invalid" if attempt == 0 else "fallback"
            meter.add(
                CallRecord(
                    node,
                    outcome,
                    *usage_of(messages, reply),
                    error=str(exc)[:300],
                    seconds=seconds,
                    attempts=attempts,
                    retried=failed,
                )
            )
            messages = _repair(messages, reply, exc, schema)
            continue
        outcome = "repaired" if attempt else ("ok" if reply.tool_calls else "parsed_text")
        meter.add(
            CallRecord(node, outcome, *usage_of(messages, reply), seconds=seconds, attempts=attempts, retried=failed)
        )
        return value, outcome
    logger.info("memstrata.%s: the model's output stayed invalid; using the fallback", node)
    return fallback(), "fallback"
