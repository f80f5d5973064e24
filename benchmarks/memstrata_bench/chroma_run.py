"""A ``chroma run`` server over one folder, on a free loopback port: what ``memstrata bench scale --server`` and the
test suite's server fixture start, and stop when they are done.

The ``chroma`` command ships with chromadb, beside the running interpreter. The server is ready when its heartbeat
answers; a server that exits or stays silent past ``timeout`` is stopped and reported with the end of its log.

Example:
    >>> server = start_chroma(Path("/tmp/store"))  # doctest: +SKIP
    >>> Memstrata(url=server.url)  # doctest: +SKIP
    >>> server.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0


class ChromaStartError(RuntimeError):
    """``chroma run`` is missing, exited, or did not answer in time (the message ends with its log)."""


def chroma_executable() -> Path:
    """Where the ``chroma`` command of this interpreter's chromadb is (it may be missing)."""
    return Path(sys.executable).parent / "chroma"


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

    def answers(self) -> bool:
        """Whether the server answers its heartbeat now."""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=2):
                return True
        except OSError:
            return False

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's output, for failure messages."""
        return self.log.read_bytes()[-chars:].decode(errors="replace") if self.log.is_file() else ""

    def peak_mb(self) -> float | None:
        """The server process's peak resident memory so far (Linux), else ``None``."""
        status = Path(f"/proc/{self.process.pid}/status")
        if not status.exists():
            return None
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return None

    def stop(self) -> None:
        """Ask the server to stop, kill it when it does not, and reap it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)


def free_port() -> int:
    """A free TCP port on the loopback address (for the servers the bench and the tests start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_chroma(path: Path, *, timeout: float = STARTUP_TIMEOUT_S) -> ChromaServer:
    """Start ``chroma run`` over ``path`` on a free loopback port and wait until it answers its heartbeat.

    Its output goes to ``<path>-chroma.log`` beside the folder. The caller stops it (:meth:`ChromaServer.stop`);
    a failed start is stopped here and raises :class:`ChromaStartError`.
    """
    exe = chroma_executable()
    if not exe.is_file():
        msg = f"{exe} is missing (it ships with chromadb)"
        raise ChromaStartError(msg)
    port, log = free_port(), path.parent / f"{path.name}-chroma.log"
    cmd = [str(exe), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    with log.open("wb") as out:  # the child keeps its own handle
        process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    server = ChromaServer("127.0.0.1", port, path, process, log)
    deadline = time.monotonic() + timeout
    while not server.answers():
        why = (
            f"exited with {process.returncode}"
            if process.poll() is not None
            else f"did not answer within {timeout:g} s"
            if time.monotonic() > deadline
            else ""
        )
        if why:
            server.stop()
            msg = f"chroma server {why}: {' '.join(cmd)}\n--- server output (tail) ---\n{server.log_tail()}"
            raise ChromaStartError(msg)
        time.sleep(0.25)
    return server
