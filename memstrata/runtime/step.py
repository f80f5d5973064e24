"""The one metered model call, :class:`Step`, and the token budget a query's nodes share.

Every node that may ask the model (ingestion and retrieval alike) holds one :class:`Step`:
the context's model, a meter and, for a query, its budget. :meth:`Step.decide` is the
structured decision (pydantic schema, retries, deterministic fallback) of
:func:`memstrata.runtime.llm.decide`.

One LLM token budget per query is shared by every node and every parallel ``Send`` branch.

Each node used to rebuild a :class:`~memstrata.runtime.llm.Meter` from the calls in its
input state, so two parallel branches each saw the same remaining budget and
together could overspend ``Context.llm_token_budget``. Here the first node of a
query opens a :class:`SharedMeter` under a run key (a string in the state), and
every node or branch meters through its own :class:`MeterView` of it.

A call is admitted only if its prompt plus the completion cap
(``Context.llm_max_tokens``) fits in what is neither spent nor reserved by a call
in flight; the reservation is released when the call's record arrives. So,
as long as a reply stays within the completion cap and the prompt count is the
one the budget was checked with, spent tokens never exceed the budget, whatever
the branches' order.

When the state was restored from a checkpoint in another process the run key is
unknown; the meter is then rebuilt from the calls the state carries.

Example:
    >>> shared = SharedMeter(budget=1000, completion_cap=100)
    >>> a, b = MeterView(shared), MeterView(shared)
    >>> a.affords(500), b.affords(500)  # a's call is in flight, b's would not fit
    (True, False)
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel

from memstrata.context import Context
from memstrata.runtime.llm import CallRecord, Meter, decide
from memstrata.runtime.resolve import resolve_model

T = TypeVar("T", bound=BaseModel)
_OPEN: OrderedDict[str, SharedMeter] = OrderedDict()
_MAX_OPEN = 256  # runs that died before their answer node must not pile up


class SharedMeter:
    """Spent and reserved tokens of one query, across nodes and branches."""

    def __init__(self, *, budget: int | None, completion_cap: int, calls: list[CallRecord] | None = None) -> None:
        self.budget = budget
        self.completion_cap = completion_cap
        self.calls: list[CallRecord] = list(calls or [])
        self.reserved: dict[int, int] = {}
        self.halted: str | None = None  # the node where the budget stopped the query, if it did
        self.opens: dict[str, int] = {}  # node -> runs that opened the runtime (open_node)

    @property
    def spent(self) -> int:
        """Prompt plus completion tokens of every call recorded so far."""
        return sum(c.prompt_tokens + c.completion_tokens for c in self.calls)

    def free(self, holder: int | None = None) -> int | None:
        """Tokens neither spent nor reserved by another holder (``None`` without a budget)."""
        if self.budget is None:
            return None
        others = sum(v for k, v in self.reserved.items() if k != holder)
        return max(0, self.budget - self.spent - others)

    def reserve(self, holder: int, prompt_tokens: int) -> bool:
        """Reserve the prompt plus the completion cap for ``holder``'s next call, if it fits."""
        free = self.free(holder)
        need = prompt_tokens + self.completion_cap
        if free is not None and need > free:
            return False
        self.reserved[holder] = need
        return True

    def settle(self, holder: int, record: CallRecord) -> None:
        """Record a finished call and release its reservation."""
        self.reserved.pop(holder, None)
        self.calls.append(record)


class MeterView(Meter):
    """What one node (or branch) hands to :func:`memstrata.runtime.llm.decide`: a window on the shared meter."""

    def __init__(self, shared: SharedMeter) -> None:
        super().__init__(budget=shared.budget)
        self.shared = shared
        self.own: list[CallRecord] = self.calls  # this view's calls (``calls``, so ``summary`` reads them)

    def add(self, record: CallRecord) -> None:
        """Record this view's call and settle it on the shared meter (releasing its reservation)."""
        self.own.append(record)
        self.shared.settle(id(self), record)

    @property
    def tokens(self) -> int:
        """Tokens spent by the whole query (every view of the shared meter)."""
        return self.shared.spent

    @property
    def remaining(self) -> int | None:
        """Tokens neither spent nor reserved by another view (``None`` without a budget)."""
        return self.shared.free(id(self))

    @property
    def exhausted(self) -> bool:
        """True once what is left to this view is no more than the completion cap."""
        free = self.shared.free(id(self))
        return free is not None and free <= self.shared.completion_cap

    def affords(self, prompt_tokens: int) -> bool:
        """Reserve the prompt plus the completion cap for this view's next call, if it fits."""
        return self.shared.reserve(id(self), prompt_tokens)


