"""The model a context names, robust structured LLM decisions, streamed answers, metering and the token budget.

:func:`chat_model` turns ``Context.model`` (or, for ingestion, ``Context.ingest_model``) into a chat model: a
name becomes a ``ChatOpenAI`` at ``Context.base_url``; a name that would go to OpenAI's API with no
``OPENAI_API_KEY`` is a :class:`ModelConfigError`.

Every LLM decision goes through :func:`decide`: a pydantic schema, tool calling
(the schema bound as the one required tool), tenacity retries with backoff on
transport errors only, a per-attempt timeout, one repair attempt on a
validation error, and then the caller's deterministic fallback. The answer
node streams through :func:`stream_answer`, which bounds the wait for every
chunk and turns any failure into :class:`LLMError`. The :class:`Meter` records
every call, with its tokens and where the counts came from, and enforces
``Context.llm_token_budget``.

Outcomes recorded in :attr:`CallRecord.outcome`:

- ``ok``: a valid tool call; ``parsed_text``: a valid JSON object in the text;
- ``invalid``: a first reply that failed validation (a repair follows);
- ``repaired``: the repair reply was valid;
- ``fallback``: the repair failed too, the fallback was used;
- ``error``: the transport failed (after retries) or timed out, or the server's reply held no
  choices, the fallback was used;
- ``skipped_budget``: the token budget could not afford the call, the fallback was used.

Every record also says how many transport attempts it took (``attempts``) and why each
earlier one failed (``retried``): a call that succeeded after two 500s is ``ok`` with
``attempts=3``. A 429's ``Retry-After`` is honoured (up to the per-call timeout).

Example:
    >>> meter = Meter(budget=100)
    >>> meter.remaining
    100
    >>> is_transient(TimeoutError()), is_transient(ValueError())
    (True, False)
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, overload

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata, add_usage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

if TYPE_CHECKING:
    from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
    from langchain_core.runnables import RunnableConfig

    from memstrata.context import Context

logger = logging.getLogger(__name__)
T = TypeVar("T", bound=BaseModel)
ItemT = TypeVar("ItemT")
INTERNAL_TAGS = ["nostream", "memstrata:internal"]
OPENAI_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_KEY = "not-needed"  # OpenAI-compatible servers (llama.cpp, vLLM, Ollama) take any key
GOOD_OUTCOMES = ("ok", "parsed_text", "repaired")
# A validator may index a list with a bad id or read a missing attribute: all of
# these mean "the model's answer is unusable", never "crash the graph".
_INVALID = (ValueError, TypeError, LookupError, AttributeError)
_TRANSPORT_NAMES = {
    # Provider-neutral errors that LangChain integrations raise (langchain-core >= 1.x).
    "langchain_core.exceptions": ("ModelConnectionError", "ModelTimeoutError", "ModelAPIError", "ModelRateLimitError"),
    "openai": ("APIConnectionError", "APITimeoutError", "InternalServerError", "RateLimitError"),
    "httpx": ("TransportError",),
    "httpx2": ("TransportError",),  # what recent openai SDKs are built on
}


class LLMError(RuntimeError):
    """An LLM call failed in a way the caller must hear about (the answer stream)."""


class AnswerError(LLMError):
    """``ask`` got no answer because the model failed; ``result`` still holds the evidence, context and trace."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class EmptyReplyError(LLMError):
    """The server answered, but with no choice to read (an empty ``choices`` list, or a stream with no text)."""


class ModelConfigError(ValueError):
    """A model given by name cannot be called as configured: OpenAI's API with no ``OPENAI_API_KEY``."""


# ---- the model -----------------------------------------------------------------------


def _is_openai(base_url: str | None) -> bool:
    """Whether a model name is called at OpenAI's own API (no base URL, or api.openai.com)."""
    return not base_url or "api.openai.com" in base_url


