"""A real ``langgraph dev`` server for tests: started in a folder laid out as the repository, offline, on a free
loopback port, and stopped (its whole process group) when the ``with`` block ends.

The server runs in a temp folder (its ``.langgraph_api`` persistence stays out of the repo) holding links to what
the config names; the tests of Studio (``tests/integration_tests/test_studio.py``) and of a locked deployment
(``tests/unit_tests/test_deploy_auth.py``) use it.

Example:
    >>> with langgraph_dev(home, "langgraph.json", {"MEMSTRATA_DATA_DIR": "/tmp/d"}) as url:  # doctest: +SKIP
    ...     urllib.request.urlopen(f"{url}/ok")
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
from memstrata_bench.chroma_run import free_port

STARTUP_S = 120.0


@contextmanager
def langgraph_dev(home: Path, config: str, env: Mapping[str, str]) -> Iterator[str]:
    """The URL of ``langgraph dev --config config`` run in ``home`` with ``env`` over an offline environment."""
    exe = Path(sys.executable).with_name("langgraph")
    if not exe.is_file():
        pytest.fail(f"{exe} is missing: install the dev extra (langgraph-cli[inmem])")
    port, log = free_port(), home / "server.log"
    cmd = [str(exe), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*cmd, "--config", config],
            cwd=home,
            env=_offline(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(proc, url, log)
        yield url
    finally:
        _stop(proc)


def _offline(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without a model, offline and untracked, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "MEMSTRATA_MODEL"}
    env.update(
        HF_HUB_OFFLINE="1",
        ANONYMIZED_TELEMETRY="False",
        LANGGRAPH_NO_VERSION_CHECK="true",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
    )
    env.update(extra)
    return env


def _wait_until_up(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"langgraph dev exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
    pytest.fail(f"langgraph dev was not up after {STARTUP_S:.0f}s:\n{log.read_text()[-4000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)
