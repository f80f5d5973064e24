"""A real Chroma server under concurrent writers, a reader during writes, and a server that stops mid-ingest.

Each case starts its writers as separate processes (``memstrata`` over ``chroma run``
on loopback), holds them at a barrier until every one has imported and opened its
store (each says so on its stdout and then blocks reading its stdin), and releases
them together. No step is ordered by sleeping: a process that must wait for another
blocks on a pipe. Afterwards every user's records, in every
registered kind (iterated from :func:`memstrata.memory.levels.levels`, so kinds added
later are covered by construction), the edges and the counters equal those of a
sequential run into a fresh embedded store, record by record: nothing lost, nothing
duplicated. A raw scan of every collection, without the tenant filter, shows that no
row of these users is hidden from them and that every row's key is its own user's.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, HashEmbeddings, assert_store_ok
from plugins.chroma_server import ChromaServer, start_chroma

from memstrata import Memstrata
from memstrata.memory.levels import levels
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.tenant import storage_key

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "ANONYMIZED_TELEMETRY": "False"}
TIMEOUT_S = 600

WRITER = r"""
import json, sys
sys.path.insert(0, "tests")
from conftest import HashEmbeddings
from memstrata import Memstrata

url, user, source = sys.argv[1:4]
mem = Memstrata(url=url, embeddings=HashEmbeddings())
mem.store.collection("turn")  # connected and checked before the barrier
print("ready", flush=True)
if sys.stdin.readline() != "go\n":  # the barrier: blocks until the test releases every writer
    sys.exit("the test went away before the start")
