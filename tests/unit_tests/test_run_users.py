"""One agent, many users: every integration takes the user from the run, never another user's memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from conftest import HashEmbeddings
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from memstrata import Memstrata
from memstrata.errors import UserIdError
from memstrata.integrations.langchain import NO_MEMORY, MemstrataRetriever, memory_save_tool, memory_search_tool
from memstrata.integrations.middleware import MemstrataMiddleware
from memstrata.integrations.tenant import Tenant, run_tenant
from memstrata.testing import ScriptedChatModel

FACTS = {"ann": "My cat is named Miso.", "bob": "My cat is named Rex."}
NAMES = {"ann": "Miso", "bob": "Rex"}
QUESTION = "What is my cat named?"


@pytest.fixture
def mem(tmp_path) -> Memstrata:
    return Memstrata(path=tmp_path / "chroma", embeddings=HashEmbeddings())


def _run(user: str, how: str, thread: str) -> dict[str, Any]:
    """The invoke arguments that name ``user`` one way or the other: in the run's context or its config."""
    if how == "context":
        return {"config": {"configurable": {"thread_id": thread}}, "context": {"user_id": user}}
    return {"config": {"configurable": {"thread_id": thread, "user_id": user}}}


def _memory_section(call: list[BaseMessage]) -> str:
    system = next((str(m.content) for m in call if isinstance(m, SystemMessage)), "")
    return system.split("<memory>", 1)[1] if "<memory>" in system else ""


# ---- the middleware -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["context", "config"])
def test_one_agent_serves_two_users_each_sees_only_their_own_memory(mem: Memstrata, how: str) -> None:
    model = ScriptedChatModel(default="Noted.")
    agent = create_agent(model, tools=[], middleware=[MemstrataMiddleware(mem)], checkpointer=InMemorySaver())
    for user, fact in FACTS.items():  # each tells the same agent a fact
        agent.invoke({"messages": [("user", fact)]}, **_run(user, how, f"{user}-1"))
    for user in FACTS:
        turns = mem.store.get("turn", user_id=user, conversation_id=f"{user}-1")
        assert sorted(r.document for r in turns) == sorted([f"user: {FACTS[user]}", "assistant: Noted."])
    for user, other in (("ann", "bob"), ("bob", "ann")):  # each asks, in a new thread
        agent.invoke({"messages": [("user", QUESTION)]}, **_run(user, how, f"{user}-2"))
        memory = _memory_section(model.calls[-1])
        assert NAMES[user] in memory and NAMES[other] not in memory, (user, memory)
    assert set(mem.users()) == {"ann", "bob"}


async def test_async_agent_takes_the_user_from_a_dataclass_context(mem: Memstrata) -> None:
    @dataclass
    class AppContext:
        user_id: str
        conversation_id: str | None = None

    model = ScriptedChatModel(default="Noted.")
    agent = create_agent(model, tools=[], middleware=[MemstrataMiddleware(mem)], context_schema=AppContext)
    for user, fact in FACTS.items():
        await agent.ainvoke({"messages": [("user", fact)]}, context=AppContext(user, conversation_id="chat"))
    await agent.ainvoke({"messages": [("user", QUESTION)]}, context=AppContext("bob"))
    assert "Rex" in _memory_section(model.calls[-1]) and "Miso" not in _memory_section(model.calls[-1])
    assert mem.store.count("turn", user_id="ann", conversation_id="chat") == 2  # the context named the conversation
    assert mem.store.count("turn", user_id="bob", conversation_id="default") == 2  # no thread: the default


def test_the_run_beats_the_default_and_the_default_serves_runs_that_name_none(mem: Memstrata) -> None:
    model = ScriptedChatModel(default="Noted.")
    agent = create_agent(model, tools=[], middleware=[MemstrataMiddleware(mem, user_id="ann")])
    agent.invoke({"messages": [("user", FACTS["ann"])]})
    agent.invoke({"messages": [("user", FACTS["bob"])]}, context={"user_id": "bob"})
    assert mem.store.count("turn", user_id="ann") == 2 and mem.store.count("turn", user_id="bob") == 2
    agent.invoke({"messages": [("user", QUESTION)]}, config={"configurable": {"user_id": "bob"}})
    assert "Rex" in _memory_section(model.calls[-1]) and "Miso" not in _memory_section(model.calls[-1])


@pytest.mark.parametrize("settings", [{}, {"retrieve": "never"}])
def test_a_run_with_no_user_is_refused_and_writes_nothing(mem: Memstrata, settings: dict[str, Any]) -> None:
    model = ScriptedChatModel(default="Noted.")
    agent = create_agent(model, tools=[], middleware=[MemstrataMiddleware(mem, **settings)])
    with pytest.raises(UserIdError, match=r"no user_id for this call.*context=\{'user_id'.*'configurable'"):
        agent.invoke({"messages": [("user", FACTS["ann"])]}, {"configurable": {"thread_id": "t"}})
    assert mem.users() == []
    assert issubclass(UserIdError, ValueError)


def test_two_users_same_message_never_share_a_cached_retrieval(mem: Memstrata) -> None:
    for user, fact in FACTS.items():
        mem.ingest([{"speaker": "user", "text": fact}], user_id=user)
    model = ScriptedChatModel(default="Noted.")
    middleware = MemstrataMiddleware(mem, write_back=False)
    agent = create_agent(model, tools=[], middleware=[middleware])
    same = HumanMessage(QUESTION, id="same-id")  # the same message id and text from both users
    for user in ("ann", "bob"):
        agent.invoke({"messages": [same]}, context={"user_id": user})
    ann, bob = (_memory_section(call) for call in model.calls)
    assert "Miso" in ann and "Rex" not in ann and "Rex" in bob and "Miso" not in bob
    assert {key.user_id for key in middleware._cache} == {"ann", "bob"}  # one entry each