def check_model_name(name: str, base_url: str | None, *, source: str = "model") -> None:
    """Refuse a model name that would be called at OpenAI's API with no ``OPENAI_API_KEY``.

    Args:
        name: the model name.
        base_url: the server it is called at (``None``: OpenAI's API).
        source: the setting it came from, for the message (``model``, ``$MEMSTRATA_MODEL``...).

    Raises:
        ModelConfigError: the name goes to OpenAI's API and ``OPENAI_API_KEY`` is not set.

    Example:
        >>> check_model_name("smollm2", "http://localhost:8080/v1")  # a local server needs no key
    """
    if os.environ.get(OPENAI_KEY_ENV) or not _is_openai(base_url):
        return
    msg = (
        f"{source}={name!r} names a model that memstrata calls through OpenAI's API, but OPENAI_API_KEY is not "
        "set. Set OPENAI_API_KEY; or, for an OpenAI-compatible server (llama.cpp, vLLM, Ollama...), set "
        "base_url (Memstrata(base_url=...), Context.base_url) or $MEMSTRATA_BASE_URL to its address, e.g. "
        "http://localhost:8080/v1; or pass a LangChain chat model object instead of a name."
    )
    raise ModelConfigError(msg)


def chat_model(ctx: Context, *, ingest: bool = False) -> BaseChatModel | None:
    """The chat model retrieval (or, with ``ingest``, ingestion) calls, or ``None`` offline.

    A model object is used as is. A name (see :meth:`Context.model_setting`) becomes a ``ChatOpenAI`` at
    ``Context.resolved_base_url``, with ``OPENAI_API_KEY`` or, at another server, a placeholder key.

    Raises:
        ModelConfigError: a name that would go to OpenAI's API with no ``OPENAI_API_KEY``.

    Example:
        >>> from memstrata.context import Context
        >>> chat_model(Context(user_id="u")) is None  # offline unless a model is configured
        True
    """
    source, spec = ctx.model_setting(ingest=ingest)
    if spec is None or isinstance(spec, BaseChatModel):
        return spec
    base_url = ctx.resolved_base_url
    check_model_name(str(spec), base_url, source=source)
    from langchain_openai import ChatOpenAI

    local = not _is_openai(base_url)
    return ChatOpenAI(
        model=str(spec),
        base_url=base_url,
        timeout=ctx.llm_timeout_s,
        max_retries=0,
        stream_usage=True,
        max_tokens=ctx.llm_max_tokens,
        # llama.cpp, vLLM and Ollama read max_tokens, not OpenAI's newer max_completion_tokens.
        extra_body={"max_tokens": ctx.llm_max_tokens} if local else None,
        api_key=os.environ.get(OPENAI_KEY_ENV) or PLACEHOLDER_KEY,
    )


@dataclass
class CallRecord:
    """One LLM call as the trace shows it (see the module docstring for outcomes)."""

    node: str
    outcome: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_source: str = "none"  # usage_metadata | local_tokenizer | none
    error: str | None = None
    seconds: float = 0.0
    attempts: int = 1
    retried: list[str] = field(default_factory=list)  # why each earlier transport attempt failed


@dataclass
class Meter:
    """LLM calls and tokens of one query or one ingest, with its budget."""

    budget: int | None = None
    calls: list[CallRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: CallRecord) -> None:
        """Append one call record (safe from several threads)."""
        with self._lock:
            self.calls.append(record)

    @property
    def tokens(self) -> int:
        """Prompt plus completion tokens spent so far."""
        return sum(c.prompt_tokens + c.completion_tokens for c in self.calls)

    @property
    def remaining(self) -> int | None:
        """Tokens left in the budget, or ``None`` when there is no budget."""
        return None if self.budget is None else max(0, self.budget - self.tokens)

    @property
    def exhausted(self) -> bool:
        """True once the spent tokens reach the budget."""
        return self.budget is not None and self.tokens >= self.budget

    def affords(self, prompt_tokens: int) -> bool:
        """Whether a call whose prompt alone costs ``prompt_tokens`` fits in the budget."""
        remaining = self.remaining
        return remaining is None or (remaining > 0 and prompt_tokens < remaining)

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
            "retries": sum(c.attempts - 1 for c in self.calls),
            "outcomes": {o: sum(c.outcome == o for c in self.calls) for o in sorted({c.outcome for c in self.calls})},
            "usage_sources": sorted({c.usage_source for c in self.calls if c.usage_source != "none"}),
            "per_node": per_node,
            "records": [asdict(c) for c in self.calls],
        }


