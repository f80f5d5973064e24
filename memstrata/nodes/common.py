"""Small helpers every node uses: progress events and the per-run LLM meter."""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from memstrata.llm import CallRecord, Meter

logger = logging.getLogger("memstrata")


def progress(stage: str, message: str, **extra: Any) -> None:
    """Send a custom stream event (``stream_mode="custom"``); silent outside a graph run."""
    event = {"stage": stage, "message": message, **extra}
    try:
        from langgraph.config import get_stream_writer

        get_stream_writer()(event)
    except (RuntimeError, LookupError):
        logger.debug("progress outside a run: %s", event)


def meter_from(records: list[dict[str, Any]] | None, budget: int | None) -> Meter:
    """A meter holding the calls already made in this run, so budgets span nodes."""
    return Meter(budget=budget, calls=[CallRecord(**r) for r in records or []])


def new_records(meter: Meter, before: int) -> list[dict[str, Any]]:
    """The call records a node added, as plain dicts for the state."""
    return [asdict(c) for c in meter.calls[before:]]
