"""One agent, many users, over HTTP: ``examples/chat_server.py`` under uvicorn, twenty users chatting at once.

One compiled agent (``create_agent`` with ``MemstrataMiddleware``, on the scripted model that quotes the memory it
is given) serves every request; the user is the request's bearer token. Twenty httpx clients stream their chats
concurrently, every one of them in threads named alike (``first``, ``second``). Afterwards each user's memory holds
exactly their own messages, each once, a question about another user's secret finds nothing of it, and ``memstrata
check`` finds nothing wrong; then every user deletes a message at once and it stays deleted.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import httpx
import pytest
import uvicorn
from conftest import REPO, HashEmbeddings, assert_store_ok
from langchain_core.messages import HumanMessage
from memstrata_bench.chroma_run import free_port

from memstrata import Memstrata
from memstrata.testing import ScriptedChatModel

USERS = [f"user{i:02d}" for i in range(20)]
SECRETS = {user: f"zq{i:02d}secret" for i, user in enumerate(USERS)}  # one word each, in no other text
TOKENS = {f"tok-{user}": user for user in USERS}
STARTUP_S = 30.0


def _load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chat_server", REPO / "examples" / "chat_server.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["chat_server"] = module
    spec.loader.exec_module(module)
    return module


chat_server = _load_example()


@dataclass
class Served:
    url: str
    mem: Memstrata
    model: ScriptedChatModel


@dataclass
class Reply:
    text: str
    tokens: int
    done: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def served(tmp_path) -> Iterator[Served]:
    """The example app on uvicorn, on a free loopback port, in a thread of this process; stopped afterwards."""
    mem = Memstrata(path=tmp_path / "chroma", embeddings=HashEmbeddings())
    model = ScriptedChatModel(default=chat_server.memory_echo)
    app = chat_server.build_app(mem, model, tokens=TOKENS)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail(f"uvicorn did not start on port {port}")
        time.sleep(0.05)
    try:
        yield Served(f"http://127.0.0.1:{port}", mem, model)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        mem.close()


def _client(served: Served, user: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=served.url, headers={"Authorization": f"Bearer tok-{user}"}, timeout=180)


async def _chat(client: httpx.AsyncClient, thread: str, text: str, *, at: datetime | None = None) -> Reply:
    """One message, its reply read as the server streams it."""
    body = {"thread_id": thread, "message": text, **({"time": at.isoformat()} if at else {})}
    reply, event = Reply("", 0), ""
    async with client.stream("POST", "/chat", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = json.loads(line.removeprefix("data: "))
                assert event != "error", data
                if event == "token":
                    reply.text, reply.tokens = reply.text + data["text"], reply.tokens + 1
                else:
                    reply.done = data
    assert reply.done, f"the stream ended without its done event: {reply.text!r}"
    return reply


async def _memories(client: httpx.AsyncClient, thread: str | None = None) -> list[dict[str, Any]]:
    response = await client.get("/memories", params={"thread_id": thread} if thread else {})
    response.raise_for_status()
    return response.json()


def _others(user: str) -> list[str]:
    return [word for other, word in SECRETS.items() if other != user]


async def _converse(served: Served, user: str, said_at: datetime) -> dict[str, Any]:
    """A user's first conversation: tells a secret and a hobby, then asks for the secret in a new thread."""
    async with _client(served, user) as client:
        secret = await _chat(client, "first", f"My secret word is {SECRETS[user]}.", at=said_at)
        hobby = await _chat(client, "first", "I also collect old stamps.")
        asked = await _chat(client, "second", "What is my secret word?")
        other = USERS[(USERS.index(user) + 1) % len(USERS)]
        search = await client.get("/search", params={"q": f"What is the secret word {SECRETS[other]}?"})
        search.raise_for_status()
        return {"replies": [secret, hobby, asked], "search": search.json(), "memories": await _memories(client)}


