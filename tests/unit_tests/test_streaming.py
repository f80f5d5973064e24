"""Streaming: node progress arrives as custom events; only the answer's tokens reach ``stream_mode="messages"``.

The scripted model answers every internal decision (planner, scope, gate, selection, follow-up, reflection,
and the ingestion's boundary and summary calls) in streamed TEXT that carries a marker, so a call that is not
tagged ``nostream`` would show its marker in the message stream.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from conftest import EXAMPLE
from langchain_core.messages import AIMessageChunk, BaseMessage

from memstrata import Context, Memstrata
from memstrata.graphs.ingestion import graph as ingestion
from memstrata.graphs.retrieval import graph as retrieval
from memstrata.prompts import ingestion as ingestion_prompts
from memstrata.prompts import retrieval as retrieval_prompts
from memstrata.testing import ScriptedChatModel

QUERY = "Where does Priya work?"
ANSWER = "Priya works at Tidewater Labs as a data engineer [s1:t6]."
MARKER = "INTERNALCALL"
PROMPTS = {
    "decompose": retrieval_prompts.DECOMPOSE_PROMPT,
    "gate": retrieval_prompts.LIGHT_ANSWER_PROMPT,
    "gate_check": retrieval_prompts.LIGHT_CHECK_PROMPT,
    "select_level1": retrieval_prompts.SELECT_PROMPT,
    "follow_up": retrieval_prompts.FOLLOW_UP_PROMPT,
    "reflect": retrieval_prompts.REFLECT_PROMPT,
    "answer": retrieval_prompts.ANSWER_PROMPT,
    "segment": ingestion_prompts.BOUNDARY_PROMPT,
    "summarize": ingestion_prompts.SUMMARY_PROMPT,
}
ROLES = {text.split("</role>")[0].removeprefix("<role>"): node for node, text in PROMPTS.items()}
INTERNAL = ("decompose", "gate_check", "select_level1", "follow_up", "reflect")


def _decision(node: str, messages: list[BaseMessage], reflections: int) -> dict[str, Any]:
    return {
        "decompose": {"sub_queries": [{"id": "q1", "question": "Which company hired Priya?"}]},
        "gate": {"finished": 2, "answer": ""},  # always go deep, so the selection fan-out runs too
        "select_level1": {"ids": [0, 1]},
        "follow_up": {"missing": True, "query": "Priya office Tidewater Labs"},
        "reflect": {"finished": reflections > 1, "new_question": "Priya employer Tidewater Labs"},
        "segment": {"starts": [4, 9]},
        "summarize": {"keywords": ["Priya and Tom talked."]},
    }[node]


class Scripted:
    """Dispatches on the system prompt; internal decisions come back as streamed text with the marker."""

    def __init__(self, *, tool_calls: bool = False, light: bool = False) -> None:
        self.tool_calls, self.light = tool_calls, light
        self.seen: Counter[str] = Counter()
        self.model = ScriptedChatModel(default=self)

    def __call__(self, messages: list[BaseMessage]) -> Any:
        system = str(messages[0].content)
        node = next(n for role, n in ROLES.items() if role in system)
        self.seen[node] += 1
        if node == "answer":
            return ANSWER
        if node == "gate_check":  # the streamed self-check: a verdict line, then (after ANSWER) the answer
            return f"ANSWER\n{ANSWER}" if self.light else f"SEARCH {MARKER}"
        value = _decision(node, messages, self.seen[node])
        return value if self.tool_calls else f"{MARKER} {node} decided: {json.dumps(value)}"


@pytest.fixture
def mem(data_dir: str, hash_embeddings: Any) -> Memstrata:
    m = Memstrata(path=data_dir, embeddings=hash_embeddings)
    m.ingest(EXAMPLE, user_id="u")
    return m


async def _collect(graph: Any, payload: dict[str, Any], ctx: Context) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {"messages": [], "custom": []}
    async for mode, chunk in graph.astream(payload, context=ctx, stream_mode=["messages", "custom"]):
        out[mode].append(chunk)
    return out


# ---- retrieval --------------------------------------------------------------------------------------------------


async def test_offline_retrieval_streams_progress_and_no_tokens(mem: Memstrata) -> None:
    out = await _collect(retrieval, {"query": QUERY}, mem.context(user_id="u"))
    assert out["messages"] == []
    stages = [e["stage"] for e in out["custom"]]
    assert stages[:3] == ["decompose", "predict_scope", "lookup_level1"] and "gate" in stages
    assert all(isinstance(e["message"], str) and e["message"] for e in out["custom"])
    assert {"stage": "lookup_level1", "message": "searching summaries"} in out["custom"]


@pytest.mark.parametrize("tool_calls", [False, True], ids=["text-json", "tool-calls"])
async def test_messages_mode_yields_only_the_answer_tokens(mem: Memstrata, tool_calls: bool) -> None:
    script = Scripted(tool_calls=tool_calls)
    ctx = mem.context(user_id="u", model=script.model, max_iterations=2, llm_depth=None)  # every step may ask the model
    out = await _collect(retrieval, {"query": QUERY}, ctx)
    assert all(script.seen[n] >= 1 for n in (*INTERNAL, "answer")), script.seen  # every internal call was made
    assert script.seen["reflect"] == 2  # the loop ran twice
    chunks = [message for message, _meta in out["messages"]]
    tokens = [c for c in chunks if c.content]
    assert len(tokens) == len(ANSWER.split(" ")) > 1  # token by token, not one final message
    assert all(c.chunk_position == "last" for c in chunks if not c.content)  # langchain-core's end-of-stream mark
    assert "".join(str(c.content) for c in chunks) == ANSWER
    assert all(isinstance(c, AIMessageChunk) and not c.tool_call_chunks for c in chunks)
    assert {meta["langgraph_node"] for _m, meta in out["messages"]} == {"answer"}
    assert all(MARKER not in str(c.content) for c in chunks)
    messages = [e["message"] for e in out["custom"]]
    assert "writing the answer" in messages and any(m.startswith("going deeper") for m in messages)
    assert any(m.startswith("follow-up: ") for m in messages)


async def test_facade_astream_tokens_are_the_answer(mem: Memstrata) -> None:
    script = Scripted()
    kinds: Counter[str] = Counter()
    tokens: list[str] = []
    result = None
    async for kind, value in mem.astream(QUERY, user_id="u", model=script.model):
        kinds[kind] += 1
        if kind == "token":
            tokens.append(value)
        elif kind == "result":
            result = value
    assert kinds["progress"] >= 5 and kinds["result"] == 1
    assert "".join(tokens) == ANSWER and result is not None and result.answer == ANSWER
    assert result.evidence and result.trace["llm"]["calls"] == sum(script.seen.values())


# ---- ingestion --------------------------------------------------------------------------------------------------


async def test_ingestion_streams_progress(data_dir: str, hash_embeddings: Any) -> None:
    ctx = Context(user_id="u", data_dir=data_dir, embeddings=hash_embeddings)
    out = await _collect(ingestion, {"source": str(EXAMPLE)}, ctx)
    assert out["messages"] == []
    stages = [e["stage"] for e in out["custom"]]
    assert stages[0] == "load" and {"turns", "contexts", "segment", "summaries"} <= set(stages)
    assert out["custom"][0]["total_turns"] == 36
    assert any(e["stage"] == "turns" and "embedded" in e["message"] for e in out["custom"])


async def test_ingestion_llm_calls_never_reach_the_message_stream(data_dir: str, hash_embeddings: Any) -> None:
    script = Scripted()
    ctx = Context(user_id="u", data_dir=data_dir, embeddings=hash_embeddings, model=script.model)
    out = await _collect(ingestion, {"source": str(EXAMPLE)}, ctx)
    assert script.seen["segment"] >= 1 and script.seen["summarize"] >= 1
    assert out["messages"] == []
    assert {"load", "summaries"} <= {e["stage"] for e in out["custom"]}
