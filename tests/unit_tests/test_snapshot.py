"""The search snapshot: writes are applied in place and equal a rebuild; other processes' writes are seen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
from conftest import EXAMPLE, REPO

from memstrata import Memstrata
from memstrata.context import Context
from memstrata.memory.index import MemoryIndex
from memstrata.memory.index.snapshot import TRACKED_PER_RECORD, _Frozen, forget_snapshot
from memstrata.memory.levels import levels
from memstrata.memory.query import Query
from memstrata.memory.search.scoring import score_query
from memstrata.runtime.search import weights as weights_of

QUERIES = [
    "When did Tom run the Brighton half marathon?",
    "Where is Priya moving?",
    "What is the cat called?",
    "Who is Rui?",
]


def _scores(index: MemoryIndex, mem: Memstrata) -> dict[str, dict[str, float]]:
    """Every turn's fused score and every event's score, by key, for a few queries."""
    out: dict[str, dict[str, float]] = {}
    vecs = np.asarray(mem.store.embeddings.embed_documents(QUERIES), dtype=np.float32)
    for text, vec in zip(QUERIES, vecs, strict=True):
        query = Query(id="q0", text=text)
        ranked, parts = score_query(
            index,
            query,
            vec,
            event_kinds=list(index.events),
            top_events=10,
            weights=weights_of(Context(user_id="t")),
            now=None,
        )
        out[text] = {f"{t.conversation_id}/{t.id}": float(parts["score"][i]) for i, t in enumerate(index.turns)}
        out[text] |= {f"{kind}:{index.events[kind].units[row].id}": s for kind, row, s in ranked}
    return out


def _messages() -> list[dict]:
    return json.loads(EXAMPLE.read_text())["messages"]


def test_writes_are_applied_in_place_and_equal_a_rebuild(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    messages = _messages()
    mem.ingest({"conversation_id": "priya-tom", "messages": messages[:20]}, user_id="u")
    before = MemoryIndex.load(mem.store, user_id="u")
    mem.ingest({"conversation_id": "priya-tom", "messages": messages}, user_id="u")  # new turns, new sessions
    last = messages[-1]
    extra = {
        **last,
        "text": "Also, Rui says the Brighton medal is on my fridge now.",
        "timestamp": last["timestamp"][:-2] + "59",
    }
    mem.ingest({"conversation_id": "priya-tom", "messages": [*messages, extra]}, user_id="u")  # re-segments
    mem.ingest({"conversation_id": "other", "messages": messages[:5]}, user_id="u")  # another conversation
    after = MemoryIndex.load(mem.store, user_id="u")
    assert after is before  # updated in place, not rebuilt
    rebuilt = MemoryIndex.build(mem.store, "u", None)
    assert len(after.turns) == len(rebuilt.turns) == len(messages) + 1 + 5
    assert {k: len(t) for k, t in after.tables.items()} == {k: len(t) for k, t in rebuilt.tables.items()}
    incremental, full = _scores(after, mem), _scores(rebuilt, mem)
    for text in QUERIES:
        assert incremental[text].keys() == full[text].keys()
        for key, value in full[text].items():
            assert abs(incremental[text][key] - value) < 1e-6, (text, key)


def test_a_conversation_snapshot_ignores_other_conversations_writes(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "a", "messages": _messages()[:10]}, user_id="u")
    index = MemoryIndex.load(mem.store, user_id="u", conversation_id="a")
    mem.ingest({"conversation_id": "b", "messages": _messages()}, user_id="u")
    assert MemoryIndex.load(mem.store, user_id="u", conversation_id="a") is index
    assert {t.conversation_id for t in index.turns} == {"a"} and len(index.turns) == 10


def test_another_process_writes_are_seen(chroma_server, hash_embeddings) -> None:
    """Processes share a memory through a Chroma server (an embedded folder belongs to one process)."""
    user = "cross-process"
    mem = Memstrata(url=chroma_server.url, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": _messages()[:10]}, user_id=user)
    assert len(MemoryIndex.load(mem.store, user_id=user).turns) == 10
    script = (
        "import json, sys; sys.path.insert(0, 'tests')\n"
        "from conftest import EXAMPLE, HashEmbeddings\nfrom memstrata import Memstrata\n"
        f"m = Memstrata(url={chroma_server.url!r}, embeddings=HashEmbeddings())\n"
        "m.ingest({'conversation_id': 'c', 'messages': json.loads(EXAMPLE.read_text())['messages']}, "
        f"user_id={user!r})\n"
    )
    subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, check=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    index = MemoryIndex.load(mem.store, user_id=user, refresh_seconds=0.0)
    assert len(index.turns) == len(_messages())  # the count check noticed the other process and rebuilt
    assert mem.retrieve("Brighton half marathon", user_id=user).evidence
    mem.delete_user(user_id=user)


def test_rewritten_and_deleted_graph_units_are_applied_in_place(data_dir, hash_embeddings) -> None:
    from memstrata.memory.levels import Entity

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest(EXAMPLE, user_id="u")
    index = MemoryIndex.load(mem.store, user_id="u")
    records = mem.store.get("entity", user_id="u", with_vectors=True)
    first = Entity.model_validate(records[0].payload)
    renamed = first.model_copy(update={"aliases": [*first.aliases, "a new alias"]})
    mem.store.upsert(
        "entity",
        [renamed],
        documents=[renamed.embed_text()],
        vectors=[records[0].metadata["_vector"]],
        extra=[renamed.metadata()],
    )
    mem.store.delete(
        "entity", user_id="u", conversation_id=records[1].metadata["conversation_id"], unit_ids=[records[1].unit_id]
    )
    after = MemoryIndex.load(mem.store, user_id="u")
    assert after is index  # applied in place, no rebuild
    table = after.tables["entity"]
    assert "a new alias" in table.units[table.by_key[(first.conversation_id, first.id)]].aliases
    assert (records[1].metadata["conversation_id"], records[1].unit_id) not in table.by_key
    assert len(table.turn_rows) == len(table.units) == len(records) - 1


def test_large_reads_come_in_pages(data_dir, hash_embeddings, monkeypatch) -> None:
    from memstrata.memory.store import unit_collections

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": json.loads(EXAMPLE.read_text())["messages"]}, user_id="u")
    whole = mem.store.get("turn", user_id="u", with_vectors=True)
    monkeypatch.setattr(unit_collections, "PAGE", 7)  # 36 turns: six pages, the last one short
    paged = mem.store.get("turn", user_id="u", with_vectors=True)
    assert len(whole) == 36 and [r.unit_id for r in paged] == [r.unit_id for r in whole]
    assert all(np.array_equal(a.metadata["_vector"], b.metadata["_vector"]) for a, b in zip(paged, whole, strict=True))
    assert mem.store.users() == ["u"]


def _graph_as_data(view) -> dict:
    """Everything a graph view answers with, in comparable form."""
    parts = [p for _, p in sorted(view.parts.items()) if p.names]
    return {
        "names": view.names,
        "aliases": sorted(a for p in parts for a in p.aliases),
        "facts": {n: view.fact_rows(n).tolist() for n in view.names},
        "edges": sorted(
            (*sorted([a, b]), k, d["weight"]) for p in parts for a, b, k, d in p.graph.edges(keys=True, data=True)
        ),
    }


def test_the_graph_view_redoes_only_the_written_conversation_and_equals_a_rebuild(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    from memstrata.context import Context
    from memstrata.memory.entity_graph.expansion import GraphView
    from memstrata.runtime import search

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    messages = json.loads(EXAMPLE.read_text())["messages"]
    mem.ingest({"conversation_id": "a", "messages": messages}, user_id="u", close=True)
    mem.ingest({"conversation_id": "b", "messages": messages}, user_id="u", close=True)
    ctx = Context(user_id="u", embeddings=hash_embeddings, data_dir=str(data_dir))
    index = MemoryIndex.load(mem.store, user_id="u")
    reads: list[str | None] = []
    get = mem.store.edges.get
    monkeypatch.setattr(
        mem.store.edges, "get", lambda user, **kw: reads.append(kw.get("conversation_id")) or get(user, **kw)
    )
    first = search.graph_view(mem.store, ctx, index)
    assert reads == [None] and {n[0] for n in first.names} == {"a", "b"}
    assert search.graph_view(mem.store, ctx, index) is first and reads == [None]  # nothing changed: no read
    kept = {n: first.fact_rows(n) for n in first.names if n[0] == "a"}
    b_before = _graph_as_data(first)
    mem.ingest(
        {
            "conversation_id": "b",
            "messages": [
                *messages,
                {
                    "speaker": "Priya",
                    "text": "My cousin Dario visited Porto with me.",
                    "timestamp": "2024-05-21T10:00:00",
                },
            ],
        },
        user_id="u",
        close=True,
    )
    reads.clear()  # ingestion reads edges too
    index = MemoryIndex.load(mem.store, user_id="u")  # updated in place: keeps what it read
    after = search.graph_view(mem.store, ctx, index)
    assert reads == ["b"] and after.parts["a"] is first.parts["a"]  # b redone, a's part (and fact rows) shared
    assert all(after.parts["a"].rows.get(n) is rows for n, rows in kept.items())
    assert _graph_as_data(first) == b_before  # the old view, which a running query may hold, is unchanged
    assert any(name == "Dario" for (conv, _), name in after.names.items() if conv == "b")
    facts, entities = index.events["fact"], index.tables["entity"]
    rebuilt = GraphView.build(entities.units, facts.units, [e for e in get("u") if e.src_kind == "entity"])
    assert _graph_as_data(after) == _graph_as_data(rebuilt)
    fresh = MemoryIndex.build(mem.store, "u", None)  # and the snapshot itself equals a fresh read
    assert {k: len(t) for k, t in fresh.tables.items()} == {k: len(t) for k, t in index.tables.items()}
    assert _graph_as_data(after) == _graph_as_data(
        GraphView.build(
            fresh.tables["entity"].units, fresh.events["fact"].units, [e for e in get("u") if e.src_kind == "entity"]
        )
    )
    mem.store.edges.delete_user("u")
    gone = search.graph_view(mem.store, ctx, index)
    assert sum(p.graph.number_of_edges() for p in gone.parts.values()) == 0 and reads[-1] is None


def test_a_unit_deleted_and_written_again_keeps_its_row(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    messages = json.loads(EXAMPLE.read_text())["messages"]
    mem.ingest({"conversation_id": "a", "messages": messages[:20]}, user_id="u")
    index = MemoryIndex.load(mem.store, user_id="u")
    rows = {k: dict(t.by_key) for k, t in index.tables.items()}
    dates = list(index.raw.column("date", lambda t: t.timestamp))
    mem.ingest({"conversation_id": "a", "messages": messages[:21]}, user_id="u")  # the session's episode is redone
    index = MemoryIndex.load(mem.store, user_id="u")
    assert index.writes[("fact", "*")] == 0 and index.writes[("fact", "a")] > 0
    for kind, before in rows.items():  # nothing moved: every unit still there keeps its row
        table = index.tables[kind]
        assert all(table.by_key.get(key, row) == row for key, row in before.items()), kind
    fresh = MemoryIndex.build(mem.store, "u", None)
    for kind, table in fresh.tables.items():
        assert set(table.by_key) == set(index.tables[kind].by_key), kind
        mine = index.tables[kind]
        assert all(mine.units[mine.by_key[k]] == u for k, u in ((k, table.units[r]) for k, r in table.by_key.items()))
        if mine is not index.raw:  # and each unit reaches the same turns
            assert all(
                sorted(index.turns[i].id for i in mine.turn_rows[mine.by_key[k]])
                == sorted(fresh.turns[i].id for i in table.turn_rows[r])
                for k, r in table.by_key.items()
            ), kind
    assert index.raw.column("date", lambda t: t.timestamp) == [t.timestamp for t in index.turns]
    assert len(dates) == len(index.turns) - 1  # the column grew with the new turn


def _garbage_cycle() -> Any:
    """A weak reference to an object only a garbage collection frees."""
    import weakref

    class Node:
        pass

    cycle = Node()
    cycle.self = cycle  # type: ignore[attr-defined]  # garbage only a collection frees
    return weakref.ref(cycle)


def test_a_new_whole_memory_snapshot_is_frozen_out_of_gc_scans(data_dir, hash_embeddings, monkeypatch) -> None:
    import gc

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": json.loads(EXAMPLE.read_text())["messages"]}, user_id="u")
    gc.unfreeze()  # nothing frozen yet: the first snapshot of a process settles
    monkeypatch.setattr(_Frozen, "count", 0)  # as in a new process (an earlier test's settle left its count)
    monkeypatch.setattr(_Frozen, "pending", 0)
    alive = _garbage_cycle()
    try:
        index = MemoryIndex.load(mem.store, user_id="u", freeze=True)
        assert alive() is None  # collected before the freeze
        assert gc.get_freeze_count() > 0
        assert not any(obj is index for obj in gc.get_objects())  # frozen objects are not scanned
    finally:
        gc.unfreeze()


def test_a_small_snapshot_beside_many_frozen_objects_skips_the_full_collection(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    """A server's many small users: the whole-process collection runs once in several of them, not at each."""
    import gc

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": json.loads(EXAMPLE.read_text())["messages"]}, user_id="u")
    alive = _garbage_cycle()
    gc.freeze()  # as if an earlier settle froze the process (the cycle with it): far more than the new snapshot adds
    monkeypatch.setattr(_Frozen, "count", gc.get_freeze_count())  # the count that settle would have kept

    def walks_every_frozen_object() -> int:  # 70 ms at 560k frozen objects, on every new user's first query
        msg = "the settle check must not walk the frozen objects"
        raise AssertionError(msg)

    monkeypatch.setattr(gc, "get_freeze_count", walks_every_frozen_object)
    try:
        index = MemoryIndex.load(mem.store, user_id="u", freeze=True)
        assert alive() is not None  # no full collection ran
        assert any(obj is index for obj in gc.get_objects())  # left to the collector, not frozen
    finally:
        gc.unfreeze()
        gc.collect()


