"""What every node shares: progress events for ``stream_mode="custom"``, and which conversations a write touched.

A node's store, model step and search come from its one call into the runtime,
:func:`memstrata.runtime.node.open_node`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

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
    then those a stopped earlier write left unfinished (``repaired``), then those where it deleted a closed episode
    (``replaced``), each once, in that order.
    """
    return list(
        dict.fromkeys(
            [*(c for c, _ in state.get("closed", [])), *state.get("repaired", []), *state.get("replaced", [])]
        )
    )


async def conversations_to_redo(
    state: Mapping[str, Any], store: MemoryStore, user_id: str, lacking: Callable[[Any, str, list[str]], list[str]]
) -> tuple[list[str], list[str]]:
    """(touched, missing): the touched conversations, and those of the write's other conversations that ``lacking``
    (run on a worker thread) finds without what the stage builds (written before the stage existed, or stopped).
    """
    touched = touched_conversations(state)
    missing = await asyncio.to_thread(
        lacking, store, user_id, [c for c in state.get("conversations", []) if c not in touched]
    )
    return touched, missing


def per_write(state: Mapping[str, Any], per_episode: int, cap: int) -> int:
    """Model calls a stage may make for one write: ``per_episode`` per newly closed episode, at most ``cap``, so a
    message's cost does not grow with the memory it joins.
    """
    return min(cap, per_episode * max(1, len(state.get("closed", []))))
