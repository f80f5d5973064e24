"""A deployment through the LangGraph server: the user is the authenticated caller's, the store the deployment's.

The unit tests run the deployed graphs of :mod:`memstrata.integrations.deploy` in this process, with the identity the
server would have put in the run's config. The integration tests serve ``examples/deploy/langgraph.json`` (its auth
handler ``examples/deploy/auth.py``) with ``langgraph dev`` and call it through the SDK as two users with bearer
tokens, the way a client of a deployment does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, HashEmbeddings, assert_store_ok
from langchain.agents import create_agent
from langgraph_sdk import Auth
from plugins.langgraph_dev import langgraph_dev

from memstrata import Context, Memstrata
from memstrata.context import DATA_DIR_ENV
from memstrata.errors import DeploymentError
from memstrata.integrations.deploy import LOCKED_SETTINGS, bind_run, deployed, ingestion, retrieval
from memstrata.integrations.middleware import MemstrataMiddleware
from memstrata.testing import ScriptedChatModel

SECRET = {"ann": "My locker code is 4711 zebra.", "bob": "My locker code is 9090 heron."}
QUESTION = "What is my locker code?"
EXAMPLE = REPO / "examples" / "deploy"


def _as(user: str, **configurable: Any) -> dict[str, Any]:
    """A run's config as the LangGraph server makes it for an authenticated caller."""
    return {"configurable": {"langgraph_auth_user_id": user, **configurable}}


# ---- the binding --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("context", [None, {}, {"user_id": "ann"}, {"user_id": ""}, {"conversation_id": "c1"}])
def test_the_run_gets_the_callers_user(context: dict[str, Any] | None) -> None:
    bound = bind_run(context, _as("ann"))
    assert bound == {**(context or {}), "user_id": "ann"}


def test_a_dataclass_context_keeps_its_type_and_settings() -> None:
    bound = bind_run(Context(user_id="ann", level1_k=3), _as("ann"))
    assert isinstance(bound, Context) and (bound.user_id, bound.level1_k) == ("ann", 3)
    assert bind_run(Context(user_id="ann"), _as("ann")) == Context(user_id="ann")


def test_a_context_naming_another_user_is_refused() -> None:
    with pytest.raises(DeploymentError, match=r"names user_id 'bob', the caller is 'ann'.*Leave user_id out"):
        bind_run({"user_id": "bob"}, _as("ann"))
    assert issubclass(DeploymentError, ValueError)  # the LangGraph server shows a ValueError's message


@pytest.mark.parametrize("config", [None, {}, {"configurable": {"user_id": "ann"}}, _as(""), _as(" ")])
def test_a_run_without_an_authenticated_caller_is_refused(config: dict[str, Any] | None) -> None:
    with pytest.raises(DeploymentError, match=r"authenticated callers only.*\"auth\".*langgraph_auth_user_id"):
        bind_run({"user_id": "ann"}, config)


@pytest.mark.parametrize("name", sorted(LOCKED_SETTINGS))
def test_a_context_setting_where_the_store_or_model_server_is_is_refused(name: str) -> None:
    env = LOCKED_SETTINGS[name]
    with pytest.raises(DeploymentError, match=rf"may not set {name}\. .*{name} by \${env}"):
        bind_run({name: "/elsewhere"}, _as("ann"))
    assert bind_run({name: None}, _as("ann")) == {name: None, "user_id": "ann"}  # unset is fine


def test_the_deployed_graphs_are_memstratas_own() -> None:
    from memstrata.graphs.ingestion import graph as ingest_graph
    from memstrata.graphs.retrieval import graph as retrieve_graph

    for served, graph in ((ingestion, ingest_graph), (retrieval, retrieve_graph)):
        assert served.get_graph().draw_mermaid() == graph.get_graph().draw_mermaid()
        assert served.name == graph.name and served.context_schema is Context
        assert served.get_context_jsonschema() == graph.get_context_jsonschema()
    assert type(ingest_graph).__name__ == "CompiledStateGraph"  # deploying left the originals alone


