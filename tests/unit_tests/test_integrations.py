"""LangChain integration: the retriever (with the standard langchain-tests suite), the tool, an agent, the example."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLE, REPO, HashEmbeddings
from langchain.agents import create_agent
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_tests.integration_tests import RetrieversIntegrationTests

from memstrata import Memstrata
from memstrata.integrations.langchain import (
    NO_MEMORY,
    MemorySearchTool,
    MemstrataRetriever,
    evidence_document,
    memory_save_tool,
    memory_search_tool,
)
from memstrata.memory.search.packing import parse_context
from memstrata.memory.tokens import TokenCounter
from memstrata.testing import ScriptedChatModel

QUERY = "When did Tom run the Brighton half marathon?"
METADATA_KEYS = {
    "turn_id",
    "conversation_id",
    "session_id",
    "speaker",
    "time",
    "level",
    "score",
    "score_parts",
    "citation",
}


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Memstrata:
    """The example conversation for user ``u``, in an embedded store, with cheap deterministic embeddings."""
    mem = Memstrata(path=tmp_path_factory.mktemp("chroma"), embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="u")
    return mem


class TestStandardRetriever(RetrieversIntegrationTests):
    """The langchain-tests suite every LangChain retriever should pass."""

    @pytest.fixture(autouse=True)
    def _memory(self, memory: Memstrata) -> None:
        self.memory = memory

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return MemstrataRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"memstrata": self.memory, "user_id": "u", "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


# ---- retriever -----------------------------------------------------------------------------------------------


def test_documents_are_cited_verbatim_turns(memory: Memstrata) -> None:
    retriever = MemstrataRetriever(memstrata=memory, user_id="u", k=5)
    docs = retriever.invoke(QUERY)
    result = memory.retrieve(QUERY, user_id="u")
    assert len(docs) == 5
    for doc, ev in zip(docs, result.evidence, strict=False):  # same order: best first
        assert doc.page_content == f"{ev.speaker}: {ev.text}"
        assert set(doc.metadata) >= METADATA_KEYS
        assert doc.metadata["turn_id"] == ev.turn_id and doc.metadata["citation"] == f"[{ev.turn_id}]"
        assert doc.metadata["level"] in ("level1", "level2") and "semantic" in doc.metadata["score_parts"]
    assert any("Brighton half marathon" in d.page_content for d in docs)
    # Evidence is in MMR order (diversity), which always starts with the best-scored turn.
    assert docs[0].metadata["score"] == max(e.score for e in result.evidence)


def test_k_is_not_level1_k(memory: Memstrata) -> None:
    retriever = MemstrataRetriever(memstrata=memory, user_id="u", k=1)
    result = retriever.result(QUERY)
    lookups = [e for e in result.trace["events"] if e["node"] == "lookup_level1"]
    assert lookups and len(result.evidence) > 1  # the graph still read its level1_k summaries
    assert len(retriever.invoke(QUERY)) == 1


def test_context_budget_and_conversation_filter(memory: Memstrata) -> None:
    small = MemstrataRetriever(memstrata=memory, user_id="u", context_budget=60, k=50).result(QUERY)
    assert 0 < small.context_tokens <= 60
    memory.ingest(EXAMPLE, user_id="two")
    memory.ingest(
        {
            "conversation_id": "other",
            "messages": [{"speaker": "Tom", "text": "I ran the Brighton half marathon again this year, in 1 hour 49."}],
        },
        user_id="two",
    )
    both = MemstrataRetriever(memstrata=memory, user_id="two", k=50).invoke(QUERY)
    assert {d.metadata["conversation_id"] for d in both} == {"priya-tom", "other"}
    only = MemstrataRetriever(memstrata=memory, user_id="two", conversation_id="other", k=50).invoke(QUERY)
    assert only and {d.metadata["conversation_id"] for d in only} == {"other"}


def test_users_are_isolated(memory: Memstrata) -> None:
    other = EXAMPLE.read_text().replace("Tom", "Sam").replace("Priya", "Meera").replace("Brighton", "Leeds")
    memory.ingest(json.loads(other), user_id="other")
    assert MemstrataRetriever(memstrata=memory, user_id="nobody").invoke(QUERY) == []
    for user, own, foreign in (("u", "Tom", "Sam"), ("other", "Sam", "Tom")):
        docs = MemstrataRetriever(memstrata=memory, user_id=user, k=8).invoke(QUERY)
        text = " ".join(d.page_content for d in docs)
        assert docs and own in text and foreign not in text
        found = memory_search_tool(memory, user_id=user).invoke({"query": QUERY})
        assert own in found and foreign not in found


def test_settings_build_the_memory(memory: Memstrata, tmp_path: Path) -> None:
    retriever = MemstrataRetriever(settings={"path": tmp_path, "embeddings": HashEmbeddings()}, user_id="x")
    assert isinstance(retriever.memory, Memstrata) and retriever.invoke("anything") == []
    with pytest.raises(ValueError, match="either memstrata or settings"):
        MemstrataRetriever(memstrata=memory, settings={"path": tmp_path}, user_id="u")
    with pytest.raises(ValueError, match="user_id must be a non-blank string"):
        MemstrataRetriever(memstrata=memory, user_id=" ")
    with pytest.raises(ValueError, match="k"):
        MemstrataRetriever(memstrata=memory, user_id="u", k=0)
    with pytest.raises(ValueError, match="k must be >= 1"):
        MemstrataRetriever(memstrata=memory, user_id="u").invoke(QUERY, k=0)


async def test_sync_invoke_inside_a_running_loop(memory: Memstrata) -> None:
    retriever = MemstrataRetriever(memstrata=memory, user_id="u", k=2)
    assert len(retriever.invoke(QUERY)) == 2  # would fail with asyncio.run in this loop
    assert len(await retriever.ainvoke(QUERY, k=3)) == 3


@pytest.mark.integration
def test_real_minilm_finds_the_turn(tmp_path: Path, minilm: Any) -> None:
    mem = Memstrata(path=tmp_path, embeddings=minilm)
    mem.ingest(EXAMPLE, user_id="u")
    docs = MemstrataRetriever(memstrata=mem, user_id="u", k=3).invoke("Who is Priya's manager?")
    assert docs[0].metadata["turn_id"] == "s3:t2" and "Rui" in docs[0].page_content
    marathon = MemstrataRetriever(memstrata=mem, user_id="u", k=3).invoke(QUERY)
    assert any(d.metadata["turn_id"] == "s2:t2" for d in marathon)


def test_evidence_document_keeps_the_photo_caption() -> None:
    from memstrata.result import Evidence

    doc = evidence_document(
        Evidence(
            turn_id="D1:3",
            conversation_id="c",
            session_id="1",
            speaker="Ann",
            text="Look!",
            image_caption="a cat in a box",
            level="level2",
        )
    )
    assert doc.page_content == "Ann: Look!" and doc.metadata["image_caption"] == "a cat in a box"


# ---- tool ------------------------------------------------------------------------------------------------------


def test_tool_exposes_only_the_query(memory: Memstrata) -> None:
    tool = memory_search_tool(memory, user_id="u")
    assert isinstance(tool, MemorySearchTool)
    params = convert_to_openai_tool(tool)["function"]["parameters"]
    assert set(params["properties"]) == {"query"} and params["required"] == ["query"]
    assert set(tool.tool_call_schema.model_fields) == {"query"}  # the user id is bound, not an argument


def test_tool_returns_the_cited_context(memory: Memstrata) -> None:
    tool = memory_search_tool(memory, user_id="u", context_budget=200, k=3)
    content = tool.invoke({"query": QUERY})
    expected = memory.retrieve(QUERY, user_id="u", context_budget=200)
    assert content == expected.context and TokenCounter().count(content) <= 200
    assert "[s2 · " in content and "\nt2 Tom: " in content
    message = tool.invoke({"type": "tool_call", "name": tool.name, "args": {"query": QUERY}, "id": "call_1"})
    assert isinstance(message, ToolMessage) and message.content == content
    assert len(message.artifact) == 3 and all(isinstance(d, Document) for d in message.artifact)


async def test_tool_async_and_empty_memory(memory: Memstrata) -> None:
    assert await memory_search_tool(memory, user_id="u").ainvoke({"query": QUERY})
    assert await memory_search_tool(memory, user_id="nobody").ainvoke({"query": QUERY}) == NO_MEMORY


def _agent_model(question: str) -> ScriptedChatModel:
    def answer(messages: list[BaseMessage]) -> str:
        tool_output = next(str(m.content) for m in reversed(messages) if isinstance(m, ToolMessage))
        cited = next(cite for cite, text in parse_context(tool_output) if "Brighton" in text)
        return f"Two weeks before 14 April 2024 [{cited}]."

    return ScriptedChatModel(script=[{"query": question}, answer])


def _check_agent_run(messages: list[BaseMessage]) -> None:
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert [(c["name"], c["args"]) for c in calls] == [("memory_search", {"query": QUERY})]
    tool_message = next(m for m in messages if isinstance(m, ToolMessage))
    assert "\nt2 Tom: Nice. I have news too: I ran the Brighton half marathon" in tool_message.content
    assert messages[-1].content == "Two weeks before 14 April 2024 [s2:t2]."


def test_create_agent_uses_the_tool(memory: Memstrata) -> None:
    agent = create_agent(_agent_model(QUERY), tools=[memory_search_tool(memory, user_id="u")])
    _check_agent_run(agent.invoke({"messages": [HumanMessage(QUERY)]})["messages"])


async def test_create_agent_async_with_checkpointer(memory: Memstrata) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    agent = create_agent(
        _agent_model(QUERY), tools=[memory_search_tool(memory, user_id="u")], checkpointer=InMemorySaver()
    )
    state = await asyncio.wait_for(
        agent.ainvoke({"messages": [HumanMessage(QUERY)]}, config={"configurable": {"thread_id": "t1"}}), timeout=60
    )
    _check_agent_run(state["messages"])


# ---- the example ---------------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_agent_example_runs_on_the_scripted_model(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "MEMSTRATA_MODEL"}
    env.update(HF_HUB_OFFLINE="1", ANONYMIZED_TELEMETRY="False")
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "agent.py"), "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "NOTICE: no chat model configured" in out and "SCRIPTED model" in out
    assert "agent -> memory_search({'query': \"Who is Priya's manager at her new job?\"})" in out
    assert "Priya: Intense but fun. My manager, Rui" in out and "[s3:t2]" in out
    assert "agent: From my memory:" in out and "[s3:t2]" in out.split("agent: ", 1)[1]


def test_the_blocking_api_works_inside_a_running_event_loop(tmp_path: Path) -> None:
    """As in a notebook cell: the blocking calls run on a loop of the instance's own, in a worker thread."""
    import asyncio

    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())

    async def cell() -> str:
        mem.ingest([{"speaker": "Ann", "text": "I adopted a cat named Miso."}], user_id="u")
        return mem.retrieve("What is the cat called?", user_id="u").context

    assert "Miso" in asyncio.run(cell())
    assert "Miso" in mem.retrieve("What is the cat called?", user_id="u").context  # and outside one, after
    mem.close()


def test_an_agent_saves_a_memory_on_purpose_for_a_new_user_and_finds_it_later(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    saver = create_agent(
        ScriptedChatModel(script=[{"memory": "Ann is allergic to peanuts."}, "Noted."]),
        tools=[memory_save_tool(mem, user_id="ann")],
    )
    out = saver.invoke({"messages": [HumanMessage("Please remember that I am allergic to peanuts.")]})["messages"]
    tool_message = next(m for m in out if isinstance(m, ToolMessage))
    assert tool_message.content == "Saved to memory: Ann is allergic to peanuts." and out[-1].content == "Noted."
    [turn] = mem.store.get("turn", user_id="ann")
    assert (turn.metadata["conversation_id"], turn.metadata["speaker"]) == ("memories", "memory")
    found = memory_search_tool(mem, user_id="ann").invoke({"query": "What is Ann allergic to?"})
    assert "Ann is allergic to peanuts." in found
    assert memory_search_tool(mem, user_id="bob").invoke({"query": "What is Ann allergic to?"}) == NO_MEMORY
    schema = memory_save_tool(mem, user_id="ann").tool_call_schema.model_json_schema()
    assert sorted(schema["properties"]) == ["memory"]  # the user id is bound, never the model's to choose
    mem.close()