# ---- token counting -----------------------------------------------------------------


def _count_local(text: str) -> int:
    try:
        from memstrata.memory.tokens import TokenCounter

        return TokenCounter().count(text)
    except Exception:  # noqa: BLE001 - metering must never break a call
        return max(1, len(text) // 4)


def _prompt_text(prompt: Sequence[BaseMessage]) -> str:
    return "\n".join(m.text for m in prompt)


def usage_of(prompt: Sequence[BaseMessage], reply: BaseMessage | None) -> tuple[int, int, str]:
    """(prompt tokens, completion tokens, source) from usage metadata, else the local tokenizer.

    Example:
        >>> usage_of([], AIMessage("hi", usage_metadata={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}))
        (3, 1, 'usage_metadata')
    """
    usage = getattr(reply, "usage_metadata", None) if reply is not None else None
    if usage and (usage.get("input_tokens") or usage.get("output_tokens")):
        return int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0)), "usage_metadata"
    if reply is None:
        return _count_local(_prompt_text(prompt)), 0, "local_tokenizer"
    calls = [*getattr(reply, "tool_calls", []), *getattr(reply, "invalid_tool_calls", [])]
    reply_text = reply.text + "".join(json.dumps(t.get("args")) for t in calls)
    return _count_local(_prompt_text(prompt)), _count_local(reply_text), "local_tokenizer"


# ---- error classification -------------------------------------------------------------


@lru_cache(maxsize=1)
def _transport_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for module_name, names in _TRANSPORT_NAMES.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        found += [getattr(module, n) for n in names if isinstance(getattr(module, n, None), type)]
    return tuple(found)


def is_transient(exc: BaseException) -> bool:
    """Transport trouble worth a retry: timeouts, dropped connections, 5xx, 429.

    Bad requests (4xx), authentication errors and malformed output are not
    transient: retrying them only burns time.
    """
    if isinstance(exc, _transport_errors()):
        return True
    if isinstance(exc, RuntimeError) and "Event loop is closed" in str(exc):
        # A pooled HTTP connection from an event loop that has since closed (each
        # asyncio.run() makes a new loop): the client drops it, and a retry connects afresh.
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status == 429)


def retry_after(exc: BaseException) -> float | None:
    """The seconds a rate-limited server asked to wait (``Retry-After``), when it said so in seconds.

    Example:
        >>> retry_after(ValueError()) is None
        True
    """
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        value = headers.get("retry-after")
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):  # the HTTP-date form: the usual backoff instead
        return None


def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"TimeoutError: no reply within {timeout:g}s"
    return f"{type(exc).__name__}: {exc}"[:300]


# ---- parsing -------------------------------------------------------------------------


def extract_json(text: str) -> Any:
    r"""The first JSON object in a string (models often wrap it in prose or fences).

    Example:
        >>> extract_json('Sure! ```json\n{"a": 1}\n``` hope it helps')
        {'a': 1}
        >>> extract_json("no json here") is None
        True
    """
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
                candidates.append(text[start : i + 1])
                break
        start = text.find("{", start + 1)
    for c in candidates:
        try:
            return json.loads(c)
        except json.JSONDecodeError:
            continue
    return None


def _shapes(data: Any) -> Iterator[Any]:
    """The object itself, then what small models wrap it in: ``{"Schema": {...}}``, ``{"arguments": "{...}"}``."""
    yield data
    if isinstance(data, dict) and len(data) == 1:
        inner = next(iter(data.values()))
        if isinstance(inner, str):
            inner = extract_json(inner)
        if isinstance(inner, dict):
            yield inner


def _validated(schema: type[T], data: Any) -> T:
    first: Exception | None = None
    for shape in _shapes(data):
        try:
            return schema.model_validate(shape)
        except _INVALID as exc:
            first = first or exc
    raise first or ValueError("nothing to validate")


