"""The runtime seam: each node run makes one call into the runtime, and the layers import downward only."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memstrata import Memstrata
from memstrata.graphs.retrieval import graph as retrieval
from memstrata.runtime.step import Step

PACKAGE = Path(__file__).resolve().parents[2] / "memstrata"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "conversation.json"


async def _node_runs(mem: Memstrata, question: str, **overrides: Any) -> tuple[Counter[str], dict[str, Any]]:
    """How often each node ran (LangGraph's own ``updates`` stream) and the answer's trace."""
    runs: Counter[str] = Counter()
    trace: dict[str, Any] = {}
    ctx = mem.context(user_id="u", **overrides)
    async for mode, chunk in retrieval.astream({"query": question}, context=ctx, stream_mode=["updates", "values"]):
        if mode == "updates":
            runs.update(chunk.keys())  # one entry per node run (Send branches each count)
        elif chunk.get("trace"):
            trace = chunk["trace"]
    return runs, trace


def _one_open_per_node_run(opens: dict[str, int], runs: Counter[str]) -> None:
    """Every node run opens the runtime once; only reflection, stopped by its iteration cap before it
    reads anything, may not open it at all.
    """
    assert set(opens) <= set(runs)
    for node, count in runs.items():
        if node == "reflect":
            assert opens.get(node, 0) <= count
        else:
            assert opens.get(node, 0) == count, (node, opens, dict(runs))


@pytest.mark.parametrize(
    "question",
    [
        "Where does Priya work?",  # light
        "Which violin concerto did Priya rehearse with the orchestra in Vienna, and who is her manager?",
    ],
)
async def test_every_node_run_opens_the_runtime_exactly_once_offline(data_dir, hash_embeddings, question: str) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    await mem.aingest(EXAMPLE, user_id="u")
    runs, trace = await _node_runs(
        mem,
        question,
        max_iterations=1,
        retrieval={"reflect_coverage": 1.0},
    )
    assert runs["decompose"] == runs["answer"] == 1 and runs["lookup_level1"] >= 1
    _one_open_per_node_run(trace["runtime_opens"], runs)


async def test_with_a_model_the_fan_out_branches_open_once_each(data_dir, hash_embeddings) -> None:
    from test_retrieval import scripted

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    await mem.aingest(EXAMPLE, user_id="u")
    model, _ = scripted(
        gate=[{"finished": 2, "answer": ""}],
        follow_up=[{"missing": True, "query": "Priya manager Rui"}, {"missing": False}],
    )
    paper = {"llm_depth": None, "retrieval.light_check": "structured"}  # every step may ask the model
    runs, trace = await _node_runs(mem, "Where does Priya work?", model=model, retrieval={"llm_batch_size": 5}, **paper)
    assert runs["select_level1"] >= 2 and runs["follow_up"] >= 1 and runs["search_missing"] >= 1
    _one_open_per_node_run(trace["runtime_opens"], runs)


def _functions(tree: ast.AST) -> list[ast.AsyncFunctionDef | ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.AsyncFunctionDef, ast.FunctionDef))]


def test_node_modules_reach_the_runtime_through_open_node_only() -> None:
    """Nodes import ``open_node`` (and the ``Step`` type and constants), never the resolution or search
    functions; no function calls ``open_node`` twice.
    """
    for path in sorted((PACKAGE / "nodes").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memstrata.runtime"):
                assert node.module in {
                    "memstrata.runtime.node",
                    "memstrata.runtime.step",
                    "memstrata.runtime.llm",
                    "memstrata.runtime",
                }, f"{path.name} imports {node.module}"
                if node.module == "memstrata.runtime.step":
                    assert {a.name for a in node.names} <= {"Step"}, path.name
                if node.module == "memstrata.runtime":  # the package: its llm module only, never search
                    assert {a.name for a in node.names} <= {"llm"}, f"{path.name} imports {node.names}"
        for fn in _functions(tree):
            calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "open_node"]
            assert len(calls) <= 1, f"{path.name}:{fn.name} opens the runtime {len(calls)} times"


def test_memory_imports_neither_the_runtime_nor_the_nodes_nor_langgraph() -> None:
    for path in sorted((PACKAGE / "memory").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert not name.startswith(
                    (
                        "memstrata.runtime",
                        "memstrata.nodes",
                        "memstrata.graphs",
                        "langgraph",
                        "memstrata.integrations",
                        "memstrata.client",
                    )
                ), f"{path}: {name}"


def test_ingestion_and_retrieval_meter_through_the_same_step() -> None:
    from memstrata.context import Context

    ctx = Context(user_id="u")
    ingest, query = Step.for_ingestion(ctx), Step.for_query(ctx)
    assert type(ingest) is type(query) is Step
    assert ingest.shared.budget is None and query.shared.budget == ctx.llm_token_budget
    offline = ingest.sibling(offline=True)
    assert offline.model is None and offline.shared is ingest.shared and offline.meter is not ingest.meter


async def test_a_graph_compiled_with_a_memstrata_store_uses_that_store(tmp_path, hash_embeddings) -> None:
    """An app that compiles memstrata's retrieval graph with its own ``store=`` (a MemstrataStore) reads that
    memory, though the context names no data folder.
    """
    from memstrata.context import Context
    from memstrata.graphs.retrieval import builder
    from memstrata.integrations.store import MemstrataStore

    mem = Memstrata(path=str(tmp_path / "app"), embeddings=hash_embeddings)
    await mem.aingest([{"speaker": "Ann", "text": "I adopted a cat named Miso.", "id": "m1"}], user_id="u")
    app = builder.compile(store=MemstrataStore(mem))
    out = await app.ainvoke(
        {"query": "What is the cat called?"},
        context=Context(user_id="u", data_dir=str(tmp_path / "elsewhere"), embeddings=hash_embeddings),
    )
    assert any("Miso" in e["text"] for e in out["evidence"])
    assert not (tmp_path / "elsewhere").exists()


def test_closing_the_last_instance_on_a_folder_closes_its_store_and_a_later_use_opens_it_again(
    tmp_path, hash_embeddings
) -> None:
    """``Memstrata.close`` hands back the embedded Chroma client once no other open instance shares the store, and
    an instance used after its close opens the store again with everything written.
    """
    from chromadb.api.shared_system_client import SharedSystemClient

    from memstrata import Memstrata

    first = Memstrata(path=tmp_path / "store", embeddings=hash_embeddings)
    second = Memstrata(path=tmp_path / "store", embeddings=hash_embeddings)
    first.ingest([{"speaker": "Ann", "text": "My cat Miso loves boxes."}], user_id="u")
    client = first.store.client
    assert second.store is first.store  # one store per folder and embedder
    first.close()
    first.close()  # twice: still one release, so the second instance keeps its store
    assert client._identifier in SharedSystemClient._identifier_to_system
    assert "Miso" in second.retrieve("What is the cat called?", user_id="u").context
    running = second.store  # a graph run still holding the store object when the last instance closes
    second.close()
    assert client._identifier not in SharedSystemClient._identifier_to_system  # stopped: its indexes are freed
    assert running.count("turn", user_id="u") == 1  # its next use opens a new client
    running.close()
    assert first.store.count("turn", user_id="u") == 1  # used again (here through .store): held again
    third = Memstrata(path=tmp_path / "store", embeddings=hash_embeddings)
    third.close()
    reopened = first.store.client
    assert reopened is not client and reopened._identifier in SharedSystemClient._identifier_to_system
    assert "Miso" in first.retrieve("What is the cat called?", user_id="u").context
    first.close()
    assert reopened._identifier not in SharedSystemClient._identifier_to_system
