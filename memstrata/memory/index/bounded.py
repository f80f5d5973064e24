"""The bounded search path: a snapshot of only the part of a large user's memory a question can reach.

Below ``Context.scale.max_turns`` raw turns, every query process holds the
user's whole memory (:class:`~memstrata.memory.index.snapshot.MemoryIndex`).
Above it, that would cost gigabytes per process (issue 12), so each retrieval
reads candidates from Chroma instead and builds the same ``MemoryIndex`` over
them; every search function then runs unchanged. Candidates, per query:

- **dense**: the top ``dense_k`` turns and turn views, and the top ``event_k``
  units of every other searched kind, through Chroma's HNSW index under the
  tenant filter (:meth:`VectorStore.nearest`);
- **lexical**: ``lexical_k`` turns per word for the query's ``lexical_terms``
  longest content words, and per event kind (summaries, facts) ``lexical_k``
  units per word for the ``_EVENT_WORDS`` longest: the words' best BM25 matches
  together in the store's lexical index (:meth:`VectorStore.matching`: the word
  index of an embedded store, :mod:`memstrata.memory.store.words`; the units'
  tagged terms on a Chroma server, :mod:`memstrata.memory.store.terms`);
- **sessions**: the sessions those candidates come from are loaded whole (their
  turns and turn views), up to ``sessions`` of them for the first queries of a
  retrieval and an eighth more for each later one (a follow-up), ranked by
  taking each source's candidates in turn, best first. Whole sessions keep the BM25 windows,
  the neighbour links and the views exactly as the full snapshot has them. Sessions this process
  read before come from its :mod:`~memstrata.memory.index.sessions` cache, checked against the store;
- **the named entities' facts**, so graph expansion has facts to reach, and the
  tree nodes the dense search found (time windows are selected among these);
  the latest memory time comes from the tree's year nodes.

A later query of the same retrieval reads only what is new to it: a query vector not searched yet,
words not read yet (an offline follow-up reuses its question's vector and most of its words).

What differs from the full snapshot, by construction: a unit outside the
candidates cannot be found; BM25's statistics (document frequencies, mean
length) are the candidate set's; a time hint selects windows among the tree
nodes the dense search found, not among all of them. On a store small enough that the candidates
cover everything, both paths score every unit alike (``tests/unit_tests/test_bounded.py``).

Example:
    >>> ws = WorkingSet(store, user_id="alice")  # doctest: +SKIP
    >>> index = ws.ensure(["Where does Ann live?"], vectors)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from memstrata.memory import levels
from memstrata.memory.index.snapshot import MemoryIndex, kind_table
from memstrata.memory.levels import TreeNode
from memstrata.memory.plan.settings import RetrievalSettings

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_STOP = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "against",
        "also",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "could",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "from",
        "further",
        "have",
        "having",
        "here",
        "into",
        "just",
        "more",
        "most",
        "much",
        "must",
        "only",
        "other",
        "over",
        "same",
        "should",
        "some",
        "such",
        "than",
        "that",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "under",
        "until",
        "very",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "will",
        "with",
        "would",
        "your",
        "yours",
        "yourself",
        "what's",
        "tell",
        "know",
        "like",
    ]
)
_EVENT_WORDS = 4  # words read in the event kinds' text
_READERS = 4  # threads reading candidates from Chroma at once
# a tier's sessions per read: a read's reply (JSON, vectors as lists) is held whole while it is parsed; a tier of
# 199 sessions on a 100k-turn server store peaked about 0.4 GB lower read 25 at a time than 200 at a time
_HELD_SESSIONS_PER_READ = 25
_RUNS = 8  # working sets kept per store (one per retrieval run in flight)


@dataclass(frozen=True)
class Bounds:
    """How much of a large memory one retrieval reads.

    No defaults here: :func:`memstrata.runtime.search.bounds` builds them from the ``bounded_*`` settings of
    :class:`~memstrata.context.Context` (``latest_seconds``: how long the memory's latest time, read from the tree's
    year nodes, is trusted; this process's writes drop it at once, another process's are seen after this long. It is
    ``scale.large_recheck_s``, as long as a large scope's size is trusted: re-read every 5 s, as it was, it cost
    0.3 s of a 1M-turn user's questions).
    """

    dense_k: int
    event_k: int
    lexical_k: int
    lexical_terms: int
    sessions: int
    entity_facts: int
    cached_units: int
    latest_seconds: float


def content_words(text: str, limit: int) -> list[str]:
    """The text's ``limit`` longest content words (no stop words), longest first: a stand-in for the rarest."""
    words = dict.fromkeys(w for w in _WORD.findall(text) if w.casefold() not in _STOP)
    return sorted(words, key=lambda w: (-len(w), w))[:limit]


class WorkingSet:
    """One retrieval's candidates from a large store, grown per new query, and the snapshot over them.

    Args:
        store: a :class:`~memstrata.memory.store.MemoryStore`.
        user_id / conversation_id: the tenant scope (every read goes through the store's scope).
        bounds: how many candidates each source gives.
        window_widths: the BM25 window widths of the snapshot.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        user_id: str,
        conversation_id: str | None = None,
        bounds: Bounds,
        window_widths: Sequence[int] = RetrievalSettings.window_widths,
    ) -> None:
        self.store, self.user_id, self.conversation_id = store, user_id, conversation_id
        self.bounds = bounds
        self.window_widths = tuple(window_widths)
        self.records: dict[str, dict[tuple[str, str], Any]] = {lv.kind: {} for lv in levels.levels(searched=True)}
        self.sessions: list[str] = []
        self.named_conversations: set[str] = set()  # where the queries' named entities live: their edges are read
        self.units: dict[tuple[str, str, str], Any] = {}  # parsed units by (kind, conversation, id)
        self.seen: set[str] = set()  # query texts gathered for
        self.read_vectors: set[bytes] = set()  # query vectors whose nearest units were read
        self.read_words: dict[str, set[str]] = {}  # per kind, the words whose containing units were read
        self.index: MemoryIndex | None = None
        self.version = store.versions.get(user_id)
        self.lock = threading.Lock()
        self.reads = 0

    def ensure(self, texts: Sequence[str], vectors: np.ndarray | None) -> MemoryIndex:
        """The snapshot over the candidates of every query seen so far; reads only for new queries."""
        with self.lock:
            new = [
                (t, v)
                for t, v in zip(texts, vectors if vectors is not None else [], strict=False)
                if t not in self.seen
            ]
            held = self._held()
            if new:
                self._gather([t for t, _ in new], np.stack([v for _, v in new]))
                self.seen.update(t for t, _ in new)
            if self.index is None or self._held() != held:
                self.index = self._build()
            return self.index

    def hold_sessions(self, keys: Sequence[str]) -> MemoryIndex:
        """The snapshot over these whole sessions (HMO's active tiers), read once each: every unit of a kind that
        belongs to a session, and every unit of the kinds that span a conversation (entities, the temporal tree,
        themes, personas) of their conversations, whose entity edges graph expansion then reads.

        No dense or lexical search reads anything here: the candidates are the sessions, whatever the queries.
        """
        with self.lock:
            wanted = [k for k in dict.fromkeys(keys) if k not in self.sessions]
            convs = sorted({k.rpartition("/")[0] for k in wanted} - self.named_conversations)
            searched = levels.levels(searched=True)
            by_session = [lv for lv in searched if "session_id" in lv.unit.model_fields]
            reads = [
                functools.partial(
                    self.store.get,
                    lv.kind,
                    user_id=self.user_id,
                    with_vectors=True,
                    conversation_id=self.conversation_id,
                    selective=True,
                    where={"session_key": {"$in": wanted[start : start + _HELD_SESSIONS_PER_READ]}},
                )
                for lv in by_session
                for start in range(0, len(wanted), _HELD_SESSIONS_PER_READ)
            ]
            reads += [
                functools.partial(
                    self.store.get, lv.kind, user_id=self.user_id, conversation_id=conv, with_vectors=True
                )
                for lv in searched
                if lv not in by_session
                for conv in convs
                if self.conversation_id in (None, conv)
            ]
            with ThreadPoolExecutor(max_workers=_READERS) as pool:
                for found in pool.map(lambda read: read(), reads):
                    self._keep(found)
            self.reads += len(reads)
            self.sessions += wanted
            self.named_conversations.update(convs)
            if self.index is None or wanted:
                self.index = self._build()
            return self.index

    def _unit(self, record: Any) -> Any:
        """The record's unit, parsed once per run (a run builds its snapshot again after each new query)."""
        key = (record.kind, record.metadata["conversation_id"], record.unit_id)
        if key not in self.units:
            self.units[key] = levels.get_level(record.kind).unit.model_validate(record.payload)
        return self.units[key]

    def _held(self) -> int:
        return sum(len(found) for found in self.records.values()) + len(self.named_conversations)

    # ---- reading candidates -------------------------------------------------
    def _keep(self, records: Iterable[Any]) -> list[Any]:
        out = []
        for r in records:
            key = (r.metadata["conversation_id"], r.unit_id)
            self.records.setdefault(r.kind, {}).setdefault(key, r)
            out.append(r)
        return out

    def _gather(self, texts: list[str], vecs: np.ndarray) -> None:
        b, store = self.bounds, self.store
        scope: dict[str, Any] = {"user_id": self.user_id, "conversation_id": self.conversation_id}
        raw = levels.raw_kind()
        # Every read is independent: (whether its units are kept as candidates, the read). Chroma runs them
        # on a few threads; results are used in this fixed order, so the candidates do not depend on timing.
        # A read this run already made is not repeated: an offline follow-up or rewrite searches the dense
        # index with its question's vector and repeats most of its words, so it reads only what is new.
        reads: list[tuple[bool, Callable[[], list[list[Any]]]]] = []
        fresh = [i for i, v in enumerate(vecs) if v.tobytes() not in self.read_vectors]
        self.read_vectors.update(vecs[i].tobytes() for i in fresh)
        for level in levels.levels(searched=True) if fresh else ():
            k = b.dense_k if level.role in ("raw", "view") else b.event_k
            # turns and views come with their sessions below; other kinds are candidates themselves
            reads.append(
                (
                    level.role not in ("raw", "view"),
                    functools.partial(store.nearest, level.kind, vectors=vecs[fresh], k=k, **scope),
                )
            )
        words = list(dict.fromkeys(w for text in texts for w in content_words(text, b.lexical_terms)))
        # Events (tree nodes consolidate these) are read for the longest words only.
        for kind, keep, limit in [
            (raw, False, None),
            *(
                (lv.kind, True, _EVENT_WORDS)
                for lv in levels.levels(role="event", searched=True)
                if lv.kind != "tree_node"
            ),
        ]:
            unread = self._unread(kind, words, limit)
            if unread:  # the lexical index: the words' best BM25 matches, in one call
                reads.append(
                    (
                        keep,
                        functools.partial(
                            _one, store.matching, kind, words=unread, limit=b.lexical_k * len(unread), **scope
                        ),
                    )
                )
        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            results = list(pool.map(lambda read: read[1](), reads))
        self.reads += len(reads)
        ranked: list[list[Any]] = []  # per source, best first: what decides which sessions are loaded
        for (keep, _), lists in zip(reads, results, strict=True):
            ranked += [self._keep(found) if keep else found for found in lists]
        self._entity_facts(texts)
        self._load_sessions(ranked)

    def _unread(self, kind: str, words: list[str], limit: int | None = None) -> list[str]:
        """Up to ``limit`` words whose units of ``kind`` this run has not read yet (case-insensitive), marked read."""
        done, new = self.read_words.setdefault(kind, set()), list[str]()
        for word in words:
            if (limit is None or len(new) < limit) and word.casefold() not in done:
                done.add(word.casefold())
                new.append(word)
        return new

    def _entity_facts(self, texts: list[str]) -> None:
        """The facts of the candidate entities the queries name, so graph expansion reaches them."""
        entity, fact = "entity", "fact"
        if entity not in self.records or fact not in self.records:
            return
        words = {w.casefold() for t in texts for w in _WORD.findall(t)}
        named = [
            r
            for r in self.records[entity].values()
            if {w.casefold() for w in _WORD.findall(r.payload.get("name", ""))} & words
        ]
        self.named_conversations.update(r.metadata["conversation_id"] for r in named)
        pairs = [(r.metadata["conversation_id"], fid) for r in named for fid in r.payload.get("fact_ids", [])]
        if pairs:
            self._keep(
                self.store.get_keys(
                    fact, user_id=self.user_id, keys=pairs[: self.bounds.entity_facts], with_vectors=True
                )
            )
            self.reads += 1

    def _latest(self) -> datetime | None:
        """The latest time of the user's memory, from the year nodes of the tree (few; cached per version)."""
        caches, key = self.store.caches, (self.user_id, self.conversation_id, self.version)
        with caches.runs_lock:
            seen = caches.latest.get(key)
            if seen is not None and time.monotonic() - seen[0] < self.bounds.latest_seconds:
                return seen[1]
        found = (
            self.store.get(
                "tree_node",
                user_id=self.user_id,
                conversation_id=self.conversation_id,
                where={"level": "year"},
                selective=True,
            )
            if "tree_node" in self.records
            else []
        )
        self.reads += 1
        ends = [e for r in found if (e := TreeNode.model_validate(r.payload).span()[1])]
        latest = max(ends) if ends else None
        with caches.runs_lock:
            caches.latest[key] = (time.monotonic(), latest)
        return latest

    def _load_sessions(self, ranked: list[list[Any]]) -> None:
        """Whole sessions (turns and views) of the best candidates, up to ``Bounds.sessions`` in all."""
        order: list[str] = []
        depth = max((len(r) for r in ranked), default=0)
        for i in range(depth):  # one candidate of each source in turn, best first
            for found in ranked:
                if i < len(found):
                    meta = found[i].metadata
                    key = meta.get("session_key")
                    if key and key not in order:
                        order.append(key)
        # the first queries fill the session budget; each later query (a follow-up, a rewrite) adds an eighth
        limit = self.bounds.sessions if not self.sessions else len(self.sessions) + max(1, self.bounds.sessions // 8)
        fresh = [k for k in order if k not in self.sessions]
        wanted = fresh[: limit - len(self.sessions)]
        if not wanted:
            return
        kinds = [lv.kind for lv in levels.levels(searched=True) if lv.role in ("raw", "view")]
        cache = self.store.caches.sessions
        cached, to_read = cache.take(
            self.store, user_id=self.user_id, conversation_id=self.conversation_id, keys=wanted, kinds=kinds
        )
        for by_kind in cached.values():
            for records in by_kind.values():
                self._keep(records)
        self.reads += len(kinds) if cached else 0
        reads = [
            functools.partial(
                self.store.get,
                kind,
                user_id=self.user_id,
                with_vectors=True,
                conversation_id=self.conversation_id,
                selective=True,
                where={"session_key": {"$in": to_read[start : start + 200]}},
            )
            for kind in kinds
            for start in range(0, len(to_read), 200)
        ]
        raw = levels.raw_kind()
        got: dict[str, dict[str, list[Any]]] = {}
        with ThreadPoolExecutor(max_workers=_READERS) as pool:
            for found in pool.map(lambda read: read(), reads):
                for r in self._keep(found):
                    got.setdefault(r.metadata.get("session_key", ""), {}).setdefault(r.kind, []).append(r)
        self.reads += len(reads)
        loaded = {key for key, by_kind in got.items() if raw in by_kind} | set(cached)
        cache.put(
            user_id=self.user_id,
            limit=self.bounds.cached_units,
            sessions={key: got[key] for key in loaded if key in got},
        )
        self.sessions += wanted

    # ---- the snapshot ---------------------------------------------------------
    def _build(self) -> MemoryIndex:
        tables = {
            lv.kind: kind_table(lv, list(self.records.get(lv.kind, {}).values()), parse=self._unit)
            for lv in levels.levels(searched=True)
        }
        index = MemoryIndex(
            tables,
            window_widths=self.window_widths,
            version=self.version,
            counts=tuple(len(t) for t in tables.values()),
        )
        latest = self._latest()
        if latest and (index.latest is None or latest > index.latest):
            index.latest = latest
        index.bounded = sorted(self.named_conversations)
        return index


def _one(read: Callable[..., list[Any]], *args: Any, **kwargs: Any) -> list[list[Any]]:
    """A read that returns one list, as a list of lists like :meth:`VectorStore.nearest`."""
    return [read(*args, **kwargs)]


def working_set(
    store: MemoryStore,
    *,
    user_id: str,
    conversation_id: str | None,
    run: str,
    bounds: Bounds,
    window_widths: Sequence[int] = RetrievalSettings.window_widths,
) -> WorkingSet:
    """The working set of one retrieval run (kept on the store, ``store.caches.runs``, until the run's answer
    releases it, :func:`release_run`; at most the last ``_RUNS`` runs of the store).

    A write by this process since the set was made starts a new one, so a query after a write sees it.
    """
    caches, key = store.caches, (user_id, conversation_id, run)
    with caches.runs_lock:
        found = caches.runs.get(key)
        if found is None or found.version != store.versions.get(user_id) or found.bounds != bounds:
            found = WorkingSet(
                store, user_id=user_id, conversation_id=conversation_id, bounds=bounds, window_widths=window_widths
            )
            caches.runs[key] = found
        caches.runs.move_to_end(key)
        while len(caches.runs) > _RUNS:
            caches.runs.popitem(last=False)
        return found


def release_run(store: MemoryStore, *, user_id: str, conversation_id: str | None, run: str) -> bool:
    """Drop a finished retrieval's working set (its candidates and snapshot); whether one was held.

    The run's last node calls it, so a process holds the working sets of the runs in flight only; the
    ``_RUNS`` bound stays for runs that stopped before their end.
    """
    caches = store.caches
    with caches.runs_lock:
        return caches.runs.pop((user_id, conversation_id, run), None) is not None
