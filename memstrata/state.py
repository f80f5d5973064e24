"""Graph states with narrow input and output schemas, and their reducers."""

from __future__ import annotations

from operator import add
from typing import Annotated, Any

from typing_extensions import TypedDict  # pydantic needs it on Python 3.11 to build the API schemas


def merge_dicts(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Deep merge; numbers add up and lists concatenate, so parallel branches can each report counts."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            out[key] = merge_dicts(old, value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(old, (int, float)):
            out[key] = old + value
        elif isinstance(value, list) and isinstance(old, list):
            out[key] = old + value
        else:
            out[key] = value
    return out


def dedupe_by_id(left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Append items, replacing any earlier item with the same (conversation, ``id``); keeps first position."""

    def key(item: dict[str, Any]) -> tuple[str, str]:
        return item.get("conversation_id", ""), item["id"]

    out = {key(item): item for item in (left or [])}
    for item in right or []:
        out[key(item)] = {**out.get(key(item), {}), **item}
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


def keep_best(left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Candidate turns by id; a turn found again keeps its best score, its parts and its best level."""
    out = {item["id"]: item for item in (left or [])}
    for item in right or []:
        old = out.get(item["id"])
        if old is None or item["score"] > old["score"]:
            merged = dict(item)
            if old is not None and old.get("level") == "level1":
                merged["level"] = "level1"
            out[item["id"]] = merged
    return list(out.values())


class RetrievalInput(TypedDict):
    """What a caller passes to the retrieval graph. ``user_id`` and settings come from the context."""

    query: str


class RetrievalOutput(TypedDict, total=False):
    query: str
    answer: str | None
    evidence: list[dict[str, Any]]
    context: str
    context_tokens: int
    trace: dict[str, Any]


class RetrievalState(TypedDict, total=False):
    query: str
    sub_queries: list[dict[str, Any]]
    active: list[dict[str, Any]]  # the queries searched this round: {"text", "scope", "hint_start", "hint_end", "weight"}
    iteration: int
    level1_hits: list[dict[str, Any]]
    coarse: list[dict[str, Any]]
    selected_level1: Annotated[list[str], add]
    candidates: Annotated[list[dict[str, Any]], keep_best]
    path: str
    light_answer: str | None
    answer: str | None
    evidence: list[dict[str, Any]]
    context: str
    context_tokens: int
    events: Annotated[list[dict[str, Any]], add]
    llm_calls: Annotated[list[dict[str, Any]], add]
    trace: dict[str, Any]


class SelectBatch(TypedDict):
    """The payload ``Send`` gives one Level-1 selection branch."""

    query: str
    entries: list[dict[str, Any]]
    llm_calls: list[dict[str, Any]]
