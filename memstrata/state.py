"""Graph states with narrow input and output schemas, and their reducers.

Ingestion carries ids and counts from stage to stage (the store is the hand-off);
retrieval carries typed :class:`~memstrata.memory.query.Query` and
:class:`~memstrata.memory.query.Hit` objects from decomposition to evidence.
"""

from __future__ import annotations

from operator import add
from typing import Annotated, Any

from typing_extensions import TypedDict  # pydantic needs it on Python 3.11 to build the API schemas

from memstrata.memory.query import Hit, Query, keep_best


def merge_dicts(left: dict[str, Any] | None, right: dict[str, Any] | None) -> dict[str, Any]:
    """Deep merge; numbers add up and lists concatenate, so parallel branches can each report counts."""
    out = dict(left or {})
    for key, value in (right or {}).items():
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            out[key] = merge_dicts(old, value)
        elif isinstance(value, list) and isinstance(old, list):  # noqa: SIM114 - apart, mypy types each `+` alone
            out[key] = old + value
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(old, (int, float)):
            out[key] = old + value
        else:
            out[key] = value
    return out


def union(left: list[list[str]] | None, right: list[list[str]] | None) -> list[list[str]]:
    """Append id pairs, keeping the first of each (parallel branches may report the same one)."""
    return [list(p) for p in dict.fromkeys(tuple(p) for p in [*(left or []), *(right or [])])]