async def _forget_secret(served: Served, user: str, message_id: str) -> dict[str, Any]:
    """Deletes the secret, then goes on in the same thread (whose next write-back sends the whole thread)."""
    async with _client(served, user) as client:
        response = await client.delete(f"/memories/first/{message_id}")
        response.raise_for_status()
        again = await _chat(client, "first", "Do you remember what I told you?")
        return {"reply": again, "memories": await _memories(client), "first": await _memories(client, "first")}


def _secrets_in(call: list[Any]) -> set[str]:
    text = " ".join(str(m.content) for m in call)
    return {word for word in SECRETS.values() if word in text}


async def test_twenty_users_stream_at_once_and_each_sees_only_their_own_memory(served: Served) -> None:
    said_at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=7)
    results = await asyncio.gather(*(_converse(served, user, said_at) for user in USERS))
    assert await served.mem.aflush(timeout=600)  # what the replies left to derive, derived after them
    for user, got in zip(USERS, results, strict=True):
        secret, hobby, asked = got["replies"]
        assert secret.text == "Noted." and hobby.text == "Noted."  # nothing in memory yet but the thread itself
        assert SECRETS[user] in asked.text and asked.tokens > 10, asked.text  # streamed, from the user's own memory
        assert not any(word in asked.text for word in _others(user)), asked.text
        other = USERS[(USERS.index(user) + 1) % len(USERS)]
        assert got["search"] and all(SECRETS[other] not in hit["text"] for hit in got["search"]), got["search"]
        # every message stored exactly once: 2 threads, 3 messages and 3 replies
        memories = got["memories"]
        assert len(memories) == 6 == served.mem.store.count("turn", user_id=user)
        assert len({m["id"] for m in memories}) == 6
        assert {r.done[k] for r in got["replies"] for k in ("message_id", "reply_id")} == {m["id"] for m in memories}
        assert sorted(m["conversation_id"] for m in memories) == ["first"] * 4 + ["second"] * 2
        stored = {m["id"]: m for m in memories}[secret.done["message_id"]]
        assert stored["text"] == f"user: My secret word is {SECRETS[user]}."
        assert stored["time"] == said_at.isoformat()  # the time the request gave, not when it was written
        assert not any(word in m["text"] for m in memories for word in _others(user))
        assert_store_ok(served.mem.store, user)
    assert sorted(served.mem.users()) == USERS
    # the model never saw two users' secrets in one prompt (thread, memory and all)
    assert all(len(_secrets_in(call)) <= 1 for call in served.model.calls)

    secrets = {user: got["replies"][0].done["message_id"] for user, got in zip(USERS, results, strict=True)}
    calls_before = len(served.model.calls)
    forgotten = await asyncio.gather(*(_forget_secret(served, user, secrets[user]) for user in USERS))
    assert await served.mem.aflush(timeout=600)
    for user, got in zip(USERS, forgotten, strict=True):
        assert got["reply"].text.startswith("I remember:")  # the memory of thread "second" remains
        assert len(got["memories"]) == 7 == served.mem.store.count("turn", user_id=user)  # 6 - 1 + 2
        assert secrets[user] not in {m["id"] for m in got["memories"]}
        assert not any(m["text"].startswith("user: My secret word") for m in got["first"])
        assert_store_ok(served.mem.store, user)
    for call in served.model.calls[calls_before:]:  # the thread forgot the message too
        assert not any(isinstance(m, HumanMessage) and "secret word is" in str(m.content) for m in call)


async def test_a_request_without_a_known_token_is_refused(served: Served) -> None:
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as client:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic tok-user00"}):
            response = await client.post("/chat", json={"thread_id": "t", "message": "hi"}, headers=headers)
            assert response.status_code == 401, (headers, response.text)
        async with _client(served, "user00") as ann:
            assert (await ann.delete("/memories/nothing-here")).status_code == 404
            assert (await ann.post("/chat", json={"thread": "t", "text": "hi"})).status_code == 422
    assert served.mem.users() == []
