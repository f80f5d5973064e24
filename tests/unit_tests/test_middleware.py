"""``MemstrataMiddleware`` in a real ``create_agent`` agent: memory in, turns written once."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import EXAMPLE, HashEmbeddings
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from memstrata import Memstrata
from memstrata.integrations.middleware import MemstrataMiddleware
from memstrata.testing import ScriptedChatModel


@tool
def clock() -> str:
    """The current time."""
    return "12:00"


@pytest.fixture
def mem(tmp_path) -> Memstrata:
    memory = Memstrata(path=tmp_path / "chroma", embeddings=HashEmbeddings())
    memory.ingest(EXAMPLE, user_id="u")
    return memory


def _system(call: list[BaseMessage]) -> str:
    return next((str(m.content) for m in call if isinstance(m, SystemMessage)), "")


def _agent(mem: Memstrata, model: ScriptedChatModel, **settings: Any) -> Any:
    middleware = MemstrataMiddleware(mem, user_id="u", **settings)
    return create_agent(model, tools=[clock], middleware=[middleware], checkpointer=InMemorySaver())


async def test_memory_reaches_the_model_and_turns_are_written_once(mem: Memstrata) -> None:
    model = ScriptedChatModel(
        script=[
            AIMessage("", tool_calls=[{"name": "clock", "args": {}, "id": "call-1"}]),  # one loop through a tool
            "Tom ran it two weeks before 14 April 2024.",
        ]
    )
    agent = _agent(mem, model)
    config = {"configurable": {"thread_id": "chat-1"}}
    await agent.ainvoke({"messages": [("user", "When did Tom run the Brighton half marathon?")]}, config)
    assert len(model.calls) == 2
    for call in model.calls:  # both model calls saw the memory, as data
        assert "<memory>" in _system(call) and "Brighton half marathon" in _system(call)
        assert "not instructions" in _system(call)
    turns = mem.store.get("turn", user_id="u", conversation_id="chat-1")
    assert sorted(r.document for r in turns) == sorted(
        ["user: When did Tom run the Brighton half marathon?", "assistant: Tom ran it two weeks before 14 April 2024."]
    )

    model.script.append("Priya works at Tidewater Labs.")
    await agent.ainvoke({"messages": [("user", "Where does Priya work?")]}, config)
    turns = mem.store.get("turn", user_id="u", conversation_id="chat-1")
    assert len(turns) == 4  # the second turn added only its own two messages
    assert "assistant: Priya works at Tidewater Labs." in {r.document for r in turns}


def test_sync_agent_and_settings(mem: Memstrata) -> None:
    model = ScriptedChatModel(script=["Noted."])
    agent = _agent(mem, model, retrieve="never", write_back=False)
    agent.invoke({"messages": [("user", "Where does Priya work?")]}, {"configurable": {"thread_id": "t2"}})
    assert "<memory>" not in _system(model.calls[0])
    assert mem.store.count("turn", user_id="u", conversation_id="t2") == 0
    model.script.append("Sure.")
    _agent(mem, model).invoke({"messages": [("user", "Where does Priya work?")]}, {"configurable": {"thread_id": "t3"}})
    assert "Tidewater" in _system(model.calls[-1])
    assert mem.store.count("turn", user_id="u", conversation_id="t3") == 2


async def test_nothing_of_memory_reaches_the_token_stream(mem: Memstrata) -> None:
    model = ScriptedChatModel(script=["Tom ran it in Brighton."])
    agent = _agent(mem, model)
    tokens = []
    async for chunk, _meta in agent.astream(
        {"messages": [("user", "When did Tom run the Brighton half marathon?")]},
        {"configurable": {"thread_id": "s"}},
        stream_mode="messages",
    ):
        tokens.append(str(chunk.content))
    assert "".join(tokens).strip() == "Tom ran it in Brighton."


def test_a_blank_default_user_is_refused(mem: Memstrata) -> None:
    with pytest.raises(ValueError, match="user_id must be a non-blank string"):
        MemstrataMiddleware(mem, user_id=" ")
