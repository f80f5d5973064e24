"""A real Chroma server for tests: ``chroma run`` on a free loopback port, stopped at the end of the session.

The ``chroma`` command ships with chromadb, next to the test interpreter. Without
it the tests that need a server are skipped locally and fail under CI (``$CI``
set), which must run them. ``tests/conftest.py`` lists this module in ``pytest_plugins``.

Example:
    >>> def test_roundtrip(chroma_server):  # doctest: +SKIP
    ...     client = chroma_server.client()
    ...     assert client.heartbeat()
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0


@dataclass
class ChromaServer:
    """One running ``chroma run`` process over a data folder."""

    host: str
    port: int
    path: Path
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        """The server's address, e.g. ``http://127.0.0.1:8123`` (what ``Memstrata(url=...)`` takes)."""
        return f"http://{self.host}:{self.port}"

    def client(self) -> Any:
        """A new ``chromadb.HttpClient`` of this server, telemetry off."""
        import chromadb
        from chromadb.config import Settings

        return chromadb.HttpClient(host=self.host, port=self.port, settings=Settings(anonymized_telemetry=False))

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's output, for failure messages."""
        return self.log.read_bytes()[-chars:].decode(errors="replace") if self.log.is_file() else ""

    def stop(self) -> None:
        """Ask the server to stop, kill it when it does not, and reap it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the Chroma server tests: pip install -e '.[dev]'")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(server: ChromaServer) -> bool:
    try:
        server.client().heartbeat()
    except Exception:  # noqa: BLE001 - any failure only means "not up yet"
        return False
    return True


def start_chroma(path: Path, *, timeout: float = STARTUP_TIMEOUT_S) -> ChromaServer:
    """Start ``chroma run`` over ``path`` on a free loopback port and wait until it answers a heartbeat.

    The caller stops it (:meth:`ChromaServer.stop`); on a failed start it is stopped here.
    """
    exe = Path(sys.executable).parent / "chroma"
    if not exe.is_file():
        _unavailable(f"{exe} is missing (it ships with chromadb)")
    port, log = _free_port(), path.parent / f"{path.name}-chroma.log"
    cmd = [str(exe), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    with log.open("wb") as out:  # the child keeps its own handle
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = ChromaServer("127.0.0.1", port, path, process, log)
    deadline = time.monotonic() + timeout
    while not _answers(server):
        why = (
            f"exited with {process.returncode}"
            if process.poll() is not None
            else f"did not answer within {timeout:g} s"
            if time.monotonic() > deadline
            else ""
        )
        if why:
            server.stop()
            pytest.fail(f"chroma server {why}: {' '.join(cmd)}\n--- server output (tail) ---\n{server.log_tail()}")
        time.sleep(0.25)
    return server


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