def _parse(schema: type[T], reply: AIMessage) -> T:
    """Validate a tool call, or a JSON object in the text, against the schema."""
    for call in reply.tool_calls:
        return _validated(schema, call.get("args") or {})
    data = extract_json(reply.text)
    if data is None and reply.invalid_tool_calls:
        msg = f"the tool call arguments were not valid JSON: {str(reply.invalid_tool_calls[0].get('args'))[:200]}"
        raise ValueError(msg)
    if data is None:
        msg = "the reply held no tool call and no JSON object"
        raise ValueError(msg)
    return _validated(schema, data)


def _check(schema: type[T], reply: AIMessage, validate: Callable[[T], T] | None) -> T:
    value = _parse(schema, reply)
    checked = validate(value) if validate else None
    return value if checked is None else checked


def _repair(
    messages: list[BaseMessage], reply: AIMessage, exc: Exception, schema: type[BaseModel]
) -> list[BaseMessage]:
    """The conversation plus the bad reply (as plain text) and what was wrong with it."""
    calls = [*reply.tool_calls, *reply.invalid_tool_calls]
    shown = (reply.text + "".join(f"\n{c.get('name')}({c.get('args')})" for c in calls)).strip()
    return [
        *messages,
        AIMessage(shown[:2000] or "(no content)"),
        HumanMessage(
            f"That output was invalid: {str(exc)[:500]}\nReply again with only a valid {schema.__name__} tool call."
        ),
    ]


# ---- calling -------------------------------------------------------------------------


def _cap_kwargs(model: BaseChatModel, max_tokens: int | None) -> dict[str, Any]:
    """Call options that cap the reply at ``max_tokens`` (a smaller cap set on the model itself is kept).

    ``ChatOpenAI`` sends the cap as ``max_completion_tokens``; llama.cpp, vLLM and Ollama read
    ``max_tokens``, so a model pointed anywhere but api.openai.com gets that too (in ``extra_body``).
    Without a cap a small model can fill a schema's grammar with whitespace until the context ends.
    """
    own = getattr(model, "max_tokens", None)
    cap = min(max_tokens, own) if max_tokens is not None and isinstance(own, int) else max_tokens or own
    if cap is None or not hasattr(model, "max_tokens"):  # a model without the field takes no such option
        return {}
    base = str(getattr(model, "openai_api_base", None) or "")
    if not base or "api.openai.com" in base:
        return {"max_tokens": cap}
    return {"max_tokens": cap, "extra_body": {**(getattr(model, "extra_body", None) or {}), "max_tokens": cap}}


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


# ---- streaming -----------------------------------------------------------------------


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


# ---- a verdict, then a streamed answer --------------------------------------------------


class _Relay(BaseChatModel):
    """Streams text that another call produces as its own reply.

    The call that produces it is internal (tagged ``nostream``) because its reply opens with a verdict no chat UI
    may show; what follows the verdict is passed through this model, whose run is an ordinary streamed chat-model
    run: its tokens reach ``stream_mode="messages"``, ``astream_events`` and tracing like any answer's.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    pieces: Any = None  # an async iterator of text

    @property
    def _llm_type(self) -> str:
        return "memstrata-relay"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        msg = "the relay only streams"
        raise NotImplementedError(msg)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        async for text in self.pieces:
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))


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


async def relay_text(text: str, *, node: str) -> None:
    """Stream an answer that no call streams now (written earlier, e.g. HyMem's light answer) as a chat-model run's
    tokens, word by word, so a chat UI on ``stream_mode="messages"`` receives every answer the same way.

    Example:
        >>> import asyncio
        >>> asyncio.run(relay_text("Miso is a cat.", node="answer"))
    """

    async def words() -> AsyncIterator[str]:
        parts = text.split(" ")
        for i, word in enumerate(parts):
            yield word + (" " if i < len(parts) - 1 else "")

    config: RunnableConfig = {"run_name": f"memstrata.{node}", "metadata": {"memstrata_node": node}}
    async for _ in _Relay(pieces=words()).astream([HumanMessage(text)], config=config):
        pass