stats = mem.ingest(source, user_id=user)
print(json.dumps({"turns_added": stats["turns_added"]}), flush=True)
"""

TOPICS = [
    ("signed the lease on a flat in {city}", "Which neighbourhood did you pick?"),
    ("adopted a grey cat called {pet}", "Does {pet} like the new balcony?"),
    ("started cello lessons with {teacher} on Tuesdays", "How is the cello going?"),
    ("ran the {city} half marathon in 1:52", "What was your split at 10k?"),
]


def conversation(conversation_id: str, marker: str, *, sessions: int = 2, turns: int = 8) -> dict[str, Any]:
    """A plain message list: the same template for everyone, with a user's own marker words in it.

    Users built from it hold near-identical content (the only differences are the marker words),
    which is what an isolation failure would need to show up.
    """
    words = {"city": f"{marker}ville", "pet": f"{marker}cat", "teacher": f"{marker}teacher"}
    messages = []
    for s in range(sessions):
        for t in range(turns):
            said, asked = TOPICS[(s + t // 2) % len(TOPICS)]
            text = (
                f"I {said.format(**words)} ({marker} s{s} t{t})."
                if t % 2 == 0
                else f"{asked.format(**words)} Tell me more, {marker}."
            )
            messages.append(
                {"speaker": ("Priya", "Tom")[t % 2], "text": text, "timestamp": f"2024-0{s + 1}-1{s}T18:{t:02d}:00"}
            )
    return {"conversation_id": conversation_id, "messages": messages}


def write(folder: Path, name: str, data: dict[str, Any]) -> Path:
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# ---- what a store holds ---------------------------------------------------------------------------


def unit_kinds(store: MemoryStore) -> list[str]:
    """Every registered kind (the registry is the source of truth) plus any stored one."""
    return sorted({lv.kind for lv in levels()} | set(store.stored_kinds()))


def digest(store: MemoryStore, user_id: str) -> dict[str, dict[str, str]]:
    """One user's records as read through the tenant scope: per kind, ``conversation/unit id -> document, payload``.

    Edges and counters are keyed by their storage key (derived from the user and the link). Of HMO's fields in the
    counters only whether a record was scored is compared: its importance (novelty against the memory written so far),
    priority and tier depend on the order writes landed in, which concurrent writers change by design.
    """
    out: dict[str, dict[str, str]] = {}
    for kind in unit_kinds(store):
        rows = store.get(kind, user_id=user_id)
        out[kind] = {
            f"{r.metadata['conversation_id']}/{r.unit_id}": json.dumps([r.document, r.payload], sort_keys=True)
            for r in rows
        }
        assert len(out[kind]) == len(rows), f"{kind}: two records with one id for {user_id}"
    for name, table in (("edges", store.edges.table), ("counters", store.counters.table)):
        out[name] = {
            r.key: json.dumps([r.conversation_id, _order_free(r.fields)], sort_keys=True)
            for r in table.get(user_id=user_id)
        }
    return out


HMO_FIELDS = ("importance", "priority", "scored_at", "tier")


def _order_free(fields: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in fields.items() if k not in HMO_FIELDS}
    return {**kept, "scored": fields.get("importance") is not None} if "importance" in fields else kept


def owners(store: MemoryStore) -> Counter[tuple[str, str]]:
    """Rows per ``(part, user_id)`` from a raw scan of every collection, without any tenant filter.

    Every unit row's key must be the one the tenant scope derives from its own user,
    conversation and unit id (no row can be read or overwritten through another user's key).
    """
    found: Counter[tuple[str, str]] = Counter()
    for kind in unit_kinds(store):
        res = store.collection(kind).get(include=["metadatas"])
        for key, meta in zip(res["ids"], res["metadatas"], strict=True):
            assert key == storage_key(meta["user_id"], meta["conversation_id"], meta["unit_id"]), (kind, meta)
            found[(kind, meta["user_id"])] += 1
    for name, table in (("edges", store.edges.table), ("counters", store.counters.table)):
        for meta in table.collection.get(include=["metadatas"])["metadatas"]:
            found[(name, meta["user_id"])] += 1
    return found


def reference(folder: Path, jobs: list[tuple[str, Path]]) -> dict[str, dict[str, dict[str, str]]]:
    """The digests of the same ingests run one after the other into a fresh embedded store."""
    mem = Memstrata(path=folder, embeddings=HashEmbeddings())
    try:
        for user, source in jobs:
            mem.ingest(source, user_id=user)
        return {user: digest(mem.store, user) for user in dict.fromkeys(u for u, _ in jobs)}
    finally:
        mem.close()


def server_store(server: ChromaServer) -> MemoryStore:
    return MemoryStore(url=server.url, embeddings=HashEmbeddings())


def run_together(url: str, jobs: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Start one writer process per job, release them at once, and return what each reports."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, url, user, str(source)],
            cwd=REPO,
            env=ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for user, source in jobs
    ]
    try:
        for proc in procs:
            line = proc.stdout.readline() if proc.stdout else ""
            assert line.strip() == "ready", f"writer did not start: {line!r}\n{proc.communicate()[1][-3000:]}"
        for proc in procs:  # every writer is ready: release them, one short write each
            release(proc)
        outs = [proc.communicate(timeout=TIMEOUT_S) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, (_, errs) in zip(procs, outs, strict=True):
        assert proc.returncode == 0, errs[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def release(proc: subprocess.Popen[str]) -> None:
    """Let a child that waits on its stdin (``sys.stdin.readline()``) go on."""
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def assert_exactly(server: ChromaServer, expected: dict[str, dict[str, dict[str, str]]]) -> None:
    """Each user holds exactly the expected records, in every kind, edges and counters, and nothing else."""
    store = server_store(server)
    for user, want in expected.items():
        got = digest(store, user)
        assert set(got) >= set(want), f"kinds missing for {user}: {set(want) - set(got)}"
        for part, rows in want.items():
            lost, extra = rows.keys() - got[part].keys(), got[part].keys() - rows.keys()
            assert not lost and not extra, f"{user} {part}: lost {sorted(lost)[:5]}, extra {sorted(extra)[:5]}"
            assert got[part] == rows, f"{user} {part}: records differ from a sequential run"
        assert sum(len(r) for k, r in got.items() if k not in ("edges", "counters")) > 0
        assert_store_ok(store, user)
    raw = owners(store)
    for user, want in expected.items():
        for part, rows in want.items():
            assert raw[(part, user)] == len(rows), (
                f"{user} {part}: {raw[(part, user)]} rows stored, {len(rows)} visible"
            )


# ---- the three concurrency cases -------------------------------------------------------------------


def test_eight_processes_ingest_eight_users_at_once(chroma_server: ChromaServer, tmp_path: Path) -> None:
    # The same conversation id for everyone: equal unit ids in eight tenants.
    jobs = [(f"cc8-user{i}", write(tmp_path, f"u{i}", conversation("chat", f"mk{i}x"))) for i in range(8)]
    reports = run_together(chroma_server.url, jobs)
    assert [r["turns_added"] for r in reports] == [16] * 8
    assert_exactly(chroma_server, reference(tmp_path / "ref", jobs))


def test_four_processes_ingest_four_conversations_of_one_user(chroma_server: ChromaServer, tmp_path: Path) -> None:
    jobs = [("cc4-solo", write(tmp_path, f"c{i}", conversation(f"conv{i}", f"cv{i}x", sessions=3))) for i in range(4)]
    reports = run_together(chroma_server.url, jobs)
    assert [r["turns_added"] for r in reports] == [24] * 4
    expected = reference(tmp_path / "ref", jobs)
    assert {k.split("/")[0] for k in expected["cc4-solo"]["turn"]} == {f"conv{i}" for i in range(4)}
    assert_exactly(chroma_server, expected)


def test_two_processes_ingest_the_same_file_at_the_same_moment(chroma_server: ChromaServer, tmp_path: Path) -> None:
    source = write(tmp_path, "same", conversation("same", "twinx", sessions=3))
    jobs = [("cc2-twin", source), ("cc2-twin", source)]
    reports = run_together(chroma_server.url, jobs)
    assert sum(r["turns_added"] for r in reports) >= 24  # both may write a turn; the store keeps it once
    assert_exactly(chroma_server, reference(tmp_path / "ref", jobs[:1]))


# ---- a reader while a writer writes ----------------------------------------------------------------

PAUSING_WRITER = r"""
import sys
sys.path.insert(0, "tests")
from conftest import HashEmbeddings
from memstrata import Memstrata

url, user, source = sys.argv[1:4]
stops, seen = sys.argv[4].split(","), []

def on_progress(event):
    # The graph's event loop stands still here, so nothing more is written until the reader says so.
    seen.append(event["stage"])
    name = f"{event['stage']}-{seen.count(event['stage'])}"
    if name in stops:
        print(f"paused {name}", flush=True)
        if sys.stdin.readline() != "go\n":  # blocks until the reader has read
            sys.exit("the reader went away")

Memstrata(url=url, embeddings=HashEmbeddings()).ingest(source, user_id=user, on_progress=on_progress)
print("done", flush=True)
"""
PAUSES = ["turns-1", "contexts-1", "segment-1", "summaries-1"]


def read_units(store: MemoryStore, user_id: str, *, reverse: bool) -> dict[str, dict[tuple[str, str], Any]]:
    """Every registered kind of one user as a reader sees it, read kind after kind (children first if ``reverse``)."""
    order = list(reversed(levels())) if reverse else levels()
    return {
        lv.kind: {
            (r.metadata["conversation_id"], r.unit_id): lv.unit.model_validate(r.payload)
            for r in store.get(lv.kind, user_id=user_id)
        }
        for lv in order
    }


def dangling(seen: dict[str, dict[tuple[str, str], Any]], links: str) -> list[str]:
    """Links (``"children"``: child and raw-turn ids; ``"parents"``: parent ids) that point at no unit seen."""
    ids = {key for units in seen.values() for key in units}
    out = []
    for kind, units in seen.items():
        for (conv, _), unit in units.items():
            targets = [*unit.child_ids(), *unit.linked_turn_ids()] if links == "children" else unit.parent_ids()
            out += [f"{kind} {unit.id} -> {t}" for t in targets if (conv, t) not in ids]
    return sorted(out)


@pytest.fixture(scope="module")
def reader_views(chroma_server: ChromaServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """What a second process sees at four points of an ingest that adds three sessions to a stored one.

    The writer holds still at each point (a progress event it waits in) while this process
    reads the store kind by kind and runs a query through the public API.
    """
    folder, user = tmp_path_factory.mktemp("reader"), "cc-reader"
    first = write(folder, "first", conversation("chat", "rdx", sessions=1))
    mem = Memstrata(
        url=chroma_server.url,
        embeddings=HashEmbeddings(),
        scale={"refresh_s": 0.0},
    )
    mem.ingest(first, user_id=user)
    source = write(folder, "all", conversation("chat", "rdx", sessions=4))
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSING_WRITER, chroma_server.url, user, str(source), ",".join(PAUSES)],
        cwd=REPO,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    views: dict[str, dict[str, Any]] = {}
    try:
        for name in PAUSES:
            line = proc.stdout.readline() if proc.stdout else ""
            assert line.strip() == f"paused {name}", f"{line!r}\n{proc.stderr.read()[-3000:] if proc.stderr else ''}"
            result = mem.retrieve("Which neighbourhood did you pick?", user_id=user)
            views[name] = {
                "children": dangling(read_units(mem.store, user, reverse=True), "children"),
                "parents": dangling(read_units(mem.store, user, reverse=False), "parents"),
                "evidence": result.evidence,
            }
            release(proc)
        _, errs = proc.communicate(timeout=TIMEOUT_S)
        assert proc.returncode == 0, errs[-3000:]
        views["after"] = {"parents": dangling(read_units(mem.store, user, reverse=False), "parents")}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        mem.close()
    return views


def test_a_reader_during_writes_never_sees_a_dangling_link(reader_views: dict[str, dict[str, Any]]) -> None:
    # Read children first: whatever a unit links down to (its episode, its raw turns) is already there.
    for name in PAUSES:
        assert reader_views[name]["children"] == [], name
        evidence = reader_views[name]["evidence"]
        assert evidence and all("rdx" in e.text for e in evidence), name
    assert reader_views["after"]["parents"] == []


def test_a_reader_during_writes_never_sees_an_episode_without_its_summary(
    reader_views: dict[str, dict[str, Any]],
) -> None:
    for name in PAUSES:
        assert reader_views[name]["parents"] == [], name


# ---- the server stops mid-ingest -------------------------------------------------------------------


PAUSED_CLI = r"""
import os, sys
from memstrata.cli import app
from memstrata.client import Memstrata

signal_fd, args = int(sys.argv[1]), sys.argv[2:]
ingest, held = Memstrata.aingest, []

def hold_after_the_first_turns(event, then):
    # The graph's event loop stands still here: the test stops the server before anything more is written.
    if then is not None:
        then(event)
    if event.get("stage") == "turns" and not held:
        held.append(event)
        os.write(signal_fd, b"paused\n")
        os.close(signal_fd)
        if sys.stdin.readline() != "go\n":
            sys.exit("the test went away")

async def aingest(self, source, *, on_progress=None, **kwargs):
    return await ingest(self, source, on_progress=lambda e: hold_after_the_first_turns(e, on_progress), **kwargs)

Memstrata.aingest = aingest
app(prog_name="memstrata", args=args)
"""
"""The ``memstrata`` command, held still once its first turns are stored until the test writes ``go``."""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memstrata", *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=TIMEOUT_S
    )


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[list[ChromaServer]]:
    """Servers this test starts and stops itself over one data folder; whatever still runs is stopped after."""
    servers: list[ChromaServer] = []
    yield servers
    for server in servers:
        server.stop()


def test_a_server_stopped_mid_ingest_is_a_clear_error_and_a_rerun_loses_nothing(
    private_server: list[ChromaServer], tmp_path: Path, minilm: Any
) -> None:
    from memstrata.memory.normalize import load_path, normalize_input
    from memstrata.memory.store.reads import incomplete_sessions

    data = tmp_path / "data"
    private_server.append(start_chroma(data))
    source = write(tmp_path, "big", conversation("big", "bgx", sessions=4, turns=40))
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PAUSED_CLI,
            str(write_end),
            "ingest",
            str(source),
            "--user",
            "stop",
            "--chroma-url",
            private_server[0].url,
        ],
        cwd=REPO,
        env=ENV,
        pass_fds=(write_end,),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)  # the child holds the only write end: it says "paused", or exits and the read ends
    try:
        with os.fdopen(read_end) as paused:
            waiting = select.poll()  # poll, not select: the suite can hold more than FD_SETSIZE (1024) descriptors
            waiting.register(paused, select.POLLIN)
            said = paused.readline() if waiting.poll(TIMEOUT_S * 1000) else ""
        if said != "paused\n":
            proc.kill()
            pytest.fail(f"the ingest did not pause after its first turns ({said!r}):\n{proc.communicate()[1][-3000:]}")
        assert private_server[0].client().get_collection("memstrata_turn").count() > 0
        private_server[0].stop()  # the first turns are in and the ingest is held: it is under way
        release(proc)
        out, errs = proc.communicate(timeout=TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, (out, errs)
    assert "Traceback" not in out + errs
    assert "Chroma server" in errs and "stopped answering" in errs and "re-run" in errs, errs

    private_server.append(start_chroma(data))
    rerun = cli("ingest", str(source), "--user", "stop", "--chroma-url", private_server[1].url)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    store = MemoryStore(url=private_server[1].url, embeddings=minilm)
    conv = normalize_input(load_path(source), user_id="stop")[0]
    assert {r.unit_id for r in store.get("turn", user_id="stop")} == {t.id for s in conv.sessions for t in s.turns}
    assert incomplete_sessions(store, conv) == []  # every turn in an episode with its summary, every view there


@pytest.mark.parametrize(
    "race",
    [
        "Error executing plan: Internal error: Error creating hnsw segment reader: Nothing found on disk",
        "Error executing plan: Internal error: Error finding id",
        "Error executing plan: Internal error: Error getting embedding",
    ],
)
def test_a_transient_server_read_error_is_retried_and_a_lasting_one_raised(race: str) -> None:
    """The Chroma server's read races are repeated away; anything else, or for too long, is raised."""
    from chromadb.errors import InternalError

    from memstrata.memory.store.vectors import ServerGuard

    class Flaky:
        def __init__(self, failures: int, message: str) -> None:
            self.failures, self.message, self.calls = failures, message, 0

        def get(self) -> str:
            self.calls += 1
            if self.calls <= self.failures:
                raise InternalError(self.message)
            return "rows"

    twice = Flaky(2, race)
    assert ServerGuard(twice, "http://127.0.0.1:1").get() == "rows" and twice.calls == 3
    always = Flaky(100, race)
    with pytest.raises(InternalError):
        ServerGuard(always, "http://127.0.0.1:1").get()
    assert always.calls == 6
    other = Flaky(1, "Error executing plan: collection not found")
    with pytest.raises(InternalError):
        ServerGuard(other, "http://127.0.0.1:1").get()
    assert other.calls == 1


def test_a_server_read_missing_its_vectors_is_repeated_and_a_lasting_one_raised() -> None:
    """Rows without their vectors (a server read right after a collection's first write) never reach ``_records``."""
    from memstrata.errors import PartialReadError
    from memstrata.memory.store.vectors import ServerGuard

    class Late:
        def __init__(self, partial: int) -> None:
            self.partial, self.calls = partial, 0

        def get(self, include: list[str] | None = None) -> dict:
            self.calls += 1
            vectors = [] if self.calls <= self.partial else [[0.1, 0.2], [0.3, 0.4]]
            return {"ids": ["a", "b"], "embeddings": vectors if "embeddings" in (include or []) else None}

        def query(self, include: list[str] | None = None) -> dict:
            self.calls += 1
            first = [[0.1, 0.2]] if self.calls <= self.partial else [[0.1, 0.2], [0.3, 0.4]]
            return {"ids": [["a", "b"], ["c"]], "embeddings": [first, [[0.5, 0.6]]]}

    once = Late(1)
    got = ServerGuard(once, "http://127.0.0.1:1").get(include=["embeddings"])
    assert len(got["embeddings"]) == 2 and once.calls == 2
    asked = Late(2)
    assert len(ServerGuard(asked, "http://127.0.0.1:1").query(include=["embeddings"])["embeddings"][0]) == 2
    assert asked.calls == 3
    unasked = Late(5)  # no vectors asked for: nothing to repeat
    assert ServerGuard(unasked, "http://127.0.0.1:1").get(include=["metadatas"])["embeddings"] is None
    assert unasked.calls == 1
    always = Late(100)
    with pytest.raises(PartialReadError, match="without all their vectors"):
        ServerGuard(always, "http://127.0.0.1:1").get(include=["embeddings"])
    assert always.calls == 6


def test_reads_racing_another_clients_deletes_on_a_real_server_all_succeed(chroma_server: ChromaServer) -> None:
    """A read whose rows another client deletes meanwhile ("Error finding id", "Error getting embedding") is repeated.

    Unguarded, 1 in 40 to 1 in 60 of these reads failed on this machine's loopback server, so 1,200 reads without
    the retry fail with near certainty.
    """
    import random
    import threading
    import time

    from memstrata.memory.store.vectors import ServerGuard

    name = "race-finding-id"
    writer = chroma_server.client().get_or_create_collection(name, embedding_function=None)
    reader = ServerGuard(chroma_server.client(), chroma_server.url).get_collection(name)
    stop, rng = threading.Event(), random.Random(0)

    def write(n: int) -> None:
        ids = [f"r{n}-{k}" for k in range(20)]
        vectors = [[rng.random() for _ in range(8)] for _ in ids]
        writer.upsert(ids=ids, embeddings=vectors, metadatas=[{"c": 1}] * 20)

    # Another race, not this test's: right after a collection's first write, a read can return its ids with no
    # vectors at all (no error). The reads start once the first rows come back whole.
    write(0)
    deadline = time.monotonic() + 30
    while len(reader.get(include=["embeddings"])["embeddings"]) < 20:
        assert time.monotonic() < deadline, "the first rows' vectors never became readable"
        time.sleep(0.05)

    def churn() -> None:
        n = 1
        while not stop.is_set():
            write(n)
            writer.delete(ids=[f"r{n - 1}-{k}" for k in range(20)])
            n += 1

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        for _ in range(1200):
            got = reader.get(where={"c": 1}, include=["embeddings", "metadatas"])
            assert len(got["ids"]) == len(got["embeddings"])
    finally:
        stop.set()
        thread.join(timeout=30)
        chroma_server.client().delete_collection(name)
