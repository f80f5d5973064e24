"""What every node shares: progress events for ``stream_mode="custom"``, and which conversations a write touched.

A node's store, model step and search come from its one call into the runtime,
:func:`memstrata.runtime.node.open_node`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger("memstrata")


def progress(stage: str, message: str, **extra: Any) -> None:
    """Send a custom stream event (``stream_mode="custom"``); silent outside a graph run."""
    event = {"stage": stage, "message": message, **extra}
    try:
        from langgraph.config import get_stream_writer

        get_stream_writer()(event)
    except (RuntimeError, LookupError):
        logger.debug("progress outside a run: %s", event)


def touched_conversations(state: Mapping[str, Any]) -> list[str]:
    """The conversations an ingestion run must redo the per-conversation stages of: those with newly closed episodes,
    then those a stopped earlier write left unfinished (``repaired``), each once, in that order."""
    return list(dict.fromkeys([*(c for c, _ in state.get("closed", [])), *state.get("repaired", [])]))
