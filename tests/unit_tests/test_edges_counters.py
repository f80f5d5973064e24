"""Edges and counters on both real backends: a SQLite file in a temp folder and a real Chroma server.

Every test runs twice (``sqlite``, ``chroma``); each gets tables no other test uses,
so counts over a whole table are exact even on the session's shared server.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import pytest

from memstrata.errors import StoreError
from memstrata.memory.store import tables, tenant
from memstrata.memory.store.chroma_table import ChromaTable
from memstrata.memory.store.counters import CounterStore, UnitCounters
from memstrata.memory.store.edges import Edge, EdgeStore
from memstrata.memory.store.sqlite_table import SqliteTable
from memstrata.memory.store.tables import SQLITE_FILE, TABLE_PREFIX, Table, TableRow, open_table

REPO = Path(__file__).resolve().parents[2]
TURN = ("c1", "turn", "s1:t0")


@dataclass
class Backend:
    """Where this test's tables live: a SQLite file in its temp folder, or collections of its own on the server."""

    kind: str
    folder: Path
    server: Any = None
    prefix: str = ""
    database: str = ""

    def open(self, name: str) -> Table:
        """Open a table by name; opening the same name twice gives two objects over the same rows."""
        if self.server is None:
            return open_table(name, path=self.folder, client=None)
        import chromadb
        from chromadb.config import Settings

        client = chromadb.HttpClient(
            host=self.server.host,
            port=self.server.port,
            database=self.database,
            settings=Settings(anonymized_telemetry=False),
        )
        return open_table(self.prefix + name, path=None, client=client)


def _chroma_backend(server: Any, folder: Path) -> Backend:
    """Collections of its own in a database of its own on the session's shared server. In the default database,
    tables written without a store would be memory with no store format, and a store opened there is refused
    (:mod:`memstrata.memory.store.format`).
    """
    import chromadb
    from chromadb.config import Settings

    database = f"t{uuid.uuid4().hex[:12]}"
    fastapi = "chromadb.api.fastapi.FastAPI"
    admin = Settings(chroma_api_impl=fastapi, chroma_server_host=server.host, chroma_server_http_port=server.port)
    chromadb.AdminClient(admin).create_database(database)
    return Backend("chroma", folder, server, f"{database}_", database)


