"""A persisted word index of the searched text, ranked by BM25: the bounded search path's lexical reads.

On a large user, the bounded path (:mod:`memstrata.memory.index.bounded`) reads the units that contain
a question's words. Chroma answers ``$contains`` from a trigram index and scans its matches in storage
order; on 30k turns those reads were about two thirds of a query's reading time, and they grow with the
collection (issue 12). This index answers from SQLite FTS5 with a word tokenizer (Porter stems, Unicode
case folding), ranked by FTS5's BM25 over all the words at once, so the units returned are the best
matches of the question's words, not the first ones stored that hold one of them.

It lives in ``memstrata_words.sqlite3`` beside the embedded store, one FTS5 table per kind, and is
written with every unit write, delete and user deletion of :class:`~memstrata.memory.store.VectorStore`.
A Chroma server store has no such file: its bounded reads rank the units' tagged terms instead
(:mod:`memstrata.memory.store.terms`).

Tenant: each row carries a ``tag`` column with two tokens, a hash of the user and the record's scope key
(:func:`~memstrata.memory.store.tenant.scope_key`); every search compares the stored user id (and
conversation), matches the tag too unless the user holds most of the kind's rows (there the tag filters little
and cost a quarter of the ranking), and the store checks each record it then reads by key (``_owned``). BM25's document
frequencies are the whole table's, as HNSW's graph is the whole collection's: another user's text
can change an order, never a result set.

The index holds every unit of the kinds it covers from the store's first write: it is part of the store's format
(:mod:`~memstrata.memory.store.format`). ``memstrata check`` compares it with the units, and
:meth:`VectorStore.index_words` (``memstrata reindex --words``) rebuilds it from the stored text.

Example:
    >>> words = WordIndex(Path(tempfile.mkdtemp()))  # doctest: +SKIP
    >>> words.put("turn", [("alice", "c1", "D1:1", "I went swimming")])  # doctest: +SKIP
    >>> words.search("turn", ["swim"], user_id="alice", limit=5)  # doctest: +SKIP
    [('c1', 'D1:1')]
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

from memstrata.memory.store import tenant
from memstrata.memory.store.sqlite_table import Connections

WORDS_FILE = "memstrata_words.sqlite3"
_TOKEN = re.compile(r"[^\W_]+")  # what FTS5's unicode61 tokenizer keeps as one token
_BATCH = 2000
# A user holding at least this share of a kind's rows is searched without the tag: it filters little there and
# cost a quarter of the ranking's time (measured on a 1M-turn user: turns 0.39 -> 0.29 s per search, facts
# 0.30 -> 0.18 s). The shares are read again after _SHARE_TTL_S.
_MOST = 0.75
_SHARE_TTL_S = 600.0
_NO_TABLE = re.compile(r"no such (fts5 )?table")  # a kind never indexed: its table was never made
T = TypeVar("T")


def _table(kind: str) -> str:
    return "words_" + re.sub(r"[^A-Za-z0-9_]", "_", kind)


def _rowid(user_id: str, conversation_id: str, unit_id: str) -> int:
    """A row's id, from its storage key: the same unit always lands on the same row."""
    return int(tenant.storage_key(user_id, conversation_id, unit_id)[:15], 16)


def _user_tag(user_id: str) -> str:
    # decimal digits after one letter: the Porter stemmer, which every token passes through, leaves them whole
    return "u" + str(int(tenant.stable_hash("words-user", tenant.check_user(user_id), length=24), 16))


def _scope_tag(user_id: str, conversation_id: str) -> str:
    return "c" + str(int(tenant.scope_key(user_id, conversation_id), 16))


def _tag(user_id: str, conversation_id: str) -> str:
    return f"{_user_tag(user_id)} {_scope_tag(user_id, conversation_id)}"


def _searched_tag(user_id: str, conversation_id: str | None) -> str:
    """The tag token a read of one conversation, or (``None``) of the whole user, matches."""
    return _scope_tag(user_id, conversation_id) if conversation_id is not None else _user_tag(user_id)


def query_term(word: str) -> str | None:
    """The FTS5 term for a query word: its longest token, quoted (``"Caroline's"`` -> ``"Caroline"``)."""
    tokens = _TOKEN.findall(word)
    return f'"{max(tokens, key=len)}"' if tokens else None


