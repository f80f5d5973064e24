"""The vector store's lexical index, behind one interface: which units hold a query's words, best BM25 match first.

One back-end per mode:

- :class:`WordLexicon`, an embedded store: the word index (SQLite FTS5 in the data folder,
  :mod:`~memstrata.memory.store.words`), written beside each Chroma write;
- :class:`TermLexicon`, a server store: each unit carries its tagged word terms in its Chroma metadata
  (:mod:`~memstrata.memory.store.terms`), so every process and machine sees the same index.

Both hold the raw turns and every searched event kind (:func:`indexes_words`), answer with storage keys (the
vector store then reads those records by key and keeps them to the tenant), and can be rebuilt from the stored text
(``memstrata reindex --words``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from typing_extensions import override

from memstrata.memory import levels
from memstrata.memory.store import tenant
from memstrata.memory.store.terms import MAX_POSTINGS, TERMS, query_terms, rank, tagged_terms
from memstrata.memory.store.unit_collections import UnitCollections
from memstrata.memory.store.words import WordIndex

MAX_BATCH = 2000  # records per Chroma write or read by key


def indexes_words(kind: str) -> bool:
    """Whether the lexical index holds a kind: the raw turns and every searched event kind."""
    try:
        level = levels.get_level(kind)
    except KeyError:  # an unregistered kind left behind by a plugin
        return False
    return level.searched and level.role in ("raw", "event")


class Lexicon(Protocol):
    """What the vector store asks of its lexical index. ``metas`` are the Chroma metadatas of a write (each with
    ``user_id``, ``conversation_id`` and ``unit_id``), ``documents`` their stored texts.
    """

    words: WordIndex | None  # the embedded word index, or None

    def stamp(self, kind: str, metas: Sequence[dict[str, Any]], documents: Sequence[str]) -> None:
        """Before the Chroma write: add to ``metas`` what the index keeps in them."""

    def put(self, kind: str, metas: Sequence[dict[str, Any]], documents: Sequence[str]) -> None:
        """After the Chroma write (under the store's write lock): index what was written."""

    def delete(self, kind: str, *, user_id: str, conversation_id: str, unit_ids: Sequence[str]) -> None:
        """Forget some units of one user."""

    def delete_user(self, user_id: str, kinds: Sequence[str]) -> None:
        """Forget every unit of a user."""

    def ranked(
        self, kind: str, *, user_id: str, words: Sequence[str], limit: int, conversation_id: str | None
    ) -> list[str]:
        """The storage keys of up to ``limit`` of the user's units holding the words, best match first."""

    def holds_more_than(self, kind: str, n: int, *, user_id: str, conversation_id: str | None) -> bool | None:
        """Whether the user has more than ``n`` units of the kind, or ``None`` when the index cannot say."""

    def keys(self, kind: str, *, user_id: str, conversation_id: str | None) -> list[str] | None:
        """The storage keys of every unit of the kind the user holds (in one conversation, when named), or ``None``
        when the index cannot list them.
        """

    def rebuild(self, *, progress: Any = None) -> dict[str, int]:
        """Index every stored unit of every kind it holds again; how many per kind."""

    def problems(self, kind: str, *, user_id: str, conversation_id: str | None) -> list[tuple[str, str]]:
        """The ``(conversation, unit)`` keys whose index entry is not that of their stored text (``memstrata
        check``), where the index lives in the units; ``[]`` otherwise.
        """


class WordLexicon(Lexicon):
    """An embedded store's lexical index: the word index in the data folder."""

    def __init__(self, words: WordIndex, units: UnitCollections) -> None:
        self.words: WordIndex | None = words
        self._index = words
        self._units = units

    @override
    def stamp(self, kind: str, metas: Sequence[dict[str, Any]], documents: Sequence[str]) -> None:
        return  # the words live beside the units, not in them

    @override
    def put(self, kind: str, metas: Sequence[dict[str, Any]], documents: Sequence[str]) -> None:
        if indexes_words(kind):
            self._index.put(
                kind,
                [
                    (m["user_id"], m["conversation_id"], m["unit_id"], doc)
                    for m, doc in zip(metas, documents, strict=True)
                ],
            )

    @override
    def delete(self, kind: str, *, user_id: str, conversation_id: str, unit_ids: Sequence[str]) -> None:
        if indexes_words(kind):
            self._index.delete(kind, user_id=user_id, conversation_id=conversation_id, unit_ids=unit_ids)

    @override
    def delete_user(self, user_id: str, kinds: Sequence[str]) -> None:
        self._index.delete_user(user_id, [k for k in kinds if indexes_words(k)])

    @override
    def ranked(
        self, kind: str, *, user_id: str, words: Sequence[str], limit: int, conversation_id: str | None
    ) -> list[str]:
        pairs = self._index.search(kind, words, user_id=user_id, limit=limit, conversation_id=conversation_id)
        return list(dict.fromkeys(tenant.storage_key(user_id, conv, unit) for conv, unit in pairs))

    @override
    def holds_more_than(self, kind: str, n: int, *, user_id: str, conversation_id: str | None) -> bool | None:
        # its rows are the stored units, and its tag posting list is read in milliseconds where Chroma's filtered
        # read of the same ids took minutes on a cold 1M-turn store
        if not indexes_words(kind):
            return None
        return self._index.holds_more_than(kind, n, user_id=user_id, conversation_id=conversation_id)

    @override
    def keys(self, kind: str, *, user_id: str, conversation_id: str | None) -> list[str] | None:
        # the tag's posting list in SQLite: milliseconds, where Chroma's filtered read grows with the collection
        # (41 ms for a user's 133 facts among 1,000 users' 133k, ids only)
        if not indexes_words(kind):
            return None
        pairs = self._index.units(kind, user_id=user_id, conversation_id=conversation_id)
        return sorted(tenant.storage_key(user_id, conv, unit) for conv, unit in pairs)

    @override
    def rebuild(self, *, progress: Any = None) -> dict[str, int]:
        counts = {}
        for kind in (k for k in self._units.stored_kinds() if indexes_words(k)):
            self._index.clear(kind)
            data = self._units.paged(kind, include=["documents", "metadatas"])
            rows = [
                (m["user_id"], m["conversation_id"], m["unit_id"], d or "")
                for d, m in zip(data["documents"], data["metadatas"], strict=True)
            ]
            for start in range(0, len(rows), MAX_BATCH):
                self._index.put(kind, rows[start : start + MAX_BATCH])
                if progress:
                    progress(kind, min(start + MAX_BATCH, len(rows)), len(rows))
            counts[kind] = len(rows)
        return counts

    @override
    def problems(self, kind: str, *, user_id: str, conversation_id: str | None) -> list[tuple[str, str]]:
        return []  # the word index is checked against the units by memstrata.memory.store.invariants


class TermLexicon(Lexicon):
    """A server store's lexical index: each unit's tagged word terms, in its own Chroma metadata."""

    words: WordIndex | None = None

    def __init__(self, units: UnitCollections, write_lock: threading.Lock) -> None:
        self._units = units
        self._write_lock = write_lock

    @override
    def stamp(self, kind: str, metas: Sequence[dict[str, Any]], documents: Sequence[str]) -> None:
        if indexes_words(kind):
            for meta, terms in zip(metas, tagged_terms([m["user_id"] for m in metas], documents), strict=True):
                if terms:  # Chroma refuses an empty list
                    meta[TERMS] = terms

    @override
    def put(self, kind: str, metas: Sequence[dict[str, Any]], documents: Sequence[str]) -> None:
        return  # the terms went in with the units (stamp)

    @override
    def delete(self, kind: str, *, user_id: str, conversation_id: str, unit_ids: Sequence[str]) -> None:
        return  # they go with the units

    @override
    def delete_user(self, user_id: str, kinds: Sequence[str]) -> None:
        return

    @override
    def ranked(
        self, kind: str, *, user_id: str, words: Sequence[str], limit: int, conversation_id: str | None
    ) -> list[str]:
        """Each term's postings (ids only) read under the tenant filter, ranked by
        :func:`memstrata.memory.store.terms.rank`.
        """
        # the user is named by the tag in each term, a conversation by its scope clause (terms.py says why)
        scope = tenant.where(user_id, conversation_id) if conversation_id is not None else None
        terms = query_terms(words)

        def ids(term: str) -> list[str]:
            holds = {TERMS: {"$contains": tenant.term_key(user_id, term)}}
            where = {"$and": [scope, holds]} if scope else holds
            found: list[str] = self._units.read(kind, "get", where=where, include=[], limit=MAX_POSTINGS)["ids"]
            return found

        with ThreadPoolExecutor(max_workers=min(4, max(1, len(terms)))) as pool:  # one HTTP read per term
            postings = dict(zip(terms, pool.map(ids, terms), strict=True))
        return rank(postings, total=self._units.collection(kind).count(), limit=limit)

    @override
    def holds_more_than(self, kind: str, n: int, *, user_id: str, conversation_id: str | None) -> bool | None:
        return None

    @override
    def keys(self, kind: str, *, user_id: str, conversation_id: str | None) -> list[str] | None:
        return None  # the terms hold no list of a user's units

    @override
    def rebuild(self, *, progress: Any = None) -> dict[str, int]:
        counts = {}
        for kind in (k for k in self._units.stored_kinds() if indexes_words(k)):
            col = self._units.collection(kind)
            data = self._units.paged(kind, include=["documents", "metadatas"])
            metas = [dict(m) for m in data["metadatas"]]
            users = [m["user_id"] for m in metas]
            for meta, terms in zip(metas, tagged_terms(users, [d or "" for d in data["documents"]]), strict=True):
                meta.pop(TERMS, None)
                if terms:
                    meta[TERMS] = terms
            with self._write_lock:
                for start in range(0, len(metas), MAX_BATCH):
                    col.update(ids=data["ids"][start : start + MAX_BATCH], metadatas=metas[start : start + MAX_BATCH])
                    if progress:
                        progress(kind, min(start + MAX_BATCH, len(metas)), len(metas))
            counts[kind] = len(metas)
        return counts

    @override
    def problems(self, kind: str, *, user_id: str, conversation_id: str | None) -> list[tuple[str, str]]:
        if not indexes_words(kind):
            return []
        data = self._units.paged(kind, where=tenant.where(user_id, conversation_id), include=["documents", "metadatas"])
        expected = tagged_terms([m["user_id"] for m in data["metadatas"]], [d or "" for d in data["documents"]])
        return [
            (m["conversation_id"], m["unit_id"])
            for m, want in zip(data["metadatas"], expected, strict=True)
            if list(m.get(TERMS) or []) != want
        ]
