"""Which retrieval steps may ask the model: the chat preset, and the budget of sequential calls (``llm_depth``).

A chat user waits for the first answer token through every model call made one after another before it; calls
made side by side (the selection batches, the sub-queries' follow-ups) cost one wait. Each node that calls the
model writes into its trace event how many calls it made one after another (``calls``); the sequential depth so far
is, for every step of every round, the most any of its parallel branches made, summed. A step whose calls would
leave no room for the answer within ``Context.llm_depth`` runs its deterministic offline method instead; with
``llm_retrieval="chat"`` every step does, and only the answer calls the model.

Example:
    >>> depth(
    ...     [
    ...         {"node": "decompose", "calls": 1},
    ...         {"node": "select_level1", "round": 1, "calls": 1},
    ...         {"node": "select_level1", "round": 1, "calls": 2},
    ...     ]
    ... )
    3
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from memstrata.context import Context
from memstrata.runtime.llm import CallRecord
from memstrata.runtime.step import Step


def depth(events: Iterable[Mapping[str, Any]]) -> int:
    """Sequential model calls so far: per node, iteration and round, the most any of its branches made, summed."""
    steps: dict[tuple[Any, ...], int] = {}
    for e in events:
        if e.get("calls"):
            key = (e["node"], e.get("iteration", 0), e.get("round", 0), e.get("wave", 0))
            steps[key] = max(steps.get(key, 0), int(e["calls"]))
    return sum(steps.values())


def sequential(records: Iterable[CallRecord]) -> int:
    """Calls that went to the model (a call the budget skipped never did)."""
    return sum(r.outcome != "skipped_budget" for r in records)


def affords(ctx: Context, events: Iterable[Mapping[str, Any]], calls: int = 1) -> bool:
    """Whether ``calls`` more sequential calls leave room for the answer's within ``llm_depth``."""
    if ctx.llm_retrieval == "chat":
        return False
    answer = 1 if ctx.generate_answer else 0
    return ctx.llm_depth is None or depth(events) + calls + answer <= ctx.llm_depth


def deciding(step: Step, state: Mapping[str, Any], calls: int = 1) -> Step:
    """``step`` when this step may ask the model (see :func:`affords`), else its offline twin on the same budget."""
    if step.model is None or affords(step.ctx, state.get("events", []), calls):
        return step
    return step.sibling(offline=True)
