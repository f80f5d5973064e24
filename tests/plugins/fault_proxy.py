"""A fault-injecting OpenAI-compatible proxy for tests: it sits in front of a real server and breaks chosen calls.

Each request to ``/chat/completions`` takes the next fault from the proxy's plan
(:meth:`FaultProxy.plan`), or is forwarded untouched once the plan is empty; every
other path is always forwarded. It listens on 127.0.0.1 only, and the fixture stops it.

Faults:

- ``"500"``: a 500 with an OpenAI-style JSON error;
- ``"html"``: a 200 whose body is an HTML error page (what a misconfigured gateway returns);
- ``"hang"``: the request is read and never answered (until the client gives up or the proxy stops);
- ``"reset"``: the real reply starts (headers and, when streaming, the first events) and the
  connection is then reset (TCP RST);
- ``"empty"``: a 200 with an empty ``choices`` list (as one chunk and ``[DONE]`` when streaming);
- ``"429"``: a 429 with ``Retry-After: 1``.

Example:
    >>> def test_recovers(fault_proxy):  # doctest: +SKIP
    ...     fault_proxy.plan("500", "500")  # the third call goes through
    ...     model = make_chat_model(fault_proxy.base_url)
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

FAULTS = ("500", "html", "hang", "reset", "empty", "429")
RETRY_AFTER_S = 1
UPSTREAM_TIMEOUT_S = 300.0
HTML_PAGE = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"


class FaultProxy:
    """A running proxy: its plan of faults, and a log of what every completion request got.

    Args:
        upstream: the real server's base URL, e.g. ``http://127.0.0.1:8080/v1``.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.log: list[str] = []
        self._plan: deque[str] = deque()
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        """The proxy's OpenAI-compatible base URL (what ``ChatOpenAI(base_url=...)`` takes)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def plan(self, *faults: str) -> None:
        """Break the next completion requests, one fault each, in order (replaces any plan left)."""
        unknown = set(faults) - set(FAULTS)
        if unknown:
            msg = f"unknown fault(s) {sorted(unknown)}; known: {FAULTS}"
            raise ValueError(msg)
        with self._lock:
            self._plan = deque(faults)
            self.log.clear()

    def next_fault(self) -> str:
        """The fault for the request that just arrived (``"pass"`` when the plan is used up); logged."""
        with self._lock:
            fault = self._plan.popleft() if self._plan else "pass"
            self.log.append(fault)
            return fault

    def stop(self) -> None:
        """Release hanging requests, stop serving and close the socket."""
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            """Quiet: the test reads :attr:`FaultProxy.log` instead."""

        def do_GET(self) -> None:  # http.server's naming
            self._forward(b"")

        def do_POST(self) -> None:  # http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            fault = proxy.next_fault() if self.path.endswith("/chat/completions") else "pass"
            streaming = bool(json.loads(body or b"{}").get("stream"))
            if fault == "pass":
                self._forward(body)
            elif fault == "500":
                self._send(
                    500,
                    json.dumps({"error": {"message": "injected failure", "type": "server_error"}}).encode(),
                    "application/json",
                )
            elif fault == "429":
                self._send(
                    429,
                    json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}).encode(),
                    "application/json",
                    {"Retry-After": str(RETRY_AFTER_S)},
                )
            elif fault == "html":
                self._send(200, HTML_PAGE, "text/html")
            elif fault == "empty":
                self._empty(streaming)
            elif fault == "hang":
                proxy.stopping.wait()
                self.close_connection = True
            else:
                self._reset(body, streaming)

        def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def _empty(self, streaming: bool) -> None:
            reply = {
                "id": "chatcmpl-empty",
                "object": "chat.completion",
                "created": 0,
                "model": "smollm2",
                "choices": [],
                "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5},
            }
            if not streaming:
                self._send(200, json.dumps(reply).encode(), "application/json")
                return
            reply["object"] = "chat.completion.chunk"
            self._send(200, f"data: {json.dumps(reply)}\n\ndata: [DONE]\n\n".encode(), "text/event-stream")

        def _upstream(self, body: bytes) -> Any:
            request = urllib.request.Request(
                proxy.upstream + self.path.removeprefix("/v1"),
                data=body or None,
                headers={"Content-Type": "application/json"},
                method="POST" if body else "GET",
            )
            try:
                return urllib.request.urlopen(request, timeout=UPSTREAM_TIMEOUT_S)  # loopback only
            except urllib.error.HTTPError as exc:
                return exc

        def _forward(self, body: bytes) -> None:
            with self._upstream(body) as reply:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.headers.get("Content-Type", "application/json"))
                if reply.headers.get("Content-Length"):
                    self.send_header("Content-Length", reply.headers["Content-Length"])
                    self.end_headers()
                    self.wfile.write(reply.read())
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while chunk := reply.read1(65536):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        def _reset(self, body: bytes, streaming: bool) -> None:
            """Start the real reply, then reset the connection: the first events when streaming, else half the body."""
            with self._upstream(body) as reply:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.headers.get("Content-Type", "application/json"))
                if streaming:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    sent = b""
                    while sent.count(b"\n\n") < 3 and (chunk := reply.read1(65536)):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        sent += chunk
                else:
                    data = reply.read()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
            # SO_LINGER with a zero timeout: close() sends a RST instead of a FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

    return Handler


@pytest.fixture
def fault_proxy(llama_server: str) -> Iterator[FaultProxy]:
    """A proxy in front of the session's llama.cpp server, with an empty plan; stopped after the test."""
    proxy = FaultProxy(llama_server)
    try:
        yield proxy
    finally:
        proxy.stop()
