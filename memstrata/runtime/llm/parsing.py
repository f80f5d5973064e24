"""Reading a structured decision out of a reply: the tool call or a JSON object in the text, validated against the
schema, and the repair prompt when it fails validation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel

T = TypeVar("T", bound=BaseModel)
# A validator may index a list with a bad id or read a missing attribute: all of
# these mean "the model's answer is unusable", never "crash the graph".
_INVALID = (ValueError, TypeError, LookupError, AttributeError)


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
