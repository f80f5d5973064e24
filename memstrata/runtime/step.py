"""The one metered model call, :class:`Step`, and a query's token budget as its state carries it.

Every node that may ask the model (ingestion and retrieval alike) holds one :class:`Step`:
the context's model, a meter and, for a query, its budget. :meth:`Step.decide` is the
structured decision (pydantic schema, retries, deterministic fallback) of
:func:`memstrata.runtime.llm.decide`.

A query's meter lives in its run, not in the process. The state's ``llm_calls`` holds the record of every call
the query made (its reducer appends each node's and each ``Send`` branch's), and a node's meter is built from its
input (:meth:`Step.for_query`): spent is what those calls cost, and the budget is ``Context.llm_token_budget``,
or in a parallel branch the lower ceiling ``llm_budget`` of its payload. The node that fans out into n branches
gives each the tokens spent so far plus ``remaining // n``
(:func:`~memstrata.runtime.llm.meter.branch_budget`), so the branches together cannot spend more than was left,
whatever their order; a branch whose share cannot afford its call takes its fallback. Once they merge, the next
node's meter is again the budget less every call recorded. A state restored from a checkpoint, in any process,
holds the same calls and so meters the same.

Within one node run, the steps that ask the model side by side (:meth:`Step.sibling`) meter through their own
:class:`MeterView` of the run's one :class:`SharedMeter`. A call is admitted only if its prompt plus the completion
cap (``Context.llm_max_tokens``) fits in what is neither spent nor reserved by a call in flight; the reservation
is released when the call's record arrives. So, as long as a reply stays within the completion cap and the prompt
count is the one the budget was checked with, spent tokens never exceed the budget.

Where the budget stopped a query is read from the same records: the node of its first ``skipped_budget`` call
(:attr:`Step.halted`).

Example:
    >>> shared = SharedMeter(budget=1000, completion_cap=100)
    >>> a, b = MeterView(shared), MeterView(shared)
    >>> a.affords(500), b.affords(500)  # a's call is in flight, b's would not fit
    (True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel

from memstrata.context import Context
from memstrata.runtime.llm import CallRecord, Meter, decide
from memstrata.runtime.resolve import resolve_model

T = TypeVar("T", bound=BaseModel)


class SharedMeter:
    """Spent and reserved tokens of one node run: the calls it started from (a query's so far), then its steps'."""

    def __init__(self, *, budget: int | None, completion_cap: int, calls: list[CallRecord] | None = None) -> None:
        self.budget = budget
        self.completion_cap = completion_cap
        self.calls: list[CallRecord] = list(calls or [])
        self.reserved: dict[int, int] = {}

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
    """What one step hands to :func:`memstrata.runtime.llm.decide`: a window on its node run's shared meter."""

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
        """Tokens spent by the whole query so far (its earlier calls, and every view's)."""
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


class Step:
    """The model side of one node run: the model, and a meter on the budget its calls share.

    Build it with :meth:`for_query` (retrieval: the query's budget, less the calls its state holds) or
    :meth:`for_ingestion` (no token budget; every call is still metered and recorded).
    """

    def __init__(self, ctx: Context, shared: SharedMeter, *, ingest: bool = False) -> None:
        self.ctx = ctx
        self.model: BaseChatModel | None = resolve_model(ctx, ingest=ingest)
        self.shared = shared
        self.meter = MeterView(shared)

    @classmethod
    def for_query(cls, ctx: Context, calls: Sequence[dict[str, Any]] = (), *, ceiling: int | None = None) -> Step:
        """A retrieval node's step: its meter starts from ``calls``, the query's records so far (the state's
        ``llm_calls``), within ``Context.llm_token_budget``, or ``ceiling`` when a fan-out gave the branch a lower
        one (its payload's ``llm_budget``).
        """
        budget = ctx.llm_token_budget if ceiling is None else min(ceiling, ctx.llm_token_budget)
        records = [CallRecord(**c) for c in calls]
        return cls(ctx, SharedMeter(budget=budget, completion_cap=ctx.llm_max_tokens, calls=records))

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
        cannot afford halts the query (its ``skipped_budget`` record says where: :attr:`halted`).
        """
        system = self.ctx.prompt(prompt)
        return await decide(
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

    @property
    def halted(self) -> str | None:
        """The node where ``llm_token_budget`` stopped this query, if it has: that of its first call the budget
        could not afford, among the calls the state brought and those of this node run.
        """
        return next((c.node for c in self.shared.calls if c.outcome == "skipped_budget"), None)

    @property
    def records(self) -> list[dict[str, Any]]:
        """The calls this step made, as plain dicts for the state."""
        return [asdict(c) for c in self.meter.own]