# ---- the retriever and the tools -------------------------------------------------------------------------------


def _ingest_facts(mem: Memstrata) -> None:
    for user, fact in FACTS.items():
        mem.ingest([{"speaker": "user", "text": fact}], user_id=user)


def test_the_retriever_takes_the_user_from_the_config_or_the_enclosing_run(mem: Memstrata) -> None:
    _ingest_facts(mem)
    retriever = MemstrataRetriever(memstrata=mem, k=4)
    for user, other in (("ann", "bob"), ("bob", "ann")):
        text = " ".join(d.page_content for d in retriever.invoke(QUESTION, config={"configurable": {"user_id": user}}))
        assert NAMES[user] in text and NAMES[other] not in text
    with pytest.raises(UserIdError, match="MemstrataRetriever: no user_id"):
        retriever.invoke(QUESTION)

    class State(TypedDict):
        found: list[str]

    def recall(state: State) -> dict[str, Any]:  # no config passed on: the run's own context names the user
        return {"found": [d.page_content for d in retriever.invoke(QUESTION)]}

    graph = StateGraph(State).add_node("recall", recall).add_edge(START, "recall").compile()
    found = " ".join(graph.invoke({"found": []}, context={"user_id": "bob"})["found"])
    assert "Rex" in found and "Miso" not in found


async def test_the_retriever_async_and_its_default(mem: Memstrata) -> None:
    _ingest_facts(mem)
    retriever = MemstrataRetriever(memstrata=mem, user_id="ann", k=4)
    own = " ".join(d.page_content for d in await retriever.ainvoke(QUESTION))
    other = " ".join(d.page_content for d in await retriever.ainvoke(QUESTION, {"configurable": {"user_id": "bob"}}))
    assert "Miso" in own and "Rex" not in own and "Rex" in other and "Miso" not in other
    assert "Rex" in (await retriever.aresult(QUESTION, config={"configurable": {"user_id": "bob"}})).context


def test_the_tools_take_the_user_from_the_config_and_never_show_it_to_the_model(mem: Memstrata) -> None:
    save, search = memory_save_tool(mem), memory_search_tool(mem)
    assert set(save.tool_call_schema.model_json_schema()["properties"]) == {"memory"}
    assert set(search.tool_call_schema.model_json_schema()["properties"]) == {"query"}
    for user, fact in FACTS.items():
        save.invoke({"memory": fact}, config={"configurable": {"user_id": user}})
    for user, other in (("ann", "bob"), ("bob", "ann")):
        found = search.invoke({"query": QUESTION}, config={"configurable": {"user_id": user}})
        assert NAMES[user] in found and NAMES[other] not in found
    assert search.invoke({"query": QUESTION}, config={"configurable": {"user_id": "carol"}}) == NO_MEMORY
    for tool, args in ((save, {"memory": "x"}), (search, {"query": QUESTION})):
        with pytest.raises(UserIdError, match="no user_id for this call"):
            tool.invoke(args)
    assert set(mem.users()) == {"ann", "bob"}


def _tool_call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{name}"}])


@pytest.mark.parametrize("how", ["context", "config"])
async def test_one_agent_with_the_tools_saves_and_searches_per_user(mem: Memstrata, how: str) -> None:
    model = ScriptedChatModel()
    agent = create_agent(model, tools=[memory_save_tool(mem), memory_search_tool(mem)])
    for user, fact in FACTS.items():
        model.script += [_tool_call("memory_save", {"memory": fact}), "Saved."]
        await agent.ainvoke({"messages": [("user", f"Remember: {fact}")]}, **_run(user, how, f"{user}-1"))
    for user, other in (("ann", "bob"), ("bob", "ann")):
        model.script += [_tool_call("memory_search", {"query": QUESTION}), "Done."]
        out = await agent.ainvoke({"messages": [("user", QUESTION)]}, **_run(user, how, f"{user}-2"))
        found = next(m for m in out["messages"] if isinstance(m, ToolMessage)).content
        assert NAMES[user] in found and NAMES[other] not in found
    model.script += [_tool_call("memory_save", {"memory": "I have a dog."})]
    with pytest.raises(UserIdError):
        await agent.ainvoke({"messages": [("user", "Remember: I have a dog.")]})
    assert set(mem.users()) == {"ann", "bob"}


# ---- the resolution itself -----------------------------------------------------------------------------------


def test_run_tenant_order_and_errors() -> None:
    @dataclass
    class Ctx:
        user_id: str = ""

    config = {"configurable": {"user_id": "cfg", "thread_id": "t1"}}
    assert run_tenant("x", user_id="dflt", context={"user_id": "ctx"}, config=config).user_id == "ctx"
    assert run_tenant("x", user_id="dflt", context=Ctx("ctx"), config=config).user_id == "ctx"
    assert run_tenant("x", user_id="dflt", context=Ctx(), config=config).user_id == "cfg"  # "" names nobody
    assert run_tenant("x", user_id="dflt", config={}) == Tenant("dflt", None)
    assert run_tenant("x", conversation_id="c", config=config, conversation_key="thread_id") == Tenant("cfg", "t1")
    assert run_tenant("x", context={"user_id": "u", "conversation_id": "c2"}, config=config).conversation_id is None
    with pytest.raises(UserIdError, match="x: no user_id"):
        run_tenant("x", config={})
    with pytest.raises(UserIdError, match=r"config\['configurable'\]\['user_id'\] must be a non-blank string"):
        run_tenant("x", user_id="dflt", config={"configurable": {"user_id": " "}})
    with pytest.raises(UserIdError, match="context user_id must be a non-blank string, got 42"):
        run_tenant("x", context={"user_id": 42}, config={})
