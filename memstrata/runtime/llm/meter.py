"""The :class:`Meter`: every LLM call of a query or an ingest, its tokens, and the token budget.

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
``attempts=3``. Tokens come from the reply's usage metadata, else from the local tokenizer
(:func:`usage_of`).

Example:
    >>> meter = Meter(budget=100)
    >>> meter.remaining
    100
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage

GOOD_OUTCOMES = ("ok", "parsed_text", "repaired")


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


def branch_budget(budget: int | None, calls: Sequence[Mapping[str, Any]], ways: int) -> int | None:
    """The ceiling on a query's spent tokens that each of ``ways`` parallel ``Send`` branches is given (its
    payload's ``llm_budget``): what ``calls`` (the query's records so far) spent, plus an equal share of what the
    budget has left, rounded down. The shares sum to no more than what is left, so the branches together cannot
    overspend ``budget``, whatever their order; ``None`` without a budget.

    Example:
        >>> branch_budget(1000, [{"prompt_tokens": 100, "completion_tokens": 20}], 3)  # 120 + 880 // 3
        413
    """
    if budget is None:
        return None
    spent = sum(c["prompt_tokens"] + c["completion_tokens"] for c in calls)
    return spent + max(0, budget - spent) // max(1, ways)


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
        >>> from langchain_core.messages import AIMessage
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
