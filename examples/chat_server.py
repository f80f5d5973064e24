"""A streaming chat server: one agent with memstrata's middleware serves every user over HTTP.

    export CHAT_TOKENS="tok-ann=ann,tok-bob=bob"      # demo bearer tokens; a real app verifies its own
    export MEMSTRATA_DATA_DIR=/srv/memstrata           # or MEMSTRATA_CHROMA_URL for several server processes
    uvicorn --factory examples.chat_server:create_app --host 127.0.0.1 --port 8000

Every request carries ``Authorization: Bearer <token>``; the user is the token's, never the request body's.

- ``POST /chat`` ``{"thread_id": ..., "message": ..., "time": ...}`` streams the reply as server-sent events
  (``event: token`` with ``{"text": ...}``, then ``event: done`` with the ids of the stored user message and reply).
  ``time`` is when the user wrote the message (ISO 8601; default: when the server got it). The middleware stores the
  turn in the user's memory as the run's last step, so it is stored before ``done`` is sent; what is derived from
  it (episodes, facts, ...) is built after the reply by the client's per-conversation worker, which the server's
  shutdown waits for.
- ``GET /memories?thread_id=...`` lists the user's stored messages, ``GET /search?q=...`` what memory finds for a
  question, and ``DELETE /memories/{thread_id}/{message_id}`` (or ``/memories/{thread_id}``) forgets one message (or
  a thread), in memory and in the agent's thread.

Starlette and uvicorn are what the LangGraph server runs on (``langgraph-api``, in the ``dev`` extra); FastAPI would
do as well. With no ``$MEMSTRATA_MODEL`` the agent runs on a scripted model (:func:`memory_echo`, and the server logs
so): it quotes the memory it was given, which is enough to see whose memory a user reaches.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage, RemoveMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from memstrata import Context, Memstrata
from memstrata.integrations.middleware import MemstrataMiddleware
from memstrata.runtime.resolve import resolve_model
from memstrata.testing import ScriptedChatModel

TOKENS_ENV = "CHAT_TOKENS"
SYSTEM_PROMPT = "You are a helpful assistant with a long-term memory of your conversations with this user."
logger = logging.getLogger("memstrata.chat_server")


class ChatRequest(BaseModel):
    """One user message."""

    thread_id: str
    message: str
    time: datetime | None = None


def build_app(mem: Memstrata, model: BaseChatModel, *, tokens: Mapping[str, str]) -> Starlette:
    """The chat app: one agent for every user, who is named by the request's bearer token (``tokens``: token ->
    user).
    """
    agent = create_agent(
        model,
        tools=[],
        system_prompt=SYSTEM_PROMPT,
        checkpointer=InMemorySaver(),
        middleware=[MemstrataMiddleware(mem, context_budget=600)],
    )
    # Memstrata's blocking API (delete rebuilds a session through it) runs on one event loop per instance, which two
    # worker threads cannot share: deletions take turns.
    deleting = asyncio.Lock()

    async def chat(request: Request) -> StreamingResponse:
        user = caller(request)
        try:
            body = ChatRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from None
        said = (body.time or datetime.now(UTC)).isoformat()
        message = HumanMessage(body.message, id=str(uuid4()), additional_kwargs={"timestamp": said})
        run = agent.astream(
            {"messages": [message]},
            thread_config(user, body.thread_id),
            context={"user_id": user, "conversation_id": body.thread_id},
            stream_mode="messages",
        )
        return StreamingResponse(reply_events(run, message.id or ""), media_type="text/event-stream")

    async def memories(request: Request) -> JSONResponse:
        user, thread = caller(request), request.query_params.get("thread_id")
        found = await asyncio.to_thread(mem.memories, user_id=user, conversation_id=thread, limit=1000)
        shown = ("id", "conversation_id", "speaker", "text", "time")
        return JSONResponse([{k: m.get(k) for k in shown} for m in found])

    async def search(request: Request) -> JSONResponse:
        found = await mem.aretrieve(request.query_params.get("q", ""), user_id=caller(request))
        keep = {"turn_id", "conversation_id", "speaker", "text", "time"}
        return JSONResponse([e.model_dump(include=keep) for e in found.evidence])

    async def forget(request: Request) -> JSONResponse:
        user = caller(request)
        thread, message_id = request.path_params["thread_id"], request.path_params.get("message_id")
        async with deleting:
            try:
                removed = await asyncio.to_thread(mem.delete, message_id, user_id=user, conversation_id=thread)
            except LookupError as exc:
                raise HTTPException(status_code=404, detail=str(exc)) from None
        config = thread_config(user, thread)
        held = (await agent.aget_state(config)).values.get("messages", [])
        gone = [RemoveMessage(id=m.id) for m in held if m.id and message_id in (None, m.id)]
        if gone:  # the agent's thread would show the model the message again, and write it back
            await agent.aupdate_state(config, {"messages": gone})
        return JSONResponse(removed)

    app = Starlette(
        routes=[
            Route("/chat", chat, methods=["POST"]),
            Route("/memories", memories, methods=["GET"]),
            Route("/search", search, methods=["GET"]),
            Route("/memories/{thread_id}", forget, methods=["DELETE"]),
            Route("/memories/{thread_id}/{message_id}", forget, methods=["DELETE"]),
        ],
    )
    app.state.tokens = dict(tokens)
    return app


@asynccontextmanager
async def _closing(mem: Memstrata) -> AsyncIterator[None]:
    """The app's lifespan: on shutdown, the derivations still queued are built and the store is closed."""
    yield
    await mem.aclose()


