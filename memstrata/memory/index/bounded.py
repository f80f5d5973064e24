"""The bounded search path: a snapshot of only the part of a large user's memory a question can reach.

Below ``Context.snapshot_max_turns`` raw turns, every query process holds the
user's whole memory (:class:`~memstrata.memory.index.snapshot.MemoryIndex`).
Above it, that would cost gigabytes per process (issue 12), so each retrieval
reads candidates from Chroma instead and builds the same ``MemoryIndex`` over
them; every search function then runs unchanged. Candidates, per query:

- **dense**: the top ``dense_k`` turns and turn views, and the top ``event_k``
  units of every other searched kind, through Chroma's HNSW index under the
  tenant filter (:meth:`VectorStore.nearest`);
- **lexical**: for each of the query's ``lexical_terms`` longest content words,
  up to ``lexical_k`` turns whose text contains it as written, lower-cased or
  capitalised (Chroma's full-text index, :meth:`VectorStore.containing`), and
  per event kind (summaries, facts) up to ``lexical_k`` per word of units that
  contain any of them;
- **sessions**: the sessions those candidates come from are loaded whole (their
  turns and turn views), up to ``sessions`` of them for the first queries of a
  retrieval and an eighth more for each later one (a follow-up), ranked by
  taking each source's candidates in turn, best first. Whole sessions keep the BM25 windows,
  the neighbour links and the views exactly as the full snapshot has them;
- **the named entities' facts**, so graph expansion has facts to reach, and the
  week, month and year tree nodes the dense search found, plus every month and
  year node (few: one per calendar month), so time windows and the latest
  memory time are known.

What differs from the full snapshot, by construction: a unit outside the
candidates cannot be found; BM25's statistics (document frequencies, mean
length) are the candidate set's; the reference time is the latest of the
loaded turns and tree nodes. On a store small enough that the candidates
cover everything, both paths score every unit alike (``tests/test_bounded.py``).

Example:
    >>> ws = WorkingSet(store, user_id="alice")                     # doctest: +SKIP
    >>> index = ws.ensure(["Where does Ann live?"], vectors)        # doctest: +SKIP
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memstrata.memory import levels
from memstrata.memory.index.snapshot import DEFAULT_WINDOWS, MemoryIndex, kind_table

_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
_STOP = frozenset("""about above after again against also been before being below between both could does doing
down during each from further have having here into just more most much must only other over same should some
such than that their them then there these they this those through under until very what when where which while
who whom whose will with would your yours yourself what's tell know like""".split())
_RUNS = 8  # working sets kept per process (one per retrieval run in flight)
_RUN_CACHE: OrderedDict[tuple[int, str, str | None, str], WorkingSet] = OrderedDict()
_RUN_LOCK = threading.Lock()


@dataclass(frozen=True)
class Bounds:
    """How much of a large memory one retrieval reads (settings from ``Context``)."""

    dense_k: int = 200
    event_k: int = 60
    lexical_k: int = 40
    lexical_terms: int = 6
    sessions: int = 80
    entity_facts: int = 200


def content_words(text: str, limit: int) -> list[str]:
    """The text's ``limit`` longest content words (no stop words), longest first: a stand-in for the rarest."""
    words = dict.fromkeys(w for w in _WORD.findall(text) if w.casefold() not in _STOP)
    return sorted(words, key=lambda w: (-len(w), w))[:limit]


def _variants(word: str) -> list[str]:
    return list(dict.fromkeys([word, word.casefold(), word[:1].upper() + word[1:].casefold()]))


