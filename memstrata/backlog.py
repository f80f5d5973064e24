"""The derivations that deferred writes leave, run after the reply by a per-conversation, ordered background worker.

:class:`Backlog` is owned by one :class:`~memstrata.client.Memstrata` (``complete_later``, ``flush``, ``close``).
Process exit waits for every live backlog among threading's exit hooks, up to :data:`EXIT_FLUSH_SECONDS`; what a
hard kill leaves underived is found in the store and derived by the next write of its conversation
(:mod:`memstrata.memory.pending`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("memstrata")

EXIT_FLUSH_SECONDS = 300.0  # how long process exit waits for background derivations before it leaves them pending


@dataclass
class _Job:
    """One queued derivation of one conversation."""

    user_id: str
    conversation_id: str
    sessions: list[str] | None
    overrides: dict[str, Any]
    future: concurrent.futures.Future[dict[str, Any]] = field(default_factory=concurrent.futures.Future)
    started: bool = False


class Backlog:
    """The derivations deferred writes left, run after the reply: per conversation one at a time and in order, on
    the owner's own event loop (a daemon thread, so sync and async callers alike return at once, and the work
    outlives the caller's loop). Owned by one :class:`Memstrata`; waited for by its ``flush`` and ``close``, and
    at process exit.
    """

    def __init__(
        self, loop: Callable[[], asyncio.AbstractEventLoop], work: Callable[..., Awaitable[dict[str, Any]]]
    ) -> None:
        self._loop, self._work = loop, work
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str], list[_Job]] = {}  # per conversation: the running job, then the queued
        self._thread: int | None = None  # the loop's thread, where waiting for a job would hang
        _wait_at_exit(self)

    def submit(
        self, user_id: str, conversation_id: str, sessions: Sequence[str] | None, overrides: dict[str, Any]
    ) -> concurrent.futures.Future[dict[str, Any]]:
        """Queue the conversation's derivation (joined with a queued one that has not started); its future."""
        key = (user_id, conversation_id)
        with self._lock:
            queue = self._queues.setdefault(key, [])
            last = queue[-1] if queue else None
            if last is not None and not last.started and last.overrides == overrides:
                both = None if last.sessions is None or sessions is None else [*last.sessions, *sessions]
                last.sessions = list(dict.fromkeys(both)) if both is not None else None
                return last.future
            job = _Job(user_id, conversation_id, list(sessions) if sessions is not None else None, dict(overrides))
            queue.append(job)
            if len(queue) == 1:
                asyncio.run_coroutine_threadsafe(self._drain(key), self._loop())
        return job.future

    async def _drain(self, key: tuple[str, str]) -> None:
        self._thread = threading.get_ident()
        while True:
            with self._lock:
                job = self._queues[key][0]
                job.started = True
            stats: dict[str, Any] = {}
            error: Exception | None = None
            try:
                stats = await self._work(
                    user_id=job.user_id, conversation_id=job.conversation_id, sessions=job.sessions, **job.overrides
                )
            except Exception as exc:  # the next write of the conversation derives it: log, and keep the queue going
                logger.exception("background derivation of %s/%s failed", job.user_id, job.conversation_id)
                error = exc
            with self._lock:  # out of the queue before it is done: a waiter that sees it done finds it gone
                queue = self._queues[key]
                queue.pop(0)
                last = not queue
                if last:
                    del self._queues[key]
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(stats)
            if last:
                return

    def abandon(self) -> None:
        """Fail what is still queued (its loop was stopped): the store keeps it pending for the next write."""
        with self._lock:
            jobs = [job for queue in self._queues.values() for job in queue]
            self._queues.clear()
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(RuntimeError("closed before the derivation ran; the next write does it"))

    def futures(
        self, user_id: str | None = None, conversation_id: str | None = None
    ) -> list[concurrent.futures.Future[dict[str, Any]]]:
        """The futures of the derivations queued or running for ``user_id`` (``conversation_id``), ``None``: all."""
        with self._lock:
            return [
                job.future
                for (user, conv), queue in self._queues.items()
                if user_id in (None, user) and conversation_id in (None, conv)
                for job in queue
            ]

    def wait(
        self, user_id: str | None = None, conversation_id: str | None = None, timeout: float | None = None
    ) -> bool:
        """Wait until nothing of ``user_id`` (``conversation_id``) is queued; ``False`` if ``timeout`` passed first."""
        if threading.get_ident() == self._thread:
            return not self.futures(user_id, conversation_id)  # on the loop that runs them: waiting would hang
        deadline = None if timeout is None else time.monotonic() + timeout
        while pending := self.futures(user_id, conversation_id):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            _, undone = concurrent.futures.wait(pending, timeout=left)
            if undone and deadline is not None and time.monotonic() >= deadline:
                return False
        return True


_BACKLOGS: weakref.WeakSet[Backlog] = weakref.WeakSet()  # every live owner's backlog, for the exit flush
_EXIT_HOOK = threading.Lock()
_HOOKED: list[bool] = []  # the exit hook is registered (once per process)


def _wait_at_exit(backlog: Backlog) -> None:
    """Have process exit wait for ``backlog`` (up to :data:`EXIT_FLUSH_SECONDS`).

    The wait runs among threading's exit hooks, before ``concurrent.futures`` shuts its thread pools down (the
    derivation runs its store reads in them); :mod:`atexit` runs after, too late. A hard kill runs no hook at all.
    """
    with _EXIT_HOOK:
        if not _HOOKED:
            _HOOKED.append(True)
            import concurrent.futures.thread  # noqa: F401 - its exit hook is registered first, so it runs after ours

            register = getattr(threading, "_register_atexit", None)
            if register is None:  # pragma: no cover - every CPython from 3.9 has it
                import atexit

                register = atexit.register
            register(_wait_for_backlogs)
        _BACKLOGS.add(backlog)


def _wait_for_backlogs() -> None:
    for backlog in list(_BACKLOGS):
        if not backlog.wait(timeout=EXIT_FLUSH_SECONDS):
            logger.warning("exit: background derivations still pending; the next write of each conversation does them")