class WordIndex:
    """SQLite FTS5 tables of the searched kinds' text, safe from several threads and processes.

    Args:
        folder: the embedded store's folder (the index file is created there).
    """

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / WORDS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tables: set[str] = set()
        self._shares: dict[tuple[str, str], tuple[float, bool]] = {}
        self._totals: dict[str, tuple[float, int]] = {}
        self._shares_lock = threading.Lock()
        self.connections = Connections(self.path)  # kept open: a chat write and a first query make several reads
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")

    def close(self) -> None:
        """Close the idle connections; a later use opens new ones."""
        self.connections.close()

    def _connect(self) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.connection()

    @contextmanager
    def _write(self, kind: str) -> Iterator[sqlite3.Connection]:
        with self.connections.transaction() as db:
            self._ensure(db, kind)
            yield db

    def _ensure(self, db: sqlite3.Connection, kind: str) -> None:
        name = _table(kind)
        if name not in self._tables:
            # detail=column: no word positions (phrases are never asked), a smaller index
            db.execute(
                f'CREATE VIRTUAL TABLE IF NOT EXISTS "{name}" USING fts5(text, tag, user UNINDEXED, '
                "conv UNINDEXED, unit UNINDEXED, tokenize='porter unicode61', detail=column)"
            )
            self._tables.add(name)

    # ---- writes ---------------------------------------------------------------
    def put(self, kind: str, rows: Sequence[tuple[str, str, str, str]]) -> int:
        """Index ``(user_id, conversation_id, unit_id, text)`` rows; a unit written again replaces its row."""
        data = [(_rowid(u, c, i), text, _tag(u, c), u, c, i) for u, c, i, text in rows]
        with self._write(kind) as db:
            for start in range(0, len(data), _BATCH):
                db.executemany(
                    f'INSERT OR REPLACE INTO "{_table(kind)}" (rowid, text, tag, user, conv, unit) '
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    data[start : start + _BATCH],
                )
        return len(data)

    def delete(self, kind: str, *, user_id: str, conversation_id: str, unit_ids: Sequence[str]) -> None:
        """Remove the rows of the given units of one conversation."""
        ids = [(_rowid(user_id, conversation_id, u),) for u in unit_ids]
        with self._write(kind) as db:
            db.executemany(f'DELETE FROM "{_table(kind)}" WHERE rowid = ?', ids)

    def delete_user(self, user_id: str, kinds: Sequence[str]) -> None:
        """Every row of the user, then an FTS5 ``optimize``: the index keeps no entry of a deleted row."""
        for kind in kinds:
            name = _table(kind)
            with self._write(kind) as db:
                db.execute(
                    f'DELETE FROM "{name}" WHERE rowid IN (SELECT rowid FROM "{name}" '
                    f'WHERE "{name}" MATCH ? AND user = ?)',
                    (f'tag:"{_user_tag(user_id)}"', user_id),
                )
                db.execute(f'INSERT INTO "{name}" ("{name}") VALUES (\'optimize\')')
        with self._shares_lock:  # the user's shares are read again if they come back
            for kind in kinds:
                self._shares.pop((kind, user_id), None)

    def clear(self, kind: str) -> None:
        """Remove every row of the kind's index."""
        with self._write(kind) as db:
            db.execute(f'DELETE FROM "{_table(kind)}"')

    # ---- reads ----------------------------------------------------------------
    def _read(self, read: Callable[[sqlite3.Connection], T], nothing: T) -> T:
        """``read`` on a kept connection (one thread at a time); ``nothing`` when it met a kind never indexed."""
        with self._connect() as db:
            try:
                return read(db)
            except sqlite3.OperationalError as exc:
                if _NO_TABLE.search(str(exc)):
                    return nothing
                raise

    def units(self, kind: str, *, user_id: str, conversation_id: str | None = None) -> set[tuple[str, str]]:
        """Every ``(conversation_id, unit_id)`` of one user (of one conversation, when named) the kind's index
        holds: the store check's list, and the keys a new search snapshot reads the units by.
        """
        name, tag = _table(kind), _searched_tag(user_id, conversation_id)
        return self._read(
            lambda db: {
                (str(c), str(u))
                for c, u in db.execute(
                    f'SELECT conv, unit FROM "{name}" WHERE "{name}" MATCH ? AND user = ? AND (? IS NULL OR conv = ?)',
                    (f'tag:"{tag}"', user_id, conversation_id, conversation_id),
                )
            },
            set(),
        )

    def _holds_most(self, db: sqlite3.Connection, kind: str, user_id: str) -> bool:
        """Whether the user holds at least :data:`_MOST` of the kind's rows (read again after :data:`_SHARE_TTL_S`):
        their tag's document count in FTS5's vocabulary against the table's rows, 0.4 s at 1M rows.
        """
        key, now = (kind, user_id), time.monotonic()
        with self._shares_lock:
            known = self._shares.get(key)
        if known is not None and now - known[0] < _SHARE_TTL_S:
            return known[1]
        name = _table(kind)  # a kind never indexed raises "no such fts5 table" here, which search reads as no rows
        db.execute(f'CREATE VIRTUAL TABLE IF NOT EXISTS temp."{name}_rows" USING fts5vocab(main, "{name}", row)')
        mine = db.execute(f'SELECT doc FROM temp."{name}_rows" WHERE term = ?', (_user_tag(user_id),)).fetchone()
        most = False
        if mine and mine[0]:  # the table's row count (the costly part) is read once per kind, for every user
            with self._shares_lock:
                counted = self._totals.get(kind)
            if counted is None or now - counted[0] >= _SHARE_TTL_S:
                counted = (now, db.execute(f'SELECT count(*) FROM "{name}_docsize"').fetchone()[0])
                with self._shares_lock:
                    self._totals[kind] = counted
            most = mine[0] >= _MOST * counted[1]
        with self._shares_lock:
            self._shares[key] = (now, most)
        return most

    def holds_more_than(self, kind: str, n: int, *, user_id: str, conversation_id: str | None = None) -> bool:
        """Whether one user (or one of their conversations) has more than ``n`` rows of ``kind``: reads at most
        ``n + 1`` rows of the tag's posting list (25 ms for 20,001 of a 1M-turn user, where Chroma's filtered
        read of as many ids took minutes cold).
        """
        tag, name = _searched_tag(user_id, conversation_id), _table(kind)
        found = self._read(
            lambda db: db.execute(
                f'SELECT count(*) FROM (SELECT 1 FROM "{name}" WHERE "{name}" MATCH ? AND user = ? '
                "AND (? IS NULL OR conv = ?) LIMIT ?)",
                (f'tag:"{tag}"', user_id, conversation_id, conversation_id, n + 1),
            ).fetchone()[0],
            0,
        )
        return int(found) > n

    def search(
        self, kind: str, words: Sequence[str], *, user_id: str, limit: int, conversation_id: str | None = None
    ) -> list[tuple[str, str]]:
        """Up to ``limit`` of one user's units of ``kind`` holding any of the words (stemmed, any case), best
        BM25 first, as ``(conversation_id, unit_id)`` pairs.

        One query scores the words together, as BM25 does: a unit holding several of them, or a rarer one,
        ranks above a unit holding one common word.
        """
        terms = list(dict.fromkeys(t for t in map(query_term, words) if t))
        if not terms:
            return []
        tag, name = _searched_tag(user_id, conversation_id), _table(kind)
        text = f"text:({' OR '.join(terms)})"

        def read(db: sqlite3.Connection) -> list[tuple[str, str]]:
            # The tag phrase adds nothing to a row's BM25 (its column weighs 0), so dropping it where the
            # user holds most rows changes no score and no order; the stored user id still filters.
            match = (
                text if conversation_id is None and self._holds_most(db, kind, user_id) else f'tag:"{tag}" AND {text}'
            )
            found = db.execute(
                f'SELECT conv, unit FROM "{name}" WHERE "{name}" MATCH ? AND user = ? AND (? IS NULL OR conv = ?) '
                f'ORDER BY bm25("{name}", 1.0, 0.0) LIMIT ?',
                (match, user_id, conversation_id, conversation_id, limit),
            )
            return [(str(c), str(u)) for c, u in found]

        return self._read(read, [])