class WorkingSet:
    """One retrieval's candidates from a large store, grown per new query, and the snapshot over them.

    Args:
        store: a :class:`~memstrata.memory.store.MemoryStore`.
        user_id / conversation_id: the tenant scope (every read goes through the store's scope).
        bounds: how many candidates each source gives.
        window_widths: the BM25 window widths of the snapshot.
    """

    def __init__(self, store: Any, *, user_id: str, conversation_id: str | None = None,
                 bounds: Bounds | None = None, window_widths: Sequence[int] = DEFAULT_WINDOWS) -> None:
        self.store, self.user_id, self.conversation_id = store, user_id, conversation_id
        self.bounds = bounds or Bounds()
        self.window_widths = tuple(window_widths)
        self.records: dict[str, dict[tuple[str, str], Any]] = {lv.kind: {} for lv in levels.levels(searched=True)}
        self.sessions: list[str] = []
        self.named_conversations: set[str] = set()  # where the queries' named entities live: their edges are read
        self.seen: set[str] = set()
        self.index: MemoryIndex | None = None
        self.version = store.versions.get(user_id)
        self.lock = threading.Lock()
        self.reads = 0

    def ensure(self, texts: Sequence[str], vectors: np.ndarray | None) -> MemoryIndex:
        """The snapshot over the candidates of every query seen so far; reads only for new queries."""
        with self.lock:
            new = [(t, v) for t, v in zip(texts, vectors if vectors is not None else [], strict=False)
                   if t not in self.seen]
            if self.index is None:
                self._upper_tree()
            if new:
                self._gather([t for t, _ in new], np.stack([v for _, v in new]))
                self.seen.update(t for t, _ in new)
            if new or self.index is None:
                self.index = self._build()
            return self.index

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
        raw = levels.raw_kind()
        ranked: list[list[Any]] = []  # per source, best first: what decides which sessions are loaded
        for level in levels.levels(searched=True):
            k = b.dense_k if level.role in ("raw", "view") else b.event_k
            per_query = store.nearest(level.kind, user_id=self.user_id, vectors=vecs, k=k,
                                      conversation_id=self.conversation_id)
            self.reads += 1
            for found in per_query:
                if level.role in ("raw", "view"):
                    ranked.append(found)  # their turns come with their sessions below
                else:
                    ranked.append(self._keep(found))
        words = list(dict.fromkeys(w for text in texts for w in content_words(text, b.lexical_terms)))
        for word in words:  # one read per word: a common word cannot crowd out a rare one
            ranked.append(store.containing(raw, user_id=self.user_id, phrases=_variants(word), limit=b.lexical_k,
                                           conversation_id=self.conversation_id))
            self.reads += 1
        # events: one read per kind for all the words (tree nodes consolidate these; their upper levels are whole)
        for level in levels.levels(role="event", searched=True):
            if words and level.kind != "tree_node":
                found = store.containing(level.kind, user_id=self.user_id, limit=b.lexical_k * len(words),
                                         phrases=[v for w in words for v in _variants(w)],
                                         conversation_id=self.conversation_id)
                self.reads += 1
                ranked.append(self._keep(found))
        self._entity_facts(texts)
        self._load_sessions(ranked)

    def _entity_facts(self, texts: list[str]) -> None:
        """The facts of the candidate entities the queries name, so graph expansion reaches them."""
        entity, fact = "entity", "fact"
        if entity not in self.records or fact not in self.records:
            return
        words = {w.casefold() for t in texts for w in _WORD.findall(t)}
        named = [r for r in self.records[entity].values()
                 if {w.casefold() for w in _WORD.findall(r.payload.get("name", ""))} & words]
        self.named_conversations.update(r.metadata["conversation_id"] for r in named)
        pairs = [(r.metadata["conversation_id"], fid) for r in named for fid in r.payload.get("fact_ids", [])]
        if pairs:
            self._keep(self.store.get_keys(fact, user_id=self.user_id, keys=pairs[:self.bounds.entity_facts],
                                           with_vectors=True))
            self.reads += 1

    def _upper_tree(self) -> None:
        """Every month and year node of the user: few, and they carry the time windows and the latest time."""
        kind = "tree_node"
        if kind not in self.records:
            return
        found = self.store.get(kind, user_id=self.user_id, conversation_id=self.conversation_id,
                               where={"level": {"$in": ["month", "year"]}}, with_vectors=True)
        self.reads += 1
        self._keep(found)

    def _load_sessions(self, ranked: list[list[Any]]) -> None:
        """Whole sessions (turns and views) of the best candidates, up to ``Bounds.sessions`` in all."""
        order: list[str] = []
        depth = max((len(r) for r in ranked), default=0)
        for i in range(depth):  # one candidate of each source in turn, best first
            for found in ranked:
                if i < len(found):
                    meta = found[i].metadata
                    key = meta.get("session_key") or _session_key(meta.get("conversation_id"), meta.get("session_id"))
                    if key and key not in order:
                        order.append(key)
        # the first queries fill the session budget; each later query (a follow-up, a rewrite) adds an eighth
        limit = self.bounds.sessions if not self.sessions else len(self.sessions) + max(1, self.bounds.sessions // 8)
        fresh = [k for k in order if k not in self.sessions]
        wanted = fresh[:limit - len(self.sessions)]
        if not wanted:
            return
        for level in levels.levels(searched=True):
            if level.role not in ("raw", "view"):
                continue
            for start in range(0, len(wanted), 200):
                found = self.store.get(level.kind, user_id=self.user_id, conversation_id=self.conversation_id,
                                       where={"session_key": {"$in": wanted[start:start + 200]}}, with_vectors=True)
                self.reads += 1
                self._keep(found)
        self.sessions += wanted

    # ---- the snapshot ---------------------------------------------------------
    def _build(self) -> MemoryIndex:
        tables = {lv.kind: kind_table(lv, list(self.records.get(lv.kind, {}).values()))
                  for lv in levels.levels(searched=True)}
        index = MemoryIndex(tables, window_widths=self.window_widths, version=self.version,
                            counts=tuple(len(t) for t in tables.values()))
        ends = [e for u in tables["tree_node"].units if (e := u.span()[1])] if "tree_node" in tables else []
        if ends and (index.latest is None or max(ends) > index.latest):
            index.latest = max(ends)
        index.bounded = sorted(self.named_conversations)
        return index


def _session_key(conversation_id: str | None, session_id: str | None) -> str | None:
    return f"{conversation_id}/{session_id}" if conversation_id and session_id else None


def working_set(store: Any, *, user_id: str, conversation_id: str | None, run: str, bounds: Bounds,
                window_widths: Sequence[int] = DEFAULT_WINDOWS) -> WorkingSet:
    """The working set of one retrieval run (kept for the last few runs of this process).

    A write by this process since the set was made starts a new one, so a query after a write sees it.
    """
    key = (id(store), user_id, conversation_id, run)
    with _RUN_LOCK:
        found = _RUN_CACHE.get(key)
        if found is None or found.version != store.versions.get(user_id) or found.bounds != bounds:
            found = WorkingSet(store, user_id=user_id, conversation_id=conversation_id, bounds=bounds,
                               window_widths=window_widths)
            _RUN_CACHE[key] = found
        _RUN_CACHE.move_to_end(key)
        while len(_RUN_CACHE) > _RUNS:
            _RUN_CACHE.popitem(last=False)
        return found
