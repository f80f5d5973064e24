"""Tenant isolation, attacked: two users with near-identical memories, 1,000 random queries through every entry point.

Both users hold the same conversation id, the same unit ids and the same template
text; only their marker words differ (``alfq`` and ``brvq``), and every turn carries
its user's marker, so a turn of the other user is recognisable wherever it surfaces.
The queries (seeded, reproducible) mix both users' words, the other user's marker
included. Entry points: :meth:`Memstrata.retrieve` and :meth:`Memstrata.ask`, the
LangChain retriever and tool, the retrieval graph served by ``langgraph dev`` (over
HTTP) and the ``memstrata ask`` command. Every registered kind is also queried
directly through the store, so kinds added later are covered by construction.
``forget`` is then proven by a raw scan of every collection and of the edge,
counter and item tables.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from test_concurrency import ENV, conversation, digest, unit_kinds, write
from test_studio import studio  # noqa: F401 - the `langgraph dev` server fixture
from typer.testing import CliRunner

from memstrata import Memstrata
from memstrata.cli import app
from memstrata.integrations.langchain import MemstrataRetriever, memory_search_tool
from memstrata.memory.levels import levels
from memstrata.memory.store.tables import SQLITE_FILE, TableRow
from memstrata.memory.store.vectors import indexes_words
from memstrata.memory.store.words import WORDS_FILE

pytestmark = pytest.mark.integration

USERS = {"iso-a": "alfq", "iso-b": "brvq"}
SEED = 20240516
WORDS = [
    "neighbourhood",
    "lease",
    "flat",
    "cat",
    "balcony",
    "cello",
    "lessons",
    "Tuesdays",
    "half",
    "marathon",
    "split",
    "Priya",
    "Tom",
    "when",
    "where",
    "who",
    "what",
    "did",
    "pick",
    "teacher",
    "ville",
    "run",
]
COUNTS = {"retrieve": 420, "ask": 200, "retriever": 150, "tool": 150, "studio": 40, "cli": 40}


def queries(n: int, rng: random.Random) -> list[str]:
    """Random questions over both users' words, often naming a user's marker (the other's as often as one's own)."""
    out = []
    for _ in range(n):
        words = rng.sample(WORDS, rng.randint(1, 5))
        if rng.random() < 0.7:
            marker = rng.choice(list(USERS.values()))
            words.insert(rng.randrange(len(words) + 1), marker + rng.choice(["", "ville", "cat", "teacher"]))
        out.append(" ".join(words) + rng.choice(["?", "", "."]))
    return out


def foreign(user: str, texts: list[str]) -> list[str]:
    """The texts that carry another user's marker (a leak), or no marker of this user (a turn of nobody's)."""
    other = [m for u, m in USERS.items() if u != user]
    return [t for t in texts if any(m in t for m in other) or USERS[user] not in t]


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory, minilm: Any) -> Iterator[tuple[Memstrata, Path]]:
    """Both users ingested into one embedded store (the packaged MiniLM: the ``langgraph dev`` server reads it too)."""
    folder = tmp_path_factory.mktemp("iso")
    # persona_floor 0: every fact of a speaker joins some dimension, so both users surely hold persona rows
    # (the marker words move facts around the default floor, and forget must be proven on every kind)
    mem = Memstrata(
        path=folder / "store",
        embeddings=minilm,
        persona={"floor": 0.0},
    )
    for user, marker in USERS.items():
        mem.ingest(write(folder, user, conversation("shared", marker, sessions=3)), user_id=user)
    yield mem, folder / "store"
    mem.close()


def test_stored_kinds_hold_only_their_users_rows(memory: tuple[Memstrata, Path]) -> None:
    mem, _ = memory
    for user in USERS:
        for kind, rows in digest(mem.store, user).items():
            if kind in ("edges", "counters"):
                continue
            docs = [json.loads(blob)[0] for blob in rows.values()]
            assert not [d for d in docs if any(m in d for u, m in USERS.items() if u != user)], (user, kind)
    assert digest(mem.store, "iso-a")["turn"].keys() == digest(mem.store, "iso-b")["turn"].keys()  # same ids


def test_a_thousand_queries_through_every_entry_point_never_cross_tenants(
    memory: tuple[Memstrata, Path],
    studio: str,  # noqa: F811 - the imported fixture
) -> None:
    from langgraph_sdk import get_sync_client

    mem, path = memory
    rng = random.Random(SEED)
    leaks: list[tuple[str, str, str, str]] = []
    asked = dict.fromkeys(COUNTS, 0)

    def check(entry: str, user: str, query: str, texts: list[str]) -> None:
        asked[entry] += 1
        leaks.extend((entry, user, query, t[:80]) for t in foreign(user, texts))

    plans = {entry: [(rng.choice(list(USERS)), q) for q in queries(n, rng)] for entry, n in COUNTS.items()}
    for i, (user, query) in enumerate(plans["retrieve"]):
        result = mem.retrieve(query, user_id=user, context_budget=rng.choice([50, 300, 1500]))
        check("retrieve", user, query, [e.text for e in result.evidence] + [result.context] * bool(result.evidence))
        vector = mem.store.embeddings.embed_query(query) if i % 4 == 0 else None
        for kind in unit_kinds(mem.store) if vector is not None else []:  # every kind, straight through the store
            found = mem.store.query(kind, user_id=user, vector=vector, k=5)
            assert all(r.metadata["user_id"] == user for r in found), (kind, user, query)
            leaks.extend(
                ("store:" + kind, user, query, r.document[:80])
                for r in found
                if any(m in r.document for u, m in USERS.items() if u != user)
            )
            if indexes_words(kind):  # the word index too, asked for the query's words
                found = mem.store.matching(kind, user_id=user, words=query.split(), limit=5)
                assert all(r.metadata["user_id"] == user for r in found), (kind, user, query)
                leaks.extend(
                    ("words:" + kind, user, query, r.document[:80])
                    for r in found
                    if any(m in r.document for u, m in USERS.items() if u != user)
                )
    for user, query in plans["ask"]:
        result = mem.ask(query, user_id=user)
        check("ask", user, query, [e.text for e in result.evidence])
    retrievers = {u: MemstrataRetriever(memstrata=mem, user_id=u, k=6) for u in USERS}
    tools = {u: memory_search_tool(mem, user_id=u) for u in USERS}
    for user, query in plans["retriever"]:
        check("retriever", user, query, [d.page_content for d in retrievers[user].invoke(query)])
    for user, query in plans["tool"]:
        out = tools[user].invoke({"query": query})
        lines = [line for line in out.splitlines() if any(m in line for m in USERS.values())]
        check("tool", user, query, lines)
        assert USERS[user] in out or "no memory" in out.lower(), out[:200]

    client = get_sync_client(url=studio, api_key=None, timeout=240)
    for user, query in plans["studio"]:
        out = client.runs.wait(
            None, "retrieval", input={"query": query}, context={"user_id": user, "data_dir": str(path)}
        )
        check("studio", user, query, [e["text"] for e in out["evidence"]])
        assert out["evidence"], query

    runner = CliRunner()
    for user, query in plans["cli"]:
        done = runner.invoke(app, ["ask", query, "--user", user, "--data-dir", str(path), "--json"])
        assert done.exit_code == 0, done.output[-2000:]
        check("cli", user, query, [e["text"] for e in json.loads(done.stdout)["evidence"]])
    assert asked == COUNTS and sum(asked.values()) >= 1000
    assert leaks == []


def test_the_cli_as_a_command_stays_in_its_tenant(memory: tuple[Memstrata, Path]) -> None:
    _, path = memory
    for user in ["iso-b"]:  # one real process (a MiniLM load); the other entry points ran in-process above
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "memstrata",
                "ask",
                "Which neighbourhood did you pick?",
                "--user",
                user,
                "--data-dir",
                str(path),
                "--json",
            ],
            cwd=REPO,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        texts = [e["text"] for e in json.loads(done.stdout)["evidence"]]
        assert texts and foreign(user, texts) == []


def raw_rows(mem: Memstrata, path: Path) -> list[tuple[str, str, str]]:
    """Every row of the store as ``(part, user_id, text)``, read without any tenant filter."""
    rows = []
    for kind in unit_kinds(mem.store):
        res = mem.store.collection(kind).get(include=["metadatas", "documents"])
        rows += [
            (kind, m["user_id"], f"{d} {m.get('payload', '')}")
            for m, d in zip(res["metadatas"], res["documents"], strict=True)
        ]
    with sqlite3.connect(path / SQLITE_FILE) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            rows += [
                (table, u, f"{c} {d}")
                for u, c, d in db.execute(f'SELECT user_id, conversation_id, data FROM "{table}"').fetchall()
            ]
    with sqlite3.connect(path / WORDS_FILE) as db:  # the word index: its rows, and every term its index holds
        tables = [t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE sql LIKE 'CREATE VIRTUAL TABLE%'")]
        for table in tables:
            rows += [
                ("words:" + table, u, f"{c} {t}")
                for u, c, t in db.execute(f'SELECT user, conv, text FROM "{table}"').fetchall()
            ]
            db.execute(f'CREATE VIRTUAL TABLE IF NOT EXISTS temp."v_{table}" USING fts5vocab(main, "{table}", row)')
            rows += [("terms:" + table, "", term) for (term,) in db.execute(f'SELECT term FROM temp."v_{table}"')]
    return rows


def test_forget_leaves_no_trace_of_the_user_anywhere(memory: tuple[Memstrata, Path]) -> None:
    mem, path = memory
    mem.store.counters.record_recall("iso-a", [("shared", "turn", "s1:t0")], at=1.0)
    mem.store.items.upsert([TableRow("k-a", "iso-a", "shared", {"v": "alfq"})])
    kept = digest(mem.store, "iso-b")
    before = raw_rows(mem, path)
    parts = {user: {p for p, u, _ in before if u == user} for user in USERS}
    assert parts["iso-a"] >= parts["iso-b"] | {lv.kind for lv in levels(role="raw")} | {"counters", "items"}
    done = CliRunner().invoke(app, ["forget", "--user", "iso-a", "--yes", "--data-dir", str(path)])
    assert done.exit_code == 0, done.output
    after = raw_rows(mem, path)
    assert [r for r in after if r[1] == "iso-a"] == []
    assert [r for r in after if "alfq" in r[2]] == []  # no copy of its text under another id either
    assert [r for r in before if r[0].startswith("terms:") and "alfq" in r[2]]  # the index did hold its words
    assert digest(mem.store, "iso-b") == kept
    assert len([r for r in after if not r[0].startswith("terms:")]) == sum(u == "iso-b" for _, u, _ in before)
