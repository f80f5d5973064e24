"""A store's SQLite files keep their connections open between calls (issues 50 and 53: a chat write and a user's
first query each made about 20 connections, 0.5-3 ms apiece); what a kept connection reads is what a new one would.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pytest

from memstrata.memory.store import MemoryStore
from memstrata.memory.store.sqlite_table import KEEP_IDLE, Connections, sqlite_connection
from memstrata.memory.store.tables import TableRow


def _table(path: Path) -> Connections:
    files = Connections(path / "t.sqlite3")
    with files.transaction() as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (x INTEGER)")
    return files


def test_a_connection_is_kept_and_sees_what_others_commit_later(tmp_path: Path) -> None:
    files = _table(tmp_path)
    with files.connection() as db:
        kept = db
        assert db.execute("SELECT count(*) FROM t").fetchone() == (0,)
    with sqlite_connection(files.path) as other:  # another connection (another process's, say) writes
        other.execute("INSERT INTO t VALUES (1)")
    with files.connection() as db:
        assert db is kept
        assert db.execute("SELECT count(*) FROM t").fetchone() == (1,)


def test_a_failed_call_closes_its_connection_and_rolls_its_transaction_back(tmp_path: Path) -> None:
    files = _table(tmp_path)
    with pytest.raises(RuntimeError), files.transaction() as db:
        db.execute("INSERT INTO t VALUES (1)")
        failed = db
        msg = "stop"
        raise RuntimeError(msg)
    assert files.idle() == 0
    with pytest.raises(sqlite3.ProgrammingError):  # closed, not kept
        failed.execute("SELECT 1")
    with files.connection() as db:
        assert db.execute("SELECT count(*) FROM t").fetchone() == (0,)
    with pytest.raises(sqlite3.OperationalError), files.connection() as db:
        db.execute("SELECT * FROM missing")
    assert files.idle() == 0


def test_a_connection_left_inside_a_transaction_is_not_kept(tmp_path: Path) -> None:
    files = _table(tmp_path)
    with files.connection() as db:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO t VALUES (1)")
    assert files.idle() == 0
    with files.transaction() as db:  # the write lock was let go with the connection
        db.execute("INSERT INTO t VALUES (2)")
    with files.connection() as db:
        assert db.execute("SELECT x FROM t").fetchall() == [(2,)]


def test_threads_never_share_a_connection_and_at_most_keep_wait(tmp_path: Path) -> None:
    files = _table(tmp_path)
    with files.transaction() as db:
        db.executemany("INSERT INTO t VALUES (?)", [(1,), (3,), (5,)])
    barrier, held, read, lock = threading.Barrier(KEEP_IDLE + 2, timeout=30), [], [], threading.Lock()

    def work() -> None:
        with files.connection() as db:
            with lock:
                held.append(db)
            barrier.wait()  # every thread holds its connection at once
            rows = sorted(x for (x,) in db.execute("SELECT x FROM t"))
            with lock:
                read.append(rows)

    threads = [threading.Thread(target=work) for _ in range(KEEP_IDLE + 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(db) for db in held}) == KEEP_IDLE + 2
    assert read == [[1, 3, 5]] * (KEEP_IDLE + 2)
    assert files.idle() == KEEP_IDLE
    files.close()
    assert files.idle() == 0
    with files.connection() as db:  # a use after close opens a new one
        assert db.execute("SELECT count(*) FROM t").fetchone() == (3,)


def _child_writes(files: Connections) -> None:
    with files.transaction() as db:
        db.execute("INSERT INTO t VALUES (7)")


def test_a_forked_child_opens_its_own_connections(tmp_path: Path) -> None:
    files = _table(tmp_path)
    with files.connection() as db:
        kept = db
    child = multiprocessing.get_context("fork").Process(target=_child_writes, args=(files,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    with files.connection() as db:
        assert db is kept
        assert db.execute("SELECT x FROM t").fetchall() == [(7,)]


def test_a_store_s_tables_share_one_file_s_connections_and_close_them(tmp_path: Path) -> None:
    store = MemoryStore(path=tmp_path / "store")
    assert store.sqlite is not None and store.words is not None
    store.items.upsert([TableRow("k", "u", "c", {"v": 1})])
    store.journal.upsert([TableRow("k", "u", "c", {"v": 2})])
    assert store.sqlite.idle() == 1  # both tables took turns on one connection
    assert [r.fields["v"] for r in store.items.get(user_id="u")] == [1]
    store.close()
    assert store.sqlite.idle() == 0 and store.words.connections.idle() == 0
    assert [r.fields["v"] for r in store.journal.get(user_id="u")] == [2]  # a later use opens a new connection


def test_a_table_refuses_connections_to_another_file(tmp_path: Path) -> None:
    from memstrata.errors import StoreError
    from memstrata.memory.store.sqlite_table import SqliteTable

    with pytest.raises(StoreError, match="its connections are to"):
        SqliteTable(tmp_path / "a.sqlite3", "items", connections=Connections(tmp_path / "b.sqlite3"))