# ---- the deployed graphs, in this process ----------------------------------------------------------------------


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Memstrata, HashEmbeddings]]:
    """The deployment's store, fixed by its environment; the Memstrata reads the same store."""
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "store"))
    embeddings = HashEmbeddings()
    mem = Memstrata(path=tmp_path / "store", embeddings=embeddings)
    yield mem, embeddings
    mem.close()


def _evidence(out: dict[str, Any]) -> str:
    return " ".join(e.text if hasattr(e, "text") else e["text"] for e in out["evidence"])


async def test_each_caller_writes_and_reads_only_their_own_memory(deployment: tuple[Memstrata, Any]) -> None:
    mem, embeddings = deployment
    for user, said in SECRET.items():
        source = [{"speaker": user, "text": said}, {"speaker": "assistant", "text": "Noted."}]
        await ingestion.ainvoke({"source": source}, _as(user), context={"embeddings": embeddings})
    assert sorted(mem.users()) == ["ann", "bob"]
    for user, other in (("ann", "bob"), ("bob", "ann")):
        out = await retrieval.ainvoke({"query": QUESTION}, _as(user), context={"embeddings": embeddings})
        assert SECRET[user] in _evidence(out) and SECRET[other] not in _evidence(out)
        assert_store_ok(mem.store, user)


async def test_refused_runs_read_and_write_nothing(deployment: tuple[Memstrata, Any], tmp_path: Path) -> None:
    mem, embeddings = deployment
    source = [{"speaker": "ann", "text": SECRET["ann"]}]
    elsewhere = tmp_path / "elsewhere"
    refused = [
        ({"user_id": "ann", "embeddings": embeddings}, _as("bob")),  # bob names ann
        ({"embeddings": embeddings, "data_dir": str(elsewhere)}, _as("ann")),  # ann picks the folder
        ({"user_id": "ann", "embeddings": embeddings}, {"configurable": {"user_id": "ann"}}),  # no auth at all
    ]
    for context, config in refused:
        with pytest.raises(DeploymentError):
            await ingestion.ainvoke({"source": source}, config, context=context)
        with pytest.raises(DeploymentError):
            retrieval.invoke({"query": QUESTION}, config, context=context)
    assert mem.users() == [] and not elsewhere.exists()


def test_a_deployed_agent_takes_its_user_from_the_caller_not_the_config(deployment: tuple[Memstrata, Any]) -> None:
    mem, _ = deployment
    agent = deployed(create_agent(ScriptedChatModel(default="Noted."), tools=[], middleware=[MemstrataMiddleware(mem)]))
    # The config's user_id is a caller's to set; the identity is the server's.
    agent.invoke({"messages": [("user", SECRET["ann"])]}, _as("ann", user_id="bob", thread_id="t1"))
    assert mem.users() == ["ann"] and mem.store.count("turn", user_id="ann", conversation_id="t1") == 2
    with pytest.raises(DeploymentError, match="names user_id 'ann', the caller is 'bob'"):
        agent.invoke({"messages": [("user", "hi")]}, _as("bob", thread_id="t2"), context={"user_id": "ann"})
    assert mem.users() == ["ann"]


# ---- the example's auth handler -------------------------------------------------------------------------------


