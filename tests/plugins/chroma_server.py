"""A real Chroma server for tests: ``chroma run`` on a free loopback port, stopped at the end of the session.

The ``chroma`` command ships with chromadb. Without it the tests that need a
server are skipped locally and fail under CI (``$CI`` set), which must run them.
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
from typing import Any

import pytest

STARTUP_S = 60.0


@dataclass
class ChromaServer:
    """One running ``chroma run`` process."""

    host: str
    port: int
    path: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self) -> Any:
        import chromadb
        from chromadb.config import Settings

        return chromadb.HttpClient(host=self.host, port=self.port, settings=Settings(anonymized_telemetry=False))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _missing(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why}; CI must run the Chroma server tests")
    pytest.skip(why)


def _wait(server: ChromaServer, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"chroma run exited with {server.process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            server.client().heartbeat()
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.3)
    pytest.fail(f"chroma run did not answer within {STARTUP_S:.0f} s:\n{log.read_text()[-3000:]}")


def start_chroma(path: Path) -> ChromaServer:
    """Start ``chroma run`` on a free loopback port over ``path``; the caller stops it."""
    exe = Path(sys.executable).with_name("chroma")
    if not exe.is_file():
        _missing(f"{exe} is missing (it ships with chromadb)")
    port = _free_port()
    log = path.with_suffix(".log")
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "CHROMA_TELEMETRY": "False"}
    with log.open("wb") as out:
        proc = subprocess.Popen([str(exe), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    server = ChromaServer("127.0.0.1", port, path, proc)
    _wait(server, log)
    return server


def stop_chroma(server: ChromaServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=20)


@pytest.fixture(scope="session")
def chroma_server() -> Iterator[ChromaServer]:
    """A Chroma server shared by the session (tests use users of their own)."""
    with tempfile.TemporaryDirectory(prefix="memstrata-chroma-") as tmp:
        server = start_chroma(Path(tmp) / "data")
        try:
            yield server
        finally:
            stop_chroma(server)
