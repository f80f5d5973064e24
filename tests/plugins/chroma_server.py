"""A real Chroma server for tests: ``chroma run`` on a free loopback port, stopped at the end of the session.

The ``chroma`` command ships with chromadb, next to the test interpreter. Without
it the tests that need a server are skipped locally and fail under CI (``$CI``
set), which must run them. ``tests/conftest.py`` lists this module in ``pytest_plugins``. The server is
:mod:`memstrata_bench.chroma_run`'s, which ``memstrata bench scale --server`` starts too.

Example:
    >>> def test_roundtrip(chroma_server):  # doctest: +SKIP
    ...     client = chroma_server.client()
    ...     assert client.heartbeat()
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from memstrata_bench.chroma_run import ChromaServer, ChromaStartError, chroma_executable
from memstrata_bench.chroma_run import start_chroma as _start

__all__ = ["ChromaServer", "chroma_server", "start_chroma"]

STARTUP_TIMEOUT_S = 60.0


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the Chroma server tests: pip install -e '.[dev]'")
    pytest.skip(reason)


def start_chroma(path: Path, *, timeout: float = STARTUP_TIMEOUT_S) -> ChromaServer:
    """:func:`memstrata_bench.chroma_run.start_chroma`, as a test wants it: skipped locally (failed under CI) when
    ``chroma`` is missing, and a test failure with the server's log when it does not start.
    """
    if not chroma_executable().is_file():
        _unavailable(f"{chroma_executable()} is missing (it ships with chromadb)")
    try:
        return _start(path, timeout=timeout)
    except ChromaStartError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def chroma_server() -> Iterator[ChromaServer]:
    """A Chroma server shared by the session; tests keep apart by their own users or collections."""
    # In memory when the machine has /dev/shm: the server fsyncs every write, which costs ~4x on a disk.
    shm = Path("/dev/shm")
    scratch = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="memstrata-chroma-", dir=scratch) as tmp:
        server = start_chroma(Path(tmp) / "data")
        try:
            yield server
        finally:
            server.stop()
