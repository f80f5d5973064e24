"""What every node shares: progress events, and :class:`LLMStep`, the one way a node makes a metered model call.

Example:
    >>> step = LLMStep(Context(user_id="u"), calls=[])          # doctest: +SKIP
    >>> value, how = await step.decide(Plan, "DECOMPOSE_PROMPT", "<question>...</question>",
    ...                                node="decompose", fallback=lambda: Plan(...))   # doctest: +SKIP
    >>> {"llm_calls": step.records}                              # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel

from memstrata.context import Context
from memstrata.llm import CallRecord, Meter, decide
from memstrata.resources import resolve_model

logger = logging.getLogger("memstrata")
T = TypeVar("T", bound=BaseModel)


def progress(stage: str, message: str, **extra: Any) -> None:
    """Send a custom stream event (``stream_mode="custom"``); silent outside a graph run."""
    event = {"stage": stage, "message": message, **extra}
    try:
        from langgraph.config import get_stream_writer

        get_stream_writer()(event)
    except (RuntimeError, LookupError):
        logger.debug("progress outside a run: %s", event)


class LLMStep:
    """The model side of one node run: the model, a meter that already holds this run's calls, and its budget.

    Args:
        ctx: the run context (model, budget, timeouts, prompt overrides).
        calls: the call records already in the state (``None`` for ingestion, which has no query budget).
    """

    def __init__(self, ctx: Context, calls: list[dict[str, Any]] | None = None, *, budget: bool = True) -> None:
        self.ctx = ctx
        self.model: BaseChatModel | None = resolve_model(ctx)
        self.meter = Meter(budget=ctx.llm_token_budget if budget else None,
                           calls=[CallRecord(**r) for r in calls or []])
        self._before = len(self.meter.calls)

    async def decide(self, schema: type[T], prompt: str, user: str, *, node: str, fallback: Callable[[], T],
                     validate: Callable[[T], T] | None = None, **fmt: Any) -> tuple[T, str]:
        """One structured decision with the named prompt (``fmt`` fills its placeholders); see :func:`llm.decide`."""
        system = self.ctx.prompt(prompt)
        return await decide(self.model, schema, system.format(**fmt) if fmt else system, user, node=node,
                            fallback=fallback, meter=self.meter, validate=validate,
                            timeout=self.ctx.llm_timeout_s, retries=self.ctx.llm_retries)

    @property
    def records(self) -> list[dict[str, Any]]:
        """The calls this step added, as plain dicts for the state."""
        return [asdict(c) for c in self.meter.calls[self._before:]]