def test_the_settle_check_does_not_count_objects_while_the_snapshots_read_since_cannot_be_due(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    """Counting the objects not frozen walks them; a small user's snapshot among many frozen objects skips even that,
    and the check counts again once enough records were read for a settle to be due.
    """
    import gc

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": json.loads(EXAMPLE.read_text())["messages"]}, user_id="u")
    records = sum(MemoryIndex.build(mem.store, "u", None).counts)
    frozen = records * TRACKED_PER_RECORD * 4 * 3  # three such snapshots' worth of reads before a settle can be due
    monkeypatch.setattr(_Frozen, "count", frozen)
    monkeypatch.setattr(_Frozen, "pending", 0)
    walks: list[int] = []
    real = gc.get_objects

    def counted(*args: Any) -> list[Any]:
        walks.append(1)
        return real(*args)

    monkeypatch.setattr(gc, "get_objects", counted)
    for _ in range(2):
        forget_snapshot(mem.store, "u", None)
        MemoryIndex.load(mem.store, user_id="u", freeze=True)
    assert walks == []  # two snapshots read: not yet a quarter of the frozen objects
    assert _Frozen.pending == 2 * records
    monkeypatch.setattr(_Frozen, "pending", 3 * records)
    try:
        forget_snapshot(mem.store, "u", None)
        MemoryIndex.load(mem.store, user_id="u", freeze=True)
        assert walks  # due by the records read: the objects are counted (and a settle runs when they say so)
    finally:
        gc.unfreeze()
        gc.collect()


def test_the_size_check_reads_the_store_only_while_no_snapshot_is_held(data_dir, hash_embeddings, monkeypatch) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": json.loads(EXAMPLE.read_text())["messages"]}, user_id="u")
    calls: list[int] = []
    check = mem.store.holds_more_than
    monkeypatch.setattr(mem.store, "holds_more_than", lambda *a, **kw: calls.append(a[1]) or check(*a, **kw))
    for query in ("Where is Priya moving?", "Who is Rui?", "What is the cat called?"):
        assert mem.retrieve(
            query,
            user_id="u",
            scale={"refresh_s": 0},
        ).evidence
    assert calls == [20000]  # the held snapshot (36 turns, kept up to date) answers the later checks
    assert mem.retrieve(
        "Who is Rui?",
        user_id="u",
        scale={"max_turns": 10},
    ).evidence  # another threshold: checked
    assert calls == [20000, 10]


def test_closing_forgets_the_sizes_and_latest_times_checked_on_the_store(data_dir, hash_embeddings) -> None:
    """Nothing a store's searches cached may outlive its close."""
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": json.loads(EXAMPLE.read_text())["messages"]}, user_id="u")
    assert mem.retrieve(
        "Where is Priya moving?",
        user_id="u",
        scale={"max_turns": 0},
    ).evidence  # the bounded path
    caches = mem.store.caches
    assert any(k[0] == "u" for k in caches.sizes) and any(k[0] == "u" for k in caches.latest)
    mem.close()
    assert not caches.sizes and not caches.latest and caches.is_empty()


def test_a_new_snapshot_reads_each_kind_by_key_and_holds_what_the_filtered_reads_hold(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    """The keys come from the word index (and a turn's view from its turn); a user among others with the same ids
    gets exactly their own units, per kind and per conversation, as Chroma's filtered reads give them.
    """
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    messages = json.loads(EXAMPLE.read_text())["messages"]
    for user in ("alice", "bob"):  # the same ids on both sides
        for conv in ("c", "d"):
            mem.ingest({"conversation_id": conv, "messages": messages}, user_id=user)
    mem.ingest({"conversation_id": "c", "messages": [{"speaker": "Bob", "text": "Only bob says Oslo."}]}, user_id="bob")
    store = mem.store

    def held(records: list[Any]) -> dict[tuple[str, str], tuple[str, list[float]]]:
        return {
            (r.metadata["conversation_id"], r.unit_id): (r.document, np.round(r.metadata["_vector"], 6).tolist())
            for r in records
        }

    filtered = store.get
    for conv in (None, "c"):
        index = MemoryIndex.build(store, "alice", conv)
        for lv in levels(searched=True):
            want = held(filtered(lv.kind, user_id="alice", conversation_id=conv, with_vectors=True))
            assert held(store.read_all(lv.kind, user_id="alice", conversation_id=conv, with_vectors=True)) == want
            table = index.tables[lv.kind]
            assert {(u.conversation_id, u.id) for u in table.units} == set(want), lv.kind
            assert all("Oslo" not in u.model_dump_json() for u in table.units)
    assert len(index.tables["turn_context"]) == len(index.turns) > 0
    # the views are read by their vectors alone: the stored vectors, each on its turn's row, and no text
    views = index.tables["turn_context"]
    stored = held(filtered("turn_context", user_id="alice", conversation_id="c", with_vectors=True))
    for (conv, unit_id), (_, vector) in stored.items():
        unit = views.units[views.by_key[(conv, unit_id)]]
        assert np.round(views.vecs[views.by_key[(conv, unit_id)]], 6).tolist() == vector
        assert np.round(index.views[0][index.by_key[(conv, unit.turn_id)]], 6).tolist() == vector
        assert "text" not in unit.model_dump()
    bobs = [r.unit_id for r in store.get("turn_context", user_id="bob", conversation_id="c") if "Oslo" in r.document]
    assert bobs and store.vectors_by_key("turn_context", user_id="alice", keys=[("c", b) for b in bobs]) == {}
    assert set(store.vectors_by_key("turn_context", user_id="bob", keys=[(c, b) for b in bobs for c in "cd"])) == {
        ("c", b) for b in bobs
    }
    calls: list[str] = []
    monkeypatch.setattr(store.units.lexicon, "keys", lambda kind, **_: calls.append(kind))  # a server's: no list
    turns = store.read_all("turn", user_id="bob", with_vectors=True)
    assert calls == ["turn"] and held(turns) == held(filtered("turn", user_id="bob", with_vectors=True))