@pytest.fixture(params=["sqlite", "chroma"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", tmp_path)
    # The server lives for the whole session: each test gets collections no other test uses.
    return _chroma_backend(request.getfixturevalue("chroma_server"), tmp_path)


def _edges(user: str) -> list[Edge]:
    """The same unit ids and conversation for every user: only the tenant tells them apart."""
    return [
        Edge("c1", "s1:t0", "mentions", "ent:ann", src_kind="turn", dst_kind="entity", turn_ids=("s1:t0",)),
        Edge(
            "c1",
            "s1:t1",
            "mentions",
            "ent:ann",
            src_kind="turn",
            dst_kind="entity",
            weight=0.5,
            turn_ids=("s1:t1",),
            created_at=1700000000.5,
        ),
        Edge("c1", "ent:ann", "knows", f"ent:{user}", src_kind="entity", dst_kind="entity"),
        Edge("c2", "s1:t0", "child_of", "ep:0", src_kind="turn", dst_kind="episode"),
    ]


def _user_ids(table: Table) -> set[str]:
    """The users of every row in the table, read underneath the table API."""
    if isinstance(table, SqliteTable):
        with sqlite3.connect(table.path) as db:
            return {u for (u,) in db.execute(f'SELECT DISTINCT user_id FROM "{table.name}"')}
    assert isinstance(table, ChromaTable)
    return {str(m["user_id"]) for m in table.collection.get(include=["metadatas"])["metadatas"] or []}


def test_open_table_picks_the_backend(backend: Backend, tmp_path: Path) -> None:
    table = backend.open("edges")
    if isinstance(table, SqliteTable):
        assert table.path == tmp_path / SQLITE_FILE and table.path.is_file()
    else:
        assert isinstance(table, ChromaTable)
        assert table.collection.name == TABLE_PREFIX + table.name
        assert table.collection.metadata == {"memstrata_table": table.name}
    with pytest.raises(StoreError):
        backend.open("bad-name; DROP TABLE x")


def test_edges_add_get_filters(backend: Backend) -> None:
    store = EdgeStore(backend.open("edges"))
    assert store.add("alice", _edges("alice")) == 4
    assert store.count("alice") == 4
    mentions = store.get("alice", rel="mentions")
    assert {(e.src, e.dst) for e in mentions} == {("s1:t0", "ent:ann"), ("s1:t1", "ent:ann")}
    assert [e.rel for e in store.get("alice", src="ent:ann")] == ["knows"]
    assert len(store.get("alice", dst="ent:ann", conversation_id="c1")) == 2
    assert store.get("alice", src="s1:t0", conversation_id="c2") == [_edges("alice")[3]]
    assert store.get("alice", dst="ent:nobody") == []
    # every field comes back as it went in
    assert sorted(store.get("alice"), key=repr) == sorted(_edges("alice"), key=repr)


def test_edges_of_several_conversations_are_one_read_of_the_users_own(backend: Backend) -> None:
    store = EdgeStore(backend.open("edges"))
    for user in ("alice", "bob"):  # equal conversation ids on both sides
        store.add(user, [*_edges(user), Edge("c3", "s1:t0", "mentions", "ent:cat")])
    both = store.get("alice", conversations=["c2", "c1"])
    assert sorted(both, key=repr) == sorted((e for e in _edges("alice") if e.conversation_id in ("c1", "c2")), key=repr)
    assert store.get("alice", conversations=["c1"], src="ent:ann") == store.get(
        "alice", conversation_id="c1", src="ent:ann"
    )
    assert store.get("alice", conversations=[]) == [] and store.get("carol", conversations=["c1", "c2"]) == []
    with pytest.raises(ValueError, match="not both"):
        store.get("alice", conversation_id="c1", conversations=["c2"])


def test_edges_readd_is_idempotent_and_delete(backend: Backend) -> None:
    store = EdgeStore(backend.open("edges"))
    store.add("alice", _edges("alice"))
    changed = Edge("c1", "s1:t0", "mentions", "ent:ann", weight=2.0)  # same triple, new attributes
    assert store.add("alice", [*_edges("alice")[1:], changed]) == 4
    assert store.count("alice") == 4
    [again] = store.get("alice", src="s1:t0", conversation_id="c1")
    assert again == changed and again.turn_ids == () and again.src_kind == ""  # replaced, not merged
    assert store.delete("alice", [changed, Edge("c9", "x", "y", "z")]) == 1
    assert store.count("alice") == 3 and store.get("alice", src="s1:t0", conversation_id="c1") == []
    assert store.delete("alice", []) == 0


def test_graph(backend: Backend) -> None:
    store = EdgeStore(backend.open("edges"))
    store.add("alice", _edges("alice"))
    graph = store.graph("alice", conversation_id="c1")
    assert isinstance(graph, nx.MultiDiGraph)
    assert set(graph.edges(keys=True)) == {
        ("s1:t0", "ent:ann", "mentions"),
        ("s1:t1", "ent:ann", "mentions"),
        ("ent:ann", "ent:alice", "knows"),
    }
    assert graph["s1:t1"]["ent:ann"]["mentions"]["weight"] == 0.5
    assert graph["s1:t1"]["ent:ann"]["mentions"]["turn_ids"] == ("s1:t1",)
    assert graph.nodes["ent:ann"]["kind"] == "entity"
    assert nx.has_path(graph, "s1:t0", "ent:alice")
    everything = store.graph("alice")
    assert everything.number_of_edges() == 4
    assert everything.has_edge("s1:t0", "ep:0", key="c2/child_of")
    assert store.graph("bob").number_of_edges() == 0


def test_counters(backend: Backend) -> None:
    store = CounterStore(backend.open("counters"))
    other = ("c1", "summary", "s1:t0")  # same unit id, other kind: another unit
    assert store.get("alice", [TURN, other]) == {TURN: UnitCounters(*TURN), other: UnitCounters(*other)}
    assert store.all("alice") == []
    store.record_recall("alice", [TURN], at=10.0)
    store.record_recall("alice", [TURN, TURN], at=20.0)  # a unit twice in one call counts once
    got = store.get("alice", [TURN])[TURN]
    assert (got.recall_count, got.last_access, got.reinforcement_count, got.reinforced_at) == (2, 20.0, 0, None)
    store.reinforce("alice", [TURN, other], at=30.0)
    store.set_tier("alice", [TURN], "cold")
    got = store.get("alice", [TURN, other])
    assert got[TURN] == UnitCounters(
        *TURN, reinforcement_count=1, reinforced_at=30.0, recall_count=2, last_access=20.0, tier="cold"
    )
    assert got[other] == UnitCounters(*other, reinforcement_count=1, reinforced_at=30.0)
    store.reinforce("alice", [other], at=30.0)  # the same consolidation replayed: still one
    assert store.get("alice", [other])[other].reinforcement_count == 1
    store.reinforce("alice", [other], at=25.0)  # older than the last: counted in time order, so not again
    assert store.get("alice", [other])[other] == UnitCounters(*other, reinforcement_count=1, reinforced_at=30.0)
    store.reinforce("alice", [other], at=40.0)
    assert store.get("alice", [other])[other] == UnitCounters(*other, reinforcement_count=2, reinforced_at=40.0)
    assert [c.unit_id for c in store.all("alice", kind="summary")] == ["s1:t0"]
    assert len(store.all("alice")) == 2
    with pytest.raises(StoreError):
        store.set_tier("alice", [TURN], "")


def test_the_active_tiers_are_read_through_their_index_and_only_the_users_own(tmp_path: Path) -> None:
    """The counters' ``tier`` is indexed on SQLite: reading a user's cache tier searches the index (a user with
    many archived records is not scanned), and returns that user's rows only, as the unindexed read would.
    """
    store = CounterStore(tables.open_table("counters", path=tmp_path, client=None, indexed=("tier",)))
    for user in ("alice", "bob"):  # equal conversation and unit ids on both sides
        items = [("c1", "summary", f"s{i}") for i in range(300)]
        store.set_scores(user, {item: {"priority": 0.1, "tier": ""} for item in items})
        store.set_scores(user, {items[3]: {"tier": "cache"}, items[7]: {"tier": "buffer"}})
    store.set_scores("bob", {("c1", "summary", "s5"): {"tier": "cache"}})
    assert [(c.unit_id, c.tier) for c in store.active("alice")] == [("s3", "cache"), ("s7", "buffer")]
    assert sorted(c.unit_id for c in store.active("bob")) == ["s3", "s5", "s7"]
    table = store.table
    sql, args = next(table._wheres("alice", None, {"tier": "cache"}, None, table.indexed))
    with sqlite3.connect(table.path) as db:
        plan = " ".join(str(row) for row in db.execute(f'EXPLAIN QUERY PLAN SELECT key FROM "counters"{sql}', args))
    assert "counters_tier" in plan, plan
    plain = CounterStore(tables.open_table("plain", path=tmp_path, client=None))  # no index: same rows, a scan
    plain.set_scores("alice", {("c1", "summary", "s3"): {"tier": "cache"}, ("c1", "summary", "s4"): {"tier": ""}})
    assert [c.unit_id for c in plain.active("alice")] == ["s3"]


def test_a_conversations_entity_edges_are_read_through_their_index_and_only_the_users_own(
    tmp_path: Path, hash_embeddings: Any
) -> None:
    """The edges' ``src_kind`` is indexed with the user and conversation on SQLite: a question's graph reads the
    entity edges of a few conversations (1.5% of their rows at 1M turns) without visiting the rest, and gets what
    an unindexed read gets.
    """
    indexed = EdgeStore(tables.open_table("edges", path=tmp_path, client=None, scoped=("src_kind",)))
    plain = EdgeStore(tables.open_table("plain", path=tmp_path, client=None))  # no index: the same rows, a scan
    for user in ("alice", "bob"):  # equal conversation and unit ids on both sides
        for conv in ("c1", "c2"):
            edges = [  # one in ten from an entity
                Edge(conv, f"{kind[:3]}:{user}{i}", "r", f"x:{i}", src_kind=kind)
                for i, kind in enumerate(["entity", *["summary"] * 9] * 20)
            ]
            indexed.add(user, edges)
            plain.add(user, edges)
    for store in (indexed, plain):
        got = store.get("alice", conversations=["c2"], src_kind="entity")
        assert len(got) == 20 and all(e.src.startswith("ent:alice") and e.conversation_id == "c2" for e in got)
    assert indexed.get("bob", conversation_id="c1", src_kind="entity") == plain.get(
        "bob", conversation_id="c1", src_kind="entity"
    )
    table = indexed.table
    sql, args = next(table._wheres("alice", "c2", {"src_kind": "entity"}, None, table.scoped))
    with sqlite3.connect(table.path) as db:
        plan = " ".join(str(row) for row in db.execute(f'EXPLAIN QUERY PLAN SELECT key FROM "edges"{sql}', args))
    assert "edges_scoped_src_kind" in plan, plan
    from memstrata.memory.store import MemoryStore

    assert MemoryStore(path=tmp_path / "store", embeddings=hash_embeddings).edges.table.scoped == {"src_kind"}


def test_a_read_by_keys_looks_the_keys_up_and_never_walks_the_users_rows(tmp_path: Path) -> None:
    """SQLite keeps no statistics here, and for a few hundred keys it chose the index on the user and the tier,
    which visits every row of the user; the read must go through the primary key, and still find only the
    user's own rows.
    """
    store = CounterStore(tables.open_table("counters", path=tmp_path, client=None, indexed=("tier",)))
    items = [("c1", "summary", f"s{i}") for i in range(2000)]
    for user in ("alice", "bob"):  # equal conversation and unit ids on both sides
        store.set_scores(user, {item: {"priority": 0.5 if user == "alice" else 0.25, "tier": ""} for item in items})
    table, wanted = store.table, items[::7]
    keys = [r.key for r in table.get(user_id="alice")][::7]
    for conversation in (None, "c1"):
        sql, args = next(table._wheres("alice", conversation, None, keys, table.indexed))
        with sqlite3.connect(table.path) as db:
            plan = " ".join(str(r) for r in db.execute(f'EXPLAIN QUERY PLAN SELECT key FROM "counters"{sql}', args))
        assert "sqlite_autoindex_counters_1" in plan and "counters_tier" not in plan, plan
    found = store.get("alice", wanted)
    assert len(found) == len(wanted) and {c.priority for c in found.values()} == {0.5}
    assert store.get("bob", wanted[:3]) == {i: UnitCounters(*i, priority=0.25) for i in wanted[:3]}
    # another user's keys name no row of this one: the user is still compared on what the keys find
    assert table.get(user_id="bob", keys=keys) == []
    assert table.get(user_id="alice", conversation_id="c2", keys=keys) == []  # and the conversation too
    assert len(table.get(user_id="alice", conversation_id="c1", keys=keys)) == len(keys)


def test_tenant_isolation(backend: Backend) -> None:
    edge_table, counter_table = backend.open("edges"), backend.open("counters")
    edges, counters = EdgeStore(edge_table), CounterStore(counter_table)
    for user, recalls in (("alice", 3), ("bob", 1)):
        edges.add(user, _edges(user))
        for _ in range(recalls):
            counters.record_recall(user, [TURN], at=float(recalls))
        counters.set_tier(user, [TURN], f"tier-{user}")
    assert edge_table.count() == 8 and counter_table.count() == 2
    assert {e.dst for e in edges.get("bob", src="ent:ann")} == {"ent:bob"}
    assert {e.dst for e in edges.get("alice", src="ent:ann")} == {"ent:alice"}
    assert counters.get("alice", [TURN])[TURN].recall_count == 3
    assert counters.get("bob", [TURN])[TURN] == UnitCounters(*TURN, recall_count=1, last_access=1.0, tier="tier-bob")
    # a user's delete by keys cannot reach the other's rows, even when the edges are equal
    assert edges.delete("bob", _edges("alice")[:2]) == 2
    assert edges.count("alice") == 4 and edges.count("bob") == 2
    assert edges.delete_user("alice") == 4 and counters.delete_user("alice") == 1
    assert edge_table.count() == edges.count("bob") == 2 and counter_table.count() == 1
    assert _user_ids(edge_table) == _user_ids(counter_table) == {"bob"}
    assert edge_table.get(user_id="alice") == [] and counter_table.get(user_id="alice") == []
    assert counters.get("bob", [TURN])[TURN].recall_count == 1 and len(edges.get("bob")) == 2


def test_table_rows(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    table = backend.open("rows")
    monkeypatch.setattr(tables, "_MAX_BATCH", 40)  # batches of 2000 in real use: the same code path, cheaper
    rows = [
        TableRow(f"k{i:04d}", "alice", f"c{i % 2}", {"n": i, "even": i % 2 == 0, "x": 0.5, "gone": None})
        for i in range(100)
    ]  # several write batches and key chunks
    assert table.upsert(rows) == 100 and table.count(user_id="alice") == 100 and table.count(user_id="bob") == 0
    assert [r.fields for r in table.get(user_id="alice", match={"n": 7})] == [{"n": 7, "even": False, "x": 0.5}]
    assert len(table.get(user_id="alice", conversation_id="c0", match={"even": True})) == 50
    assert len(table.get(user_id="alice", keys=[r.key for r in rows] + ["nope"])) == 100
    table.upsert([TableRow("k0001", "alice", "c1", {"n": 1})])  # a write replaces the whole row
    assert table.get(user_id="alice", keys=["k0001"]) == [TableRow("k0001", "alice", "c1", {"n": 1})]
    table.upsert([TableRow("k0001", "bob", "c1", {"n": -1})])  # another user's key is never taken over
    assert table.get(user_id="bob") == [] and table.get(user_id="alice", keys=["k0001"])[0].fields == {"n": 1}
    with pytest.raises(StoreError):
        table.upsert([TableRow("k", "alice", "c1", {"user_id": "bob"})])
    with pytest.raises(StoreError):
        table.get(user_id="alice", match={"n') OR 1=1 --": 1})
    assert table.delete(user_id="bob") == 0
    assert table.delete(user_id="alice", keys=["k0000", "k0002"]) == 2
    assert table.delete(user_id="alice") == 98 and table.count() == 0


BAD_USERS = ["", "   ", None]


@pytest.mark.parametrize("bad", BAD_USERS, ids=repr)
def test_bad_user_id_raises(backend: Backend, bad: Any) -> None:
    edges, counters = EdgeStore(backend.open("edges")), CounterStore(backend.open("counters"))
    calls: list[Callable[[], object]] = [
        lambda: edges.add(bad, _edges("x")),
        lambda: edges.add(bad, []),
        lambda: edges.get(bad),
        lambda: edges.delete(bad, _edges("x")),
        lambda: edges.delete(bad, []),
        lambda: edges.delete_user(bad),
        lambda: edges.count(bad),
        lambda: edges.graph(bad),
        lambda: counters.get(bad, [TURN]),
        lambda: counters.get(bad, []),
        lambda: counters.all(bad),
        lambda: counters.record_recall(bad, [TURN], at=1.0),
        lambda: counters.record_recall(bad, [], at=1.0),
        lambda: counters.reinforce(bad, [TURN], at=1.0),
        lambda: counters.set_tier(bad, [TURN], "hot"),
        lambda: counters.delete_user(bad),
    ]
    for call in calls:
        with pytest.raises(StoreError):
            call()
    assert edges.table.count() == counters.table.count() == 0


def test_threads_count_exactly(backend: Backend) -> None:
    # Two stores over the same rows, four threads each: exact within a process on both backends.
    stores = [CounterStore(backend.open("counters")), CounterStore(backend.open("counters"))]
    errors: list[BaseException] = []

    def recall(store: CounterStore) -> None:
        try:
            for _ in range(50):
                store.record_recall("alice", [TURN], at=5.0)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=recall, args=(stores[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)
    assert stores[0].get("alice", [TURN])[TURN].recall_count == 400


OTHER_PROCESS = """
import sys
from pathlib import Path
import chromadb
from chromadb.config import Settings
from memstrata.memory.store import tables, tenant
from memstrata.memory.store.counters import CounterStore
from memstrata.memory.store.edges import Edge, EdgeStore
from memstrata.memory.store.tables import open_table

kind, where, prefix, database = sys.argv[1:5]
if kind == "sqlite":
    open_ = lambda name: open_table(name, path=Path(where), client=None)
else:
    host, port = where.split(":")
    settings = Settings(anonymized_telemetry=False)
    client = chromadb.HttpClient(host=host, port=int(port), database=database, settings=settings)
    open_ = lambda name: open_table(prefix + name, path=None, client=client)
EdgeStore(open_("edges")).add("alice", [Edge("c1", "s1:t9", "mentions", "ent:zoe")])
counters = CounterStore(open_("counters"))
for _ in range(100):
    counters.record_recall("alice", [("c1", "turn", "s1:t0")], at=2.0)
"""


def test_other_process_writes_are_seen(backend: Backend) -> None:
    edges, counters = EdgeStore(backend.open("edges")), CounterStore(backend.open("counters"))
    where = str(backend.folder) if backend.server is None else f"{backend.server.host}:{backend.server.port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-c", OTHER_PROCESS, backend.kind, where, backend.prefix, backend.database],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
    )
    ours = 0
    # On SQLite, increment the same counter for as long as the other process runs: both must count exactly.
    # On Chroma increments of two processes are last-writer-wins, so only the other process counts there.
    while backend.kind == "sqlite" and process.poll() is None:
        counters.record_recall("alice", [TURN], at=1.0)
        ours += 1
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr.decode()
    assert [(e.src, e.dst) for e in edges.get("alice", src="s1:t9")] == [("s1:t9", "ent:zoe")]
    assert counters.get("alice", [TURN])[TURN].recall_count == ours + 100


def test_a_server_table_reads_a_conversation_by_its_scope(chroma_server) -> None:
    backend = _chroma_backend(chroma_server, Path())
    table = backend.open("edges")
    assert isinstance(table, ChromaTable)
    edges = EdgeStore(table)
    for user in ("alice", "bob"):  # the same conversation id and unit ids: only the tenant tells them apart
        edges.add(user, _edges(user))
    wheres: list[Any] = []
    read = table.collection.get
    table.collection.get = lambda **kw: wheres.append(kw.get("where")) or read(**kw)  # type: ignore[method-assign]
    assert {e.dst for e in edges.get("bob", conversation_id="c1", src="ent:ann")} == {"ent:bob"}
    assert wheres[-1] == {"$and": [{"scope": tenant.scope_key("bob", "c1")}, {"src": "ent:ann"}]}  # no user clause
    assert {e.dst for e in edges.get("alice", conversation_id="c2")} == {"ep:0"}
    table.collection.get = read  # type: ignore[method-assign]
    rows = [TableRow(f"k{i}", user, "c1", {"n": i}) for i, user in enumerate(["alice", "bob", "alice"])]
    other = backend.open("other_rows")
    other.upsert(rows)
    assert [r.key for r in other.get(user_id="alice", conversation_id="c1")] == ["k0", "k2"]
    assert [r.fields for r in other.get(user_id="bob", conversation_id="c1")] == [{"n": 1}]  # the stamp is not a field