def caller(request: Request) -> str:
    """The request's user: the one its bearer token names (401 without a known token)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    user = request.app.state.tokens.get(token) if scheme.lower() == "bearer" else None
    if user is None:
        raise HTTPException(status_code=401, detail="a valid bearer token is required")
    return user


def thread_config(user: str, thread_id: str) -> RunnableConfig:
    """The agent's checkpointer thread of one user's thread: keyed by both, so two users' ``"chat-1"`` never meet."""
    return {"configurable": {"thread_id": json.dumps([user, thread_id])}}


async def reply_events(run: AsyncIterator[Any], message_id: str) -> AsyncIterator[str]:
    """The agent's reply as server-sent events: each token, then ``done`` once the run (and its write) ended."""
    reply_id = None
    try:
        async for chunk, meta in run:
            if isinstance(chunk, AIMessageChunk) and meta.get("langgraph_node") == "model" and chunk.text:
                reply_id = reply_id or chunk.id
                yield sse("token", {"text": chunk.text})
    except Exception as exc:  # the reply has started: the client learns of the failure as an event
        logger.exception("chat run failed")
        yield sse("error", {"error": type(exc).__name__})
        return
    yield sse("done", {"message_id": message_id, "reply_id": reply_id})


def sse(event: str, data: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def memory_echo(messages: list[BaseMessage]) -> str:
    """A scripted reply that quotes the ``<memory>`` section the middleware put in the system message."""
    system = next((str(m.content) for m in messages if isinstance(m, SystemMessage)), "")
    # The last "<memory>" opens the section: the header before it names the tag too.
    memory = system.rpartition("<memory>")[2].partition("</memory>")[0].strip() if "<memory>" in system else ""
    return f"I remember: {' | '.join(memory.splitlines())}" if memory else "Noted."


def create_app() -> Starlette:
    """The app as ``uvicorn --factory`` builds it: the store and model from the environment, tokens from
    ``$CHAT_TOKENS`` (``token=user,token=user``).
    """
    pairs = (item.partition("=") for item in os.environ.get(TOKENS_ENV, "").split(",") if item.strip())
    tokens = {token.strip(): user.strip() for token, _, user in pairs if token.strip() and user.strip()}
    model = resolve_model(Context(user_id="chat-server"))
    if model is None:
        logger.warning("no MEMSTRATA_MODEL: the agent runs on a SCRIPTED model that quotes its memory")
        model = ScriptedChatModel(default=memory_echo)
    mem = Memstrata()
    app = build_app(mem, model, tokens=tokens)
    app.router.lifespan_context = lambda _app: _closing(mem)  # the factory owns the store: shutdown closes it
    return app
