"""A scripted chat model: deterministic replies for tests, demos and the agent example.

Each call pops the next scripted reply. A reply is an ``AIMessage``, a string,
a ``dict`` (turned into a tool call of the bound schema), or a callable that
receives the prompt messages and returns one of those. When the script runs
out, the ``default`` reply is used. Streaming splits text into word tokens.

Example:
    >>> from pydantic import BaseModel
    >>> class Verdict(BaseModel):
    ...     finished: bool
    >>> model = ScriptedChatModel(script=[{"finished": True}])
    >>> model.bind_tools([Verdict]).invoke("done?").tool_calls[0]["args"]
    {'finished': True}
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

Reply = AIMessage | str | dict[str, Any] | Callable[[list[BaseMessage]], Any]


class ScriptedChatModel(BaseChatModel):
    """Replays a script of replies; records every prompt it was given in ``calls``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    script: list[Any] = Field(default_factory=list)
    default: Any = "I could not find that in memory."
    tool_name: str | None = None
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "memstrata-scripted"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Runnable:
        """A copy that replies to a ``dict`` in the script with a call of the first tool; it shares the
        script and the call log with this model.
        """
        name = convert_to_openai_tool(tools[0])["function"]["name"] if tools else None
        clone = self.model_copy(update={"tool_name": name})
        clone._lock = self._lock
        # Share the script and the call log with the unbound model.
        object.__setattr__(clone, "script", self.script)
        object.__setattr__(clone, "calls", self.calls)
        return clone

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        with self._lock:
            self.calls.append(list(messages))
            reply = self.script.pop(0) if self.script else self.default
        if callable(reply) and not isinstance(reply, BaseMessage):
            reply = reply(messages)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, AIMessage):
            return reply
        if isinstance(reply, dict):
            name = self.tool_name or "tool"
            return AIMessage(content="", tool_calls=[{"name": name, "args": reply, "id": f"call_{len(self.calls)}"}])
        return AIMessage(content=str(reply))

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._next(messages)
        if message.tool_calls:
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {"name": c["name"], "args": _json(c["args"]), "id": c["id"], "index": 0}
                        for c in message.tool_calls
                    ],
                )
            )
            return
        words = str(message.content).split(" ")
        for i, word in enumerate(words):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=word + (" " if i < len(words) - 1 else "")))
            if run_manager:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in self._stream(messages, stop):
            if run_manager:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


class CountingChatModel(ScriptedChatModel):
    """A deterministic model that answers every structured call with a schema-valid reply: a cost meter.

    No script: the reply is built from the bound tool's JSON schema and the prompt (a string field
    gets the first words of the prompt's last line, a list of strings one such line, numbers 0,
    booleans ``False``, lists of numbers or objects nothing). Its answers mean nothing; what it is
    for is counting what memstrata asks of a model (``memstrata bench chat``): ``calls`` holds every
    prompt, and the ingestion stats meter each call site's calls and prompt tokens.

    Example:
        >>> from pydantic import BaseModel
        >>> class Starts(BaseModel):
        ...     starts: list[int]
        ...     reason: str
        >>> model = CountingChatModel()
        >>> model.bind_tools([Starts]).invoke("[0] Ann: hi").tool_calls[0]["args"]
        {'starts': [], 'reason': '[0] Ann: hi'}
    """

    tool_schema: dict[str, Any] | None = None

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Runnable:
        """As :meth:`ScriptedChatModel.bind_tools`, keeping the first tool's JSON schema
        (``tool_schema``), which the replies are built from.
        """
        clone = super().bind_tools(tools, tool_choice=tool_choice, **kwargs)
        object.__setattr__(
            clone, "tool_schema", convert_to_openai_tool(tools[0])["function"]["parameters"] if tools else None
        )
        return clone

    def _next(self, messages: list[BaseMessage]) -> AIMessage:
        with self._lock:
            self.calls.append(list(messages))
        words = " ".join(str(messages[-1].content).strip().splitlines()[-1:]).split()[:12] if messages else []
        snippet = " ".join(words) or "nothing"
        if self.tool_schema is None:
            return AIMessage(content=snippet)
        args = _instance(self.tool_schema, self.tool_schema.get("$defs", {}), snippet)
        return AIMessage(
            content="", tool_calls=[{"name": self.tool_name or "tool", "args": args, "id": f"call_{len(self.calls)}"}]
        )


def _instance(schema: dict[str, Any], defs: dict[str, Any], snippet: str) -> Any:
    """A value valid for a JSON schema, built without any model (see :class:`CountingChatModel`)."""
    if "$ref" in schema:
        return _instance(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, snippet)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return _instance(schema[key][0], defs, snippet)
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return {name: _instance(sub, defs, snippet) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        items = schema.get("items", {})
        return [snippet] if items.get("type") == "string" else []
    if "enum" in schema:
        return schema["enum"][0]
    return {"string": snippet, "integer": 0, "number": 0.0, "boolean": False, "null": None}.get(str(kind), snippet)