def union_ids(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Append ids, keeping the first of each."""
    return list(dict.fromkeys([*(left or []), *(right or [])]))


# ---- ingestion -------------------------------------------------------------------
class IngestInput(TypedDict, total=False):
    """What a caller passes to the ingestion graph. ``user_id`` comes from the context."""

    source: Any  # a file path, parsed JSON, or a list of LangChain messages
    conversation_id: str | None
    only_conversation: str | None
    close: bool  # close the open tail of every session the write touches (a finished record)
    metadata: dict[str, Any] | None  # fields attached to every message (a message's own 'metadata' wins)
    # store the raw turns and their views, then end: what is derived from them waits for `complete` or the next write
    defer: bool
    # no new message: derive what deferred or stopped writes of `conversation_id` left undone
    complete: bool
    # with `complete`: the sessions a deferred write left (redone), the newest searched besides; default: search all
    pending: list[str] | None


class IngestOutput(TypedDict, total=False):
    """What the ingestion graph returns: the write's stats."""

    stats: dict[str, Any]


class IngestState(TypedDict, total=False):
    """The ingestion graph's state: the input, then the ids and counts each stage hands on."""

    source: Any
    conversation_id: str | None
    only_conversation: str | None
    close: bool
    metadata: dict[str, Any] | None  # fields attached to every message of the write
    defer: bool  # the write ends after the views (store_turns turns it off for a write that closes or changes)
    complete: bool  # no new message: find_pending reports the sessions to derive
    pending: list[str] | None
    # the write's present (naive UTC, ISO): Context.now, else its newest message's time, else the clock; a tail is
    # quiet when its latest message is episode_quiet_minutes older than this, so past-dated messages written one
    # at a time make the same episodes as one call of them
    present: str
    conversations: list[str]  # ids of the conversations in the input
    sessions: list[list[str]]  # [conversation_id, session_id] pairs with new or changed turns
    # [conversation_id, session_id, first position] of turns only appended to an open tail, closing nothing: they
    # wait raw in the tail, and only their turn contexts are written
    appended: list[list[Any]]
    repaired: list[str]  # conversations with a session an earlier write left unfinished (graph and tree redone)
    # conversations where this write deleted a closed episode (another writer closed it since it was read, or one of
    # its turns changed): its summary may be in the tree and its facts in the graph, so the later stages redo them
    replaced: Annotated[list[str], union_ids]
    episodes: Annotated[list[list[str]], union]  # [conversation_id, episode_id] pairs of the new episodes
    closed: Annotated[list[list[str]], union]  # the new episodes that are closed (the graph and tree take them)
    drafts: list[dict[str, Any]]  # the new episodes (payload and vector), stored by distill_batch
    stats: Annotated[dict[str, Any], merge_dicts]


class EpisodeBatch(TypedDict):
    """The payload ``Send`` gives one ``distill_batch`` branch: new episodes as ``{"episode", "vector"}`` dicts."""

    drafts: list[dict[str, Any]]


# ---- retrieval -------------------------------------------------------------------
class RetrievalInput(TypedDict):
    """What a caller passes to the retrieval graph. ``user_id`` and settings come from the context."""

    query: str


class RetrievalOutput(TypedDict, total=False):
    """What the retrieval graph returns: the query, answer, evidence, context (and its tokens) and trace."""

    query: str
    answer: str | None
    answer_error: str | None  # why the model's answer failed (unreachable, timing out, replying with nothing)
    evidence: list[dict[str, Any]]
    context: str
    context_tokens: int
    trace: dict[str, Any]


class RetrievalState(TypedDict, total=False):
    """The retrieval graph's state: the query's sub-queries, rounds, hits and answers as the nodes build them."""

    query: str
    run_key: str  # names the query's search working set (memstrata.runtime.node); made by its first node
    sub_queries: list[Query]
    active: list[Query]  # the queries searched this round (a wave of sub-queries, or a rewrite)
    searched: list[str]  # ids of the sub-queries searched so far (dependents wait for their prerequisites)
    iteration: int  # reflection rounds so far
    round: int  # Level-1 lookups so far (a dependent wave is a round too)
    level1: list[Hit]  # this round's top-k Level-1 events (HyMem's light evidence)
    coarse: list[Hit]  # this round's top-N Level-1 events (the deep module's pool)
    selected: Annotated[list[list[Any]], add]  # [round, key] of the Level-1 events the model chose
    selection_rounds: Annotated[list[int], add]  # the rounds whose coarse entries went through a selection branch
    candidates: Annotated[list[Hit], keep_best]  # raw turns, best score per turn
    pool: Annotated[list[dict[str, Any]], add]  # HyMem's M_i: the intermediate answers, one per round
    sub_answers: Annotated[list[dict[str, Any]], add]  # H-Mem's A_k: one answer per sub-query searched
    missing: Annotated[list[dict[str, Any]], add]  # missing-info queries: {iteration, round, query}
    halted: str | None  # the node where llm_token_budget stopped the query
    tier_fresh: bool  # the gate just went a tier deeper: the next lookup's candidates replace the candidates
    tier: int  # HMO's tier searched: 1 the cache, 2 with the buffer, 3 the archive; 0 no tiers (a small user)
    tier_probe: tuple[int, int]  # the archive's nearest summaries to the queries: how many the tier holds, of how many
    persona: dict[str, Any]  # the persona dimension the question takes (the best any lookup found), for the context
    scenes: Annotated[list[list[str]], union]  # [conversation_id, theme id] the theme path picked, for the context
    answer: str | None
    answer_error: str | None  # why the model's answer failed (the answer node sets it)
    evidence: list[dict[str, Any]]
    context: str
    context_tokens: int
    events: Annotated[list[dict[str, Any]], add]
    llm_calls: Annotated[list[dict[str, Any]], add]  # every call's record: a node's meter is built from them
    opens: Annotated[dict[str, int], merge_dicts]  # node -> its runs that opened the runtime, for the trace
    trace: dict[str, Any]


class SelectBatch(TypedDict):
    """The payload ``Send`` gives one Level-1 selection branch."""

    query: Query
    entries: list[Hit]
    round: int
    llm_calls: list[dict[str, Any]]  # the query's calls so far
    llm_budget: int | None  # this branch's ceiling on the query's spent tokens (memstrata.runtime.llm.branch_budget)


class SubQueryTask(TypedDict):
    """The payload ``Send`` gives one sub-query's reasoning branch (sub-answer and missing-info query)."""

    question: str  # the user's question, q0
    query: Query
    evidence: list[Hit]  # the candidates this sub-query found, best first
    prerequisites: list[dict[str, Any]]  # the sub-answers of the sub-queries it depends on
    pool: list[dict[str, Any]]
    main: bool  # the round's main query: its answer is the round's answer_i
    iteration: int
    round: int
    llm_calls: list[dict[str, Any]]  # the query's calls so far
    llm_budget: int | None  # this branch's ceiling on the query's spent tokens (memstrata.runtime.llm.branch_budget)
    offline: bool  # the token budget cannot afford this call before the answer's: the branch decides by its rule


__all__ = [
    "EpisodeBatch",
    "IngestInput",
    "IngestOutput",
    "IngestState",
    "RetrievalInput",
    "RetrievalOutput",
    "RetrievalState",
    "SelectBatch",
    "SubQueryTask",
    "keep_best",
    "merge_dicts",
    "union",
    "union_ids",
]