def open_meter(ctx: Context, calls: list[dict[str, Any]] | None = None) -> str:
    """Start a query's shared meter; returns its run key (kept in the state)."""
    key = uuid.uuid4().hex
    _OPEN[key] = SharedMeter(
        budget=ctx.llm_token_budget, completion_cap=ctx.llm_max_tokens, calls=[CallRecord(**c) for c in calls or []]
    )
    while len(_OPEN) > _MAX_OPEN:
        _OPEN.popitem(last=False)
    return key


def shared_meter(ctx: Context, key: str | None, calls: list[dict[str, Any]] | None = None) -> SharedMeter:
    """The query's meter; rebuilt from the state's call records when this process never saw the key."""
    if key and key in _OPEN:
        return _OPEN[key]
    meter = SharedMeter(
        budget=ctx.llm_token_budget, completion_cap=ctx.llm_max_tokens, calls=[CallRecord(**c) for c in calls or []]
    )
    if key:
        _OPEN[key] = meter
    return meter


def close_meter(key: str | None) -> None:
    """Forget a finished query's meter."""
    if key:
        _OPEN.pop(key, None)


class Step:
    """The model side of one node run: the model, and a meter on the budget its calls share.

    Build it with :meth:`for_query` (retrieval: the query's shared budget) or :meth:`for_ingestion`
    (no token budget; every call is still metered and recorded).
    """

    def __init__(self, ctx: Context, shared: SharedMeter, *, ingest: bool = False) -> None:
        self.ctx = ctx
        self.model: BaseChatModel | None = resolve_model(ctx, ingest=ingest)
        self.shared = shared
        self.meter = MeterView(shared)

    @classmethod
    def for_query(cls, ctx: Context, key: str | None, calls: list[dict[str, Any]] | None = None) -> Step:
        """A retrieval node's step on the query's meter (``key``: the state's ``run_key``; ``calls`` rebuild a
        meter this process never saw).
        """
        return cls(ctx, shared_meter(ctx, key, calls))

    @classmethod
    def for_ingestion(cls, ctx: Context) -> Step:
        """An ingestion stage's step on ``Context.ingest_model`` (else ``model``): metered, with no token budget."""
        return cls(ctx, SharedMeter(budget=None, completion_cap=ctx.llm_max_tokens), ingest=True)

    def sibling(self, *, offline: bool = False) -> Step:
        """Another step on the same model and budget, whose calls are counted apart (``offline``: no model, so
        every decision is its fallback). Nothing is resolved again.
        """
        twin = object.__new__(Step)
        twin.ctx, twin.model, twin.shared = self.ctx, None if offline else self.model, self.shared
        twin.meter = MeterView(self.shared)
        return twin

    async def decide(
        self,
        schema: type[T],
        prompt: str,
        user: str,
        *,
        node: str,
        fallback: Callable[[], T],
        validate: Callable[[T], T] | None = None,
        **fmt: Any,
    ) -> tuple[T, str]:
        """One structured decision with the named prompt (``fmt`` fills its placeholders); a call the budget
        cannot afford halts the query.
        """
        system = self.ctx.prompt(prompt)
        value, how = await decide(
            self.model,
            schema,
            system.format(**fmt) if fmt else system,
            user,
            node=node,
            fallback=fallback,
            meter=self.meter,
            validate=validate,
            timeout=self.ctx.llm_timeout_s,
            retries=self.ctx.llm_retries,
            max_tokens=self.ctx.llm_max_tokens,
        )
        if how == "skipped_budget" and self.shared.halted is None:
            self.shared.halted = node
        return value, how

    @property
    def halted(self) -> str | None:
        """The node where ``llm_token_budget`` stopped this query, if it has."""
        return self.shared.halted

    @property
    def records(self) -> list[dict[str, Any]]:
        """The calls this step made, as plain dicts for the state."""
        return [asdict(c) for c in self.meter.own]
