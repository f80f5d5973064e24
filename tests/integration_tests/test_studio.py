"""LangGraph Studio: ``langgraph dev`` serves both graphs from langgraph.json; runs go through the SDK.

The server runs in a temp directory (its ``.langgraph_api`` persistence stays out of the repo) holding links to
the repo's langgraph.json and package, with a temp ``MEMSTRATA_DATA_DIR``, offline, and without reload.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import EXAMPLE, REPO
from plugins.langgraph_dev import langgraph_dev

pytestmark = pytest.mark.integration

RUN_TIMEOUT_S = 240.0
QUERY = "When did Tom run the Brighton half marathon?"
USER = "studio"


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a ``langgraph dev`` server for the repo's langgraph.json."""
    home = tmp_path_factory.mktemp("studio")
    (home / "langgraph.json").symlink_to(REPO / "langgraph.json")
    (home / "memstrata").symlink_to(REPO / "memstrata", target_is_directory=True)
    with langgraph_dev(home, "langgraph.json", {"MEMSTRATA_DATA_DIR": str(home / "data")}) as url:
        yield url


@pytest.fixture(scope="module")
def client(studio: str) -> Any:
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=studio, api_key=None, timeout=RUN_TIMEOUT_S)


def _wait(client: Any, thread_id: str | None, graph: str, payload: dict[str, Any]) -> dict[str, Any]:
    """One run to completion; a blocking call in a node is named as such (``langgraph dev`` forbids them)."""
    try:
        return client.runs.wait(thread_id, graph, input=payload, context={"user_id": USER})
    except Exception as exc:
        if "BlockingError" in str(exc):
            pytest.fail(
                f"the {graph} graph made a blocking call on the event loop under `langgraph dev` ({exc}); "
                "nodes must open the store with asyncio.to_thread (see the server log)"
            )
        raise


def test_langgraph_json_declares_both_graphs() -> None:
    config = json.loads((REPO / "langgraph.json").read_text())
    assert config["dependencies"] == ["."]
    assert config["graphs"]["ingestion"]["path"] == "./memstrata/graphs/ingestion.py:graph"
    assert config["graphs"]["retrieval"]["path"] == "./memstrata/graphs/retrieval.py:graph"
    assert all(g["description"] for g in config["graphs"].values())
    assert config["env"]["HF_HUB_OFFLINE"] == "1"


def test_graphs_have_narrow_schemas_and_descriptions(client: Any) -> None:
    assistants = {a["graph_id"]: a for a in client.assistants.search(limit=10)}
    assert set(assistants) == {"ingestion", "retrieval"}
    assert "Level-1" in assistants["ingestion"]["description"]
    assert "backtrack" in assistants["retrieval"]["description"]
    schemas = client.assistants.get_schemas(assistants["retrieval"]["assistant_id"])
    ingest = client.assistants.get_schemas(assistants["ingestion"]["assistant_id"])
    # None means the server could not build the JSON schema, and Studio shows no input or context form.
    assert schemas["input_schema"] is not None, "RetrievalInput has no JSON schema (use typing_extensions.TypedDict)"
    assert schemas["context_schema"] is not None, "Context has no JSON schema (Python-only fields need SkipJsonSchema)"
    assert set(schemas["input_schema"]["properties"]) == {"query"}
    assert "user_id" in schemas["context_schema"]["required"]
    assert "embeddings" not in schemas["context_schema"]["properties"]
    assert "source" in ingest["input_schema"]["properties"]


def test_ingest_then_retrieve_through_the_server(client: Any) -> None:
    thread = client.threads.create()
    stats = _wait(client, thread["thread_id"], "ingestion", {"source": str(EXAMPLE.resolve())})
    assert stats["stats"]["turns_seen"] == 36
    thread = client.threads.create()
    out = _wait(client, thread["thread_id"], "retrieval", {"query": QUERY})
    ids = [e["turn_id"] for e in out["evidence"]]
    assert "s2:t2" in ids and out["answer"] is None
    assert "[s2 · " in out["context"]
    assert "\nt2 Tom: Nice. I have news too: I ran the Brighton half marathon" in out["context"]
    assert out["trace"]["path"] in ("light", "deep")
    other = client.runs.wait(None, "retrieval", input={"query": QUERY}, context={"user_id": "someone-else"})
    assert other["evidence"] == []  # the context's user_id is the tenant boundary over the API too


@pytest.mark.parametrize("context", [None, {}, {"user_id": " "}], ids=["no-context", "empty", "blank-user"])
def test_a_run_without_a_user_says_so(client: Any, context: dict[str, Any] | None) -> None:
    with pytest.raises(Exception) as raised:  # the SDK raises what the server's run ended with
        client.runs.wait(None, "retrieval", input={"query": QUERY}, context=context, raise_error=True)
    text = str(raised.value)
    assert "user_id" in text and "TypeError" not in text, text
