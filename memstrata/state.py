"""Graph states with narrow input and output schemas, and their reducers."""

from __future__ import annotations

from operator import add
from typing import Annotated, Any, TypedDict


def merge_dicts(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Shallow merge; numbers add up so parallel branches can each report counts."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(out.get(key), (int, float)):
            out[key] = out[key] + value
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = out[key] + value
        else:
            out[key] = value
    return out


def dedupe_by_id(left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Append items, replacing any earlier item with the same ``id`` (keeps first position)."""
    out = {item["id"]: item for item in (left or [])}
    for item in right or []:
        out[item["id"]] = {**out.get(item["id"], {}), **item}
    return list(out.values())


class IngestInput(TypedDict, total=False):
    """What a caller passes to the ingestion graph. ``user_id`` comes from the context."""

    source: Any  # a file path, parsed JSON, or a list of LangChain messages
    conversation_id: str | None
    only_conversation: str | None


class IngestOutput(TypedDict, total=False):
    stats: dict[str, Any]


class IngestState(TypedDict, total=False):
    source: Any
    conversation_id: str | None
    only_conversation: str | None
    conversations: list[dict[str, Any]]
    touched: list[list[str]]  # [conversation_id, session_id] pairs with new or changed turns
    episodes: list[dict[str, Any]]
    summaries: Annotated[list[dict[str, Any]], dedupe_by_id]
    stats: Annotated[dict[str, Any], merge_dicts]


class SummaryBatch(TypedDict):
    """The payload ``Send`` gives one summarizer branch."""

    episodes: list[dict[str, Any]]
    turns: list[dict[str, Any]]


__all__ = ["IngestInput", "IngestOutput", "IngestState", "SummaryBatch", "add", "dedupe_by_id", "merge_dicts"]
