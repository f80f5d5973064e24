"""Robust structured LLM decisions, metering and the token budget.

Every LLM decision goes through :func:`decide`: a pydantic schema, tool calling
(``method="function_calling"``), tenacity retries with backoff on transport
errors, a per-call timeout, one repair attempt on a validation error, and then
the caller's deterministic fallback. The :class:`Meter` records every call,
with its tokens and where the counts came from, and enforces
``Context.llm_token_budget``.

Example:
    >>> meter = Meter(budget=100)
    >>> meter.remaining
    100
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

logger = logging.getLogger(__name__)
T = TypeVar("T", bound=BaseModel)
INTERNAL_TAGS = ["nostream", "memstrata:internal"]


class LLMError(RuntimeError):
    """An LLM call failed in a way the caller must hear about (the answer stream)."""


@dataclass
class CallRecord:
    """One LLM call as the trace shows it."""

    node: str
    outcome: str  # ok | parsed_text | repaired | fallback | skipped_budget | error
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_source: str = "none"  # usage_metadata | local_tokenizer | none
    error: str | None = None


@dataclass
class Meter:
    """LLM calls and tokens of one query or one ingest, with its budget."""

    budget: int | None = None
    calls: list[CallRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: CallRecord) -> None:
        with self._lock:
            self.calls.append(record)

    @property
    def tokens(self) -> int:
        return sum(c.prompt_tokens + c.completion_tokens for c in self.calls)

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else max(0, self.budget - self.tokens)

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.tokens >= self.budget

    def summary(self) -> dict[str, Any]:
        """Totals per node and overall, for traces and benchmarks."""
        per_node: dict[str, dict[str, int]] = {}
        for c in self.calls:
            row = per_node.setdefault(c.node, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "fallbacks": 0})
            row["calls"] += c.outcome != "skipped_budget"
            row["prompt_tokens"] += c.prompt_tokens
            row["completion_tokens"] += c.completion_tokens
            row["fallbacks"] += c.outcome in ("fallback", "skipped_budget", "error")
        return {
            "calls": sum(r["calls"] for r in per_node.values()),
            "prompt_tokens": sum(c.prompt_tokens for c in self.calls),
            "completion_tokens": sum(c.completion_tokens for c in self.calls),
            "fallbacks": sum(r["fallbacks"] for r in per_node.values()),
            "usage_sources": sorted({c.usage_source for c in self.calls if c.usage_source != "none"}),
            "per_node": per_node,
            "records": [asdict(c) for c in self.calls],
        }


def _count_local(text: str) -> int:
    try:
        from memstrata.memory.tokens import TokenCounter

        return TokenCounter().count(text)
    except Exception:  # noqa: BLE001 - metering must never break a call
        return max(1, len(text) // 4)


def usage_of(prompt: Sequence[BaseMessage], reply: BaseMessage | None) -> tuple[int, int, str]:
    """(prompt tokens, completion tokens, source) from usage metadata, else the local tokenizer."""
    usage = getattr(reply, "usage_metadata", None) if reply is not None else None
    if usage and (usage.get("input_tokens") or usage.get("output_tokens")):
        return int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)), "usage_metadata"
    prompt_text = "\n".join(str(m.content) for m in prompt)
    reply_text = ""
    if reply is not None:
        reply_text = str(reply.content) + "".join(json.dumps(t.get("args", {})) for t in getattr(reply, "tool_calls", []))
    return _count_local(prompt_text), _count_local(reply_text) if reply is not None else 0, "local_tokenizer"


def is_transient(exc: BaseException) -> bool:
    """Transport trouble worth a retry: timeouts, dropped connections, 5xx, 429."""
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    if name in {"APIConnectionError", "APITimeoutError", "InternalServerError", "RateLimitError",
                "ConnectError", "ReadError", "RemoteProtocolError", "ReadTimeout", "ConnectTimeout"}:
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status == 429)


def extract_json(text: str) -> Any:
    """The first JSON object in a string (models often wrap it in prose or fences)."""
    if not text:
        return None
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidates = [fenced.group(1)] if fenced else []
    start = text.find("{")
    while start != -1 and len(candidates) < 4:
        depth = 0
        for i in range(start, min(len(text), start + 20000)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                candidates.append(text[start:i + 1])
                break
        start = text.find("{", start + 1)
    for c in candidates:
        try:
            return json.loads(c)
        except json.JSONDecodeError:
            continue
    return None


def _parse(schema: type[T], reply: AIMessage) -> T:
    """Validate a tool call, or a JSON object in the text, against the schema."""
    for call in getattr(reply, "tool_calls", None) or []:
        return schema.model_validate(call.get("args") or {})
    data = extract_json(str(reply.content))
    if data is None:
        msg = "the reply held no tool call and no JSON object"
        raise ValueError(msg)
    return schema.model_validate(data)


async def _invoke(model: BaseChatModel, schema: type[BaseModel], messages: list[BaseMessage],
                  *, node: str, timeout: float, retries: int) -> AIMessage:
    try:
        bound: Any = model.bind_tools([schema], tool_choice="any")
    except NotImplementedError:  # models without tool calling answer in JSON text
        bound = model
    config = {"tags": INTERNAL_TAGS, "run_name": f"memstrata.{node}", "metadata": {"memstrata_node": node}}
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(retries + 1),
        wait=wait_exponential(multiplier=0.2, max=2.0),
        retry=retry_if_exception(is_transient),
        reraise=True,
    ):
        with attempt:
            return await asyncio.wait_for(bound.ainvoke(messages, config=config), timeout=timeout)
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
) -> tuple[T, str]:
    """One structured decision: the model's, repaired once, or the fallback.

    Returns the value and how it was obtained (the ``outcome`` of its
    :class:`CallRecord`). ``validate`` may raise ``ValueError`` for answers that
    are well-formed but impossible (e.g. an id that was never offered).
    """
    if model is None:
        return fallback(), "offline"
    if meter.exhausted:
        meter.add(CallRecord(node, "skipped_budget"))
        return fallback(), "skipped_budget"
    messages: list[BaseMessage] = [SystemMessage(system), HumanMessage(user)]
    for attempt in range(2):
        try:
            reply = await _invoke(model, schema, messages, node=node, timeout=timeout, retries=retries)
        except Exception as exc:  # noqa: BLE001 - any transport failure ends in the fallback
            meter.add(CallRecord(node, "error", *usage_of(messages, None), error=f"{type(exc).__name__}: {exc}"[:300]))
            return fallback(), "error"
        p, c, src = usage_of(messages, reply)
        try:
            value = _parse(schema, reply)
            value = validate(value) if validate else value
        except (ValidationError, ValueError, TypeError) as exc:
            if attempt == 0 and not meter.exhausted:
                meter.add(CallRecord(node, "invalid", p, c, src, error=str(exc)[:300]))
                messages = [*messages, AIMessage(str(reply.content)[:2000] or "(no content)"),
                            HumanMessage(f"That output was invalid: {str(exc)[:500]}\nReply again with only a valid "
                                         f"{schema.__name__} tool call.")]
                continue
            meter.add(CallRecord(node, "fallback", p, c, src, error=str(exc)[:300]))
            return fallback(), "fallback"
        outcome = "repaired" if attempt else ("ok" if getattr(reply, "tool_calls", None) else "parsed_text")
        meter.add(CallRecord(node, outcome, p, c, src))
        return value, outcome
    return fallback(), "fallback"  # pragma: no cover
