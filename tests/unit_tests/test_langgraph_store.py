"""``MemstrataStore``: every BaseStore op, in a compiled graph and an agent, with tenants kept apart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import HashEmbeddings, assert_store_ok
from langchain.agents import create_agent
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore, InvalidNamespaceError
from typing_extensions import TypedDict

from memstrata import Memstrata
from memstrata.integrations.store import MemstrataStore
from memstrata.testing import ScriptedChatModel

CHAT = [
    ("Ann", "I finally moved to Lisbon last week.", "2024-03-01T10:00"),
    ("Bo", "Congrats! Which neighbourhood?", "2024-03-01T10:01"),
    ("Ann", "Alfama, near the castle. My cat Miso loves the balcony.", "2024-03-01T10:02"),
    ("Bo", "I started a pottery class on Tuesdays.", "2024-03-01T10:03"),
]


@pytest.fixture
def store(tmp_path) -> MemstrataStore:
    return MemstrataStore(Memstrata(path=tmp_path / "chroma", embeddings=HashEmbeddings()))


def _fill(store: BaseStore, user: str, conv: str = "chat") -> None:
    for i, (speaker, text, ts) in enumerate(CHAT):
        store.put((user, conv), f"m{i}", {"speaker": speaker, "text": text, "timestamp": ts})


def test_put_get_and_the_value_comes_back_as_put(store: MemstrataStore) -> None:
    _fill(store, "ann")
    item = store.get(("ann", "chat"), "m2")
    assert item is not None and item.value == {"speaker": "Ann", "text": CHAT[2][1], "timestamp": CHAT[2][2]}
    assert item.namespace == ("ann", "chat") and item.key == "m2"
    assert store.get(("ann", "chat"), "nope") is None
    turns = store.memory.store.get("turn", user_id="ann", conversation_id="chat")
    assert sorted(r.payload["position"] for r in turns) == [0, 1, 2, 3]  # put order is conversation order


def test_search_runs_retrieval_and_cites(store: MemstrataStore) -> None:
    _fill(store, "ann")
    found = store.search(("ann",), query="Where does Ann live now?", limit=2)
    assert found and found[0].key in {"m0", "m2"} and found[0].score is not None
    assert found[0].value["memstrata"]["citation"].startswith("chat/")
    assert [i.key for i in store.search(("ann", "chat"), filter={"speaker": "Bo"})] == ["m3", "m1"]


def test_list_lists_and_messages_lists(store: MemstrataStore) -> None:
    _fill(store, "ann", "chat")
    store.put(
        ("ann", "work"),
        "batch",
        {
            "messages": [
                {"speaker": "Ann", "text": "Standup moved to 9am."},
                {"speaker": "Cy", "text": "Noted, thanks."},
            ]
        },
    )
    assert store.list_namespaces(prefix=("ann",)) == [("ann", "chat"), ("ann", "work")]
    assert store.list_namespaces(prefix=("ann",), max_depth=1) == [("ann",)]
    assert store.get(("ann", "work"), "batch").value["messages"][1]["speaker"] == "Cy"
    with pytest.raises(InvalidNamespaceError, match="names the user"):
        store.list_namespaces()


def test_delete_and_replace_remove_the_old_messages_from_memory(store: MemstrataStore) -> None:
    _fill(store, "ann")
    store.delete(("ann", "chat"), "m3")
    assert store.get(("ann", "chat"), "m3") is None
    mem = store.memory
    # No copy of the deleted message is left in any kind (facts, entities, tree nodes included) or edge.
    for kind in mem.store.stored_kinds():
        for r in mem.store.get(kind, user_id="ann"):
            assert "pottery" not in r.document.lower() and "pottery" not in json.dumps(r.payload).lower(), kind
    assert not any("pottery" in json.dumps(e.__dict__, default=str).lower() for e in mem.store.edges.get("ann"))
    assert mem.store.count("summary", user_id="ann") >= 1  # the rest of the conversation is summarized again
    assert _dangling(mem, "ann") == []
    assert_store_ok(mem.store, "ann")
    for key in ("m0", "m1", "m2"):  # every message deleted: nothing of the conversation is left
        store.delete(("ann", "chat"), key)
    assert {k: mem.store.count(k, user_id="ann") for k in mem.store.stored_kinds()} == dict.fromkeys(
        mem.store.stored_kinds(), 0
    )
    assert mem.store.edges.count("ann") == 0 and mem.store.counters.all("ann") == []
    _fill(store, "ann")
    store.put(("ann", "chat"), "m0", {"speaker": "Ann", "text": "I moved to Porto, not Lisbon."})
    texts = {r.document for r in mem.store.get("turn", user_id="ann")}
    assert "Ann: I moved to Porto, not Lisbon." in texts and not any("last week" in t for t in texts)


def _dangling(mem: Memstrata, user: str) -> list[str]:
    """Links of stored units (children, raw turns, parents) that point at no stored unit."""
    from memstrata.memory.levels import levels

    units = {
        lv.kind: [lv.unit.model_validate(r.payload) for r in mem.store.get(lv.kind, user_id=user)] for lv in levels()
    }
    ids = {(u.conversation_id, u.id) for found in units.values() for u in found}
    return [
        f"{kind} {u.id} -> {t}"
        for kind, found in units.items()
        for u in found
        for t in [*u.child_ids(), *u.linked_turn_ids(), *u.parent_ids()]
        if (u.conversation_id, t) not in ids
    ]


def test_tenants_never_meet(store: MemstrataStore) -> None:
    _fill(store, "ann")
    store.put(("bob", "chat"), "m0", {"speaker": "Bob", "text": "I moved to Lisbon last month too."})
    assert store.get(("bob", "chat"), "m2") is None
    assert {i.namespace[0] for i in store.search(("bob",), query="Who moved to Lisbon?")} == {"bob"}
    assert store.list_namespaces(prefix=("bob",)) == [("bob", "chat")]
    store.memory.delete_user(user_id="ann")
    assert store.search(("ann",)) == [] and store.get(("bob", "chat"), "m0") is not None
    with pytest.raises(InvalidNamespaceError):
        store.put(("a", "b", "c"), "k", {"speaker": "x", "text": "y"})


async def test_async_ops(store: MemstrataStore) -> None:
    await store.aput(("ann", "chat"), "a1", {"speaker": "Ann", "text": "My sister Maya visits in June."})
    assert (await store.aget(("ann", "chat"), "a1")).value["text"].startswith("My sister")
    assert [i.key for i in await store.asearch(("ann",), query="Who visits in June?")] == ["a1"]
    assert await store.alist_namespaces(prefix=("ann",)) == [("ann", "chat")]
    await store.adelete(("ann", "chat"), "a1")
    assert await store.aget(("ann", "chat"), "a1") is None


def test_in_a_compiled_graph(store: MemstrataStore) -> None:
    class State(TypedDict):
        text: str
        found: list[str]

    def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put(("ann", "g"), "n1", {"speaker": "Ann", "text": state["text"]})
        return {"found": [i.value["text"] for i in store.search(("ann",), query="What does Ann play?")]}

    graph = StateGraph(State).add_node("remember", remember).add_edge(START, "remember").compile(store=store)
    assert graph.invoke({"text": "I play the cello on Sundays.", "found": []})["found"] == [
        "I play the cello on Sundays."
    ]


def test_with_create_agent(store: MemstrataStore) -> None:
    agent = create_agent(ScriptedChatModel(script=["ok"]), tools=[], store=store)
    assert agent.invoke({"messages": [("user", "hi")]})["messages"][-1].content == "ok"
    assert agent.store is store


def test_values_of_any_shape_are_stored_and_searched(store: MemstrataStore) -> None:
    """LangMem's {"content": ...}, OpenAI's role/content, and any JSON object: stored as put, found by search."""
    store.put(("ann", "notes"), "n1", {"content": "Ann is allergic to peanuts."})
    store.put(("ann", "notes"), "n2", {"role": "user", "content": "I play the cello on Sundays."})
    store.put(("ann", "notes"), "n3", {"kind": "profile", "city": "Lisbon", "pets": ["Miso"]})
    assert store.get(("ann", "notes"), "n3").value == {"kind": "profile", "city": "Lisbon", "pets": ["Miso"]}
    turns = {r.unit_id: r.payload for r in store.memory.store.get("turn", user_id="ann", conversation_id="notes")}
    assert (turns["n1"]["speaker"], turns["n1"]["text"]) == ("memory", "Ann is allergic to peanuts.")
    assert (turns["n2"]["speaker"], turns["n3"]["speaker"]) == ("user", "memory")
    assert json.loads(turns["n3"]["text"]) == {"kind": "profile", "city": "Lisbon", "pets": ["Miso"]}
    assert "n1" in [i.key for i in store.search(("ann",), query="What is Ann allergic to?")]
    with pytest.raises(ValueError, match="must not be empty"):
        store.put(("ann", "notes"), "n4", {})
    assert_store_ok(store.memory.store, "ann")


def test_a_namespace_that_does_not_name_a_user_is_refused_and_a_prefix_layout_works(tmp_path: Any) -> None:
    mem = Memstrata(path=tmp_path / "chroma", embeddings=HashEmbeddings())
    plain = MemstrataStore(mem)
    with pytest.raises(InvalidNamespaceError, match="'memories', a collection name, where the user id goes"):
        plain.put(("memories", "ann"), "k", {"content": "Ann likes tea."})
    assert mem.store.get("turn", user_id="memories") == []  # nothing written under the wrong tenant
    langmem = MemstrataStore(mem, prefix=("memories",))
    langmem.put(("memories", "ann"), "k", {"content": "Ann likes tea."})
    item = langmem.get(("memories", "ann"), "k")
    assert item.namespace == ("memories", "ann") and item.value == {"content": "Ann likes tea."}  # as put
    assert [i.namespace for i in langmem.search(("memories", "ann"), query="What does Ann like?")] == [
        ("memories", "ann")
    ]
    assert langmem.list_namespaces(prefix=("memories", "ann")) == [("memories", "ann")]
    with pytest.raises(InvalidNamespaceError, match="start with \\('memories',\\)"):
        langmem.put(("ann",), "k", {"content": "x"})
    assert mem.store.count("turn", user_id="ann") == 1


def test_an_item_reads_back_under_the_namespace_it_was_put_in(tmp_path) -> None:
    store = MemstrataStore(Memstrata(path=tmp_path / "chroma", embeddings=HashEmbeddings()), prefix=("memories",))
    store.put(("memories", "alice"), "k1", {"content": "Alice likes tea."})
    store.put(("memories", "alice", "chat"), "k2", {"content": "Alice has a cat."})
    assert store.get(("memories", "alice"), "k1").namespace == ("memories", "alice")
    found = {i.key: i.namespace for i in store.search(("memories", "alice"))}
    assert found == {"k1": ("memories", "alice"), "k2": ("memories", "alice", "chat")}


def test_a_namespace_template_filled_per_run_and_one_left_unfilled(tmp_path) -> None:
    """LangMem's tools fill ``("memories", "{user_id}")`` from ``config["configurable"]`` before calling the store, and
    leave the placeholder when the run has no such key: the store refuses it rather than make ``"{user_id}"`` one
    tenant shared by every such run.
    """
    from langchain_core.runnables import RunnableConfig

    mem = Memstrata(path=tmp_path / "chroma", embeddings=HashEmbeddings())
    template = ("memories", "{user_id}")

    class State(TypedDict):
        text: str
        found: list[str]

    def remember(state: State, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        configurable = config["configurable"]  # as langmem.utils.NamespaceTemplate fills it
        namespace = tuple(configurable.get(p.strip("{}"), p) if p.startswith("{") else p for p in template)
        found = [i.value["content"] for i in store.search(namespace, query="What does the user drink?")]
        store.put(namespace, f"k{len(found)}", {"content": state["text"]})
        return {"found": found}

    store = MemstrataStore(mem, prefix=("memories",))
    graph = StateGraph(State).add_node("remember", remember).add_edge(START, "remember").compile(store=store)
    for user, drink in (("ann", "tea"), ("bob", "coffee")):
        graph.invoke({"text": f"I drink {drink}.", "found": []}, {"configurable": {"user_id": user}})
    out = graph.invoke({"text": "I drink tea daily.", "found": []}, {"configurable": {"user_id": "ann"}})
    assert out["found"] == ["I drink tea."]  # ann's own item, never bob's
    with pytest.raises(InvalidNamespaceError, match=r"unfilled template '\{user_id\}'.*'configurable'"):
        graph.invoke({"text": "I drink water.", "found": []})
    for call in (
        lambda: store.get(template, "k0"),
        lambda: store.list_namespaces(prefix=template),
        lambda: store.put(("memories", "ann", "{thread_id}"), "k", {"content": "x"}),
    ):
        with pytest.raises(InvalidNamespaceError, match="unfilled template"):
            call()
    assert mem.users() == ["ann", "bob"]
