"""What every node shares: progress events for ``stream_mode="custom"``.

A node's store, model step and search come from its one call into the runtime,
:func:`memstrata.runtime.node.open_node`.
"""

from __future__ import annotations

import logging
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