def _example_auth() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("memstrata_example_auth", EXAMPLE / "auth.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_example_auth_handler_names_the_caller_by_token(monkeypatch: pytest.MonkeyPatch) -> None:
    example = _example_auth()
    monkeypatch.setenv(example.TOKENS_ENV, "tok-ann=ann, tok-bob=bob")
    assert await example.authenticate("Bearer tok-ann") == {"identity": "ann"}
    assert await example.authenticate("bearer tok-bob") == {"identity": "bob"}
    for header in (None, "", "Bearer nope", "Basic tok-ann", "tok-ann"):
        with pytest.raises(Auth.exceptions.HTTPException) as refused:
            await example.authenticate(header)
        assert refused.value.status_code == 401

    class Caller:
        identity = "ann"

    class Ctx:
        user = Caller()

    value: dict[str, Any] = {"metadata": {"topic": "x"}}
    assert await example.own_threads(Ctx(), value) == {"owner": "ann"}
    assert value["metadata"] == {"topic": "x", "owner": "ann"}


def test_the_deployment_config_serves_the_locked_graphs_behind_the_auth_handler() -> None:
    config = json.loads((EXAMPLE / "langgraph.json").read_text())
    assert config["graphs"]["ingestion"]["path"] == "memstrata.integrations.deploy:ingestion"
    assert config["graphs"]["retrieval"]["path"] == "memstrata.integrations.deploy:retrieval"
    assert config["auth"]["path"] == "./examples/deploy/auth.py:auth"
    assert not {"MEMSTRATA_DATA_DIR", "MEMSTRATA_CHROMA_URL"} & set(config["env"])  # the deployment's own to set


# ---- through a real server --------------------------------------------------------------------------------------

RUN_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``langgraph dev`` serving examples/deploy/langgraph.json from a temp folder laid out as the repository (its
    ``.langgraph_api`` stays out of the repo), with the demo tokens and the store's folder in its environment.
    """
    home = tmp_path_factory.mktemp("deploy")
    (home / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    (home / "memstrata").symlink_to(REPO / "memstrata", target_is_directory=True)
    env = {"MEMSTRATA_DATA_DIR": str(home / "store"), "MEMSTRATA_DEMO_TOKENS": "tok-ann=ann,tok-bob=bob"}
    with langgraph_dev(home, "examples/deploy/langgraph.json", env) as url:
        yield url, home


def _client(url: str, token: str | None) -> Any:
    from langgraph_sdk import get_sync_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return get_sync_client(url=url, api_key=None, headers=headers, timeout=RUN_TIMEOUT_S)


def _run(client: Any, graph: str, payload: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return client.runs.wait(None, graph, input=payload, raise_error=True, **kwargs)


def test_through_the_server_each_caller_reaches_only_their_own_memory(server: tuple[str, Path]) -> None:
    url, _ = server
    ann, bob = _client(url, "tok-ann"), _client(url, "tok-bob")
    said = [{"speaker": "ann", "text": SECRET["ann"]}, {"speaker": "assistant", "text": "Noted."}]
    assert _run(ann, "ingestion", {"source": said})["stats"]["turns_added"] == 2  # no user_id sent: the caller's
    assert SECRET["ann"] in _run(ann, "retrieval", {"query": QUESTION}, context={"user_id": "ann"})["context"]
    assert _run(bob, "retrieval", {"query": QUESTION})["evidence"] == []
    # The server's own key for the identity is refused from callers, or overwritten: never believed.
    spoof = {"configurable": {"langgraph_auth_user_id": "ann"}}
    assert _run(bob, "retrieval", {"query": QUESTION}, config=spoof)["evidence"] == []


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ({"context": {"user_id": "ann"}}, "names user_id 'ann', the caller is 'bob'"),
        ({"config": {"configurable": {"user_id": "ann"}}}, "names user_id 'ann', the caller is 'bob'"),
        ({"context": {"data_dir": "/tmp/memstrata-elsewhere"}}, "may not set data_dir"),
        ({"context": {"chroma_url": "http://127.0.0.1:9"}}, "may not set chroma_url"),
    ],
    ids=["context-user", "config-user", "data-dir", "chroma-url"],
)
def test_through_the_server_a_run_asking_for_more_is_refused_with_its_reason(
    server: tuple[str, Path], how: dict[str, Any], expected: str
) -> None:
    url, _ = server
    with pytest.raises(Exception) as refused:  # the SDK raises what the run ended with
        _run(_client(url, "tok-bob"), "retrieval", {"query": QUESTION}, **how)
    assert "DeploymentError" in str(refused.value) and expected in str(refused.value), str(refused.value)
    assert not Path("/tmp/memstrata-elsewhere").exists()


def test_through_the_server_no_token_no_run_and_threads_are_private(server: tuple[str, Path]) -> None:
    import httpx

    url, _ = server
    with pytest.raises(httpx.HTTPStatusError) as refused:
        _run(_client(url, None), "retrieval", {"query": QUESTION})
    assert refused.value.response.status_code == 401
    thread = _client(url, "tok-ann").threads.create()
    with pytest.raises(httpx.HTTPStatusError) as hidden:
        _client(url, "tok-bob").threads.get(thread["thread_id"])
    assert hidden.value.response.status_code == 404
    assert _client(url, "tok-ann").threads.get(thread["thread_id"])["metadata"]["owner"] == "ann"
