"""The store: units with vectors, graph and tree edges, and per-unit counters, under one tenant scope.

- :mod:`~memstrata.memory.store.vectors`: the units and their vectors (Chroma), itself made of the client and one
  collection per kind (:mod:`~memstrata.memory.store.unit_collections`, :mod:`~memstrata.memory.store.chroma_client`),
  the lexical index (:mod:`~memstrata.memory.store.lexical`) and the write log search snapshots replay
  (:mod:`~memstrata.memory.store.write_log`), with what a read returns (:mod:`~memstrata.memory.store.records`);
- :mod:`~memstrata.memory.store.held_facts`: a conversation's closed facts, its theme graph's edges and its speakers,
  held by this process between writes and checked against the store;
- :mod:`~memstrata.memory.store.edges`: edges between units (a SQLite file in the data folder in
  embedded mode; a Chroma collection in server mode, so every process and machine sees them);
- :mod:`~memstrata.memory.store.counters`: reinforcement, recall, last access and tier per unit,
  in the same place as the edges. Writing them never invalidates a search snapshot;
- :mod:`~memstrata.memory.store.sequences`: each session's next free position and latest time, so a
  message written without a position is appended, never put in the place of a stored one;
- ``items``: the values a LangGraph store user put (:mod:`memstrata.integrations.store`), in the same place;
- ``journal``: what a user updated or deleted (:mod:`memstrata.memories`), in the same place;
- ``tombstones``: the ids and content hashes (never the text) of deleted and replaced turns, so no later write brings
  them back (:mod:`~memstrata.memory.store.tombstones`);
- ``tier_state``: per user and conversation, the persona anchor of HMO's drift gate
  (:mod:`memstrata.memory.tiers.anchor`);
- ``caches``: what this process's searches keep of the store per user, within ``Context.cache_mb``
  (:mod:`memstrata.memory.index.caches`), cleared by :meth:`MemoryStore.close`;
- :mod:`~memstrata.memory.store.format`: the store's format version, written when it is created and checked when it
  is opened (:class:`StoreFormatError` for a store of another format).

All three build filters and keys with :mod:`~memstrata.memory.store.tenant`, and
:meth:`MemoryStore.delete_user` clears a user from all three.

Example:
    >>> store = MemoryStore(path="/tmp/memstrata-doc")  # doctest: +SKIP
    >>> store.delete_user("alice")  # doctest: +SKIP
    {'turn': 0, ..., 'edges': 0, 'counters': 0}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from langchain_core.embeddings import Embeddings

from memstrata.errors import EmbedderMismatchError, StoreError, StoreFormatError
from memstrata.memory.index.caches import SearchCaches
from memstrata.memory.store.counters import CounterStore
from memstrata.memory.store.edges import Edge, EdgeStore
from memstrata.memory.store.format import STORE_FORMAT
from memstrata.memory.store.sequences import Sequences
from memstrata.memory.store.sqlite_table import Connections
from memstrata.memory.store.tables import SQLITE_FILE, Table, open_table
from memstrata.memory.store.tenant import stable_hash
from memstrata.memory.store.tombstones import Tombstones
from memstrata.memory.store.vectors import Record, VectorStore
from memstrata.memory.store.words import WordIndex

P = ParamSpec("P")
R = TypeVar("R")


def _of_units(method: Callable[Concatenate[VectorStore, P], R]) -> Callable[Concatenate[MemoryStore, P], R]:
    """A :class:`VectorStore` method, as the same method of the memory store, called on its units part."""

    def call(self: MemoryStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self.units, *args, **kwargs)

    call.__name__ = method.__name__
    call.__qualname__ = f"MemoryStore.{method.__name__}"
    call.__doc__ = method.__doc__
    return call


class MemoryStore:
    """The units with their vectors, plus the edge, counter and record tables of the same location.

    It is made of its parts: :attr:`units` (a :class:`VectorStore`, whose read and write methods it offers as its
    own), :attr:`edges`, :attr:`counters`, :attr:`sequences`, :attr:`tombstones` and the other tables, and
    :attr:`caches` (what this process's searches keep of it).

    Args:
        path: folder of the embedded store (Chroma files and the SQLite file of edges and counters).
        url: a Chroma server, e.g. ``http://127.0.0.1:8000``; edges and counters then live there too.
        embeddings: any LangChain ``Embeddings``; the packaged MiniLM by default.
        client: an already-built Chroma client (tests, custom settings); edges and counters go to
            ``path`` when given, else into that client.

    Raises:
        StoreFormatError: the store was written in another format than :data:`STORE_FORMAT`.
    """

    def __init__(
        self,
        *,
        path: str | Path | None = None,
        url: str | None = None,
        embeddings: Embeddings | None = None,
        client: Any = None,
    ) -> None:
        self.units = VectorStore(path=path, url=url, embeddings=embeddings, client=client)
        self.embeddings = self.units.embeddings
        self.encoded = self.units.encoded  # a re-sent or unchanged text is never encoded twice
        self.versions = self.units.versions  # the write log search snapshots replay
        self.location = self.units.location
        folder = Path(path) if path is not None and not url else None
        # one file holds every table of an embedded store: its tables take turns on the same kept connections
        self.sqlite = Connections(folder / SQLITE_FILE) if folder is not None else None
        table = partial(open_table, path=folder, client=self.client, connections=self.sqlite)
        # a question's graph reads the entity edges of the conversations it names: 1.5% of their rows at 1M turns
        self.edges = EdgeStore(table("edges", scoped=("src_kind",)))
        self.counters = CounterStore(table("counters", indexed=("tier",)))
        self.items = table("items")  # what a LangGraph store user put
        self.sequences = Sequences(table("sequences"))
        self.journal = table("journal")  # what was updated or deleted
        self.tombstones = Tombstones(table("tombstones"))
        self.tier_state = table("tier_state")  # HMO's persona anchors
        self.caches = SearchCaches()  # what this process's searches keep of it, per user (cleared by close)

    # ---- the units part (memstrata.memory.store.vectors) ----------------------
    upsert = _of_units(VectorStore.upsert)
    get = _of_units(VectorStore.get)
    get_keys = _of_units(VectorStore.get_keys)
    vectors_by_key = _of_units(VectorStore.vectors_by_key)
    read_all = _of_units(VectorStore.read_all)
    recheck = _of_units(VectorStore.recheck)
    query = _of_units(VectorStore.query)
    nearest = _of_units(VectorStore.nearest)
    matching = _of_units(VectorStore.matching)
    holds_more_than = _of_units(VectorStore.holds_more_than)
    count = _of_units(VectorStore.count)
    users = _of_units(VectorStore.users)
    collection = _of_units(VectorStore.collection)
    stored_kinds = _of_units(VectorStore.stored_kinds)
    index_words = _of_units(VectorStore.index_words)
    terms_problems = _of_units(VectorStore.terms_problems)
    reindex = _of_units(VectorStore.reindex)
    storage_key = staticmethod(VectorStore.storage_key)

    @property
    def client(self) -> Any:
        """The Chroma client (:attr:`VectorStore.client`)."""
        return self.units.client

    @property
    def words(self) -> WordIndex | None:
        """An embedded store's word index; ``None`` on a server (:attr:`VectorStore.words`)."""
        return self.units.words

    def close(self) -> None:
        """Drop every search cache this process holds of the store (:class:`SearchCaches`), then hand back what an
        embedded store's Chroma client and SQLite files hold (:meth:`VectorStore.close`, the idle connections). A
        later use reads everything again.
        """
        self.caches.clear()
        self.units.close()
        if self.sqlite is not None:
            self.sqlite.close()

    def tables(self) -> dict[str, Table]:
        """Every record table of the store, by name."""
        return {
            "edges": self.edges.table,
            "counters": self.counters.table,
            "items": self.items,
            "sequences": self.sequences.table,
            "journal": self.journal,
            "tombstones": self.tombstones.table,
            "tier_state": self.tier_state,
        }

    def delete(self, kind: str, *, user_id: str, conversation_id: str, unit_ids: Sequence[str]) -> None:
        """Remove units and their counters (a unit's reinforcement, recall and tier go with it)."""
        self.units.delete(kind, user_id=user_id, conversation_id=conversation_id, unit_ids=unit_ids)
        self.counters.delete(user_id, [(conversation_id, kind, unit_id) for unit_id in unit_ids])

    def drop_orphan_counters(self, user_id: str, items: Sequence[tuple[str, str, str]]) -> int:
        """Delete the counters among ``items`` (conversation, kind, unit id) whose unit is not stored.

        A writer that reinforces a unit another process deleted meanwhile leaves such a counter;
        it calls this after its writes, so whichever writer comes last leaves none.
        """
        by_kind: dict[str, list[tuple[str, str]]] = {}
        for conv, kind, unit_id in items:
            by_kind.setdefault(kind, []).append((conv, unit_id))
        stored = {
            (kind, r.metadata["conversation_id"], r.unit_id)
            for kind, keys in by_kind.items()
            for r in self.get_keys(kind, user_id=user_id, keys=keys)
        }
        orphans = [item for item in items if (item[1], item[0], item[2]) not in stored]
        return self.counters.delete(user_id, orphans) if orphans else 0

    def delete_turns(self, user_id: str, conversation_id: str, turn_ids: list[str]) -> dict[str, int]:
        """Remove raw turns and everything built from them; counts per part.

        Every unit of every registered kind that links to one of the turns goes (facts,
        summaries, episodes, entities, tree nodes, and kinds added later, and the contextual
        views of the sessions that lose a turn, which quote their neighbours), and every unit
        whose parent goes, repeated until a pass adds nothing (a fact goes with its episode).
        Units that link up to a parent are deleted first and raw turns last, so no reader
        meets a unit whose parent is gone. The edges that come from the turns or touch a
        removed unit go too, and so do the counters of every unit of the conversation no
        longer stored (a re-segmentation leaves the counters of the units it replaced). A unit that stays but
        lists removed facts (an entity) keeps the rest of its list; one whose children all go, goes.
        Re-ingesting the turns that remain rebuilds what they support.
        """
        from memstrata.memory.levels import levels

        gone = set(turn_ids)
        units = {
            lv.kind: [
                lv.unit.model_validate(r.payload)
                for r in self.get(lv.kind, user_id=user_id, conversation_id=conversation_id)
            ]
            for lv in levels()
        }
        doomed = set(gone)  # unit ids (raw turn ids included)
        # A turn's contextual view holds its neighbours' text: every view of a session that loses a turn goes
        # (re-ingesting the session rebuilds them).
        sessions = {getattr(u, "session_id", None) for lv in levels(role="raw") for u in units[lv.kind] if u.id in gone}
        doomed |= {
            u.id for lv in levels(role="view") for u in units[lv.kind] if getattr(u, "session_id", None) in sessions
        }
        while more := {
            u.id
            for stored in units.values()
            for u in stored
            if u.id not in doomed
            and (doomed & {*u.linked_turn_ids(), *u.parent_ids()} or (u.child_ids() and set(u.child_ids()) <= doomed))
        }:
            doomed |= more
        # a unit that stays but lists doomed children (an entity and the facts that name it) loses them from its list
        kept_lists = [
            (kind, u)
            for kind, stored in units.items()
            for u in stored
            if u.id not in doomed and doomed & set(u.child_ids()) and hasattr(u, "fact_ids")
        ]
        linked_up = {kind for kind, stored in units.items() if any(u.parent_ids() for u in stored)}
        raw, *built = [lv.kind for lv in levels()]
        later_first = list(reversed(built))  # a kind registered later is built from earlier ones
        removed: dict[str, int] = {}
        for kind in [k for k in later_first if k in linked_up] + [k for k in later_first if k not in linked_up] + [raw]:
            ids = [u.id for u in units[kind] if u.id in doomed]
            self.delete(kind, user_id=user_id, conversation_id=conversation_id, unit_ids=ids)
            removed[kind] = len(ids)
        for kind in dict.fromkeys(k for k, _ in kept_lists):
            ids = [u.id for k, u in kept_lists if k == kind]
            vectors = {
                r.unit_id: r.metadata["_vector"]
                for r in self.get(
                    kind, user_id=user_id, conversation_id=conversation_id, unit_ids=ids, with_vectors=True
                )
            }
            pruned = [
                u.model_copy(update={"fact_ids": [f for f in u.fact_ids if f not in doomed]})
                for k, u in kept_lists
                if k == kind and u.id in vectors
            ]
            self.upsert(
                kind,
                pruned,
                documents=[u.embed_text() for u in pruned],
                vectors=[vectors[u.id] for u in pruned],
                extra=[u.metadata() for u in pruned],
            )
            removed[f"{kind}_pruned"] = len(pruned)
        edges = [
            e for e in self.edges.get(user_id, conversation_id=conversation_id) if doomed & {*e.turn_ids, e.src, e.dst}
        ]
        removed["edges"] = self.edges.delete(user_id, edges)
        kept = {(kind, u.id) for kind, stored in units.items() for u in stored if u.id not in doomed}
        stale = [
            (c.conversation_id, c.kind, c.unit_id)
            for c in self.counters.all(user_id)
            if c.conversation_id == conversation_id and (c.kind, c.unit_id) not in kept
        ]
        removed["counters"] = self.counters.delete(user_id, stale)
        return removed

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Remove every trace of a user: units of every kind, edges and counters; counts per part."""
        removed = self.units.delete_user(user_id)
        removed["edges"] = self.edges.delete_user(user_id)
        removed["counters"] = self.counters.delete_user(user_id)
        removed["items"] = self.items.delete(user_id=user_id)
        removed["sequences"] = self.sequences.delete(user_id=user_id)
        removed["journal"] = self.journal.delete(user_id=user_id)
        removed["tombstones"] = self.tombstones.delete(user_id=user_id)
        removed["tier_state"] = self.tier_state.delete(user_id=user_id)
        return removed


__all__ = [
    "STORE_FORMAT",
    "CounterStore",
    "Edge",
    "EdgeStore",
    "EmbedderMismatchError",
    "MemoryStore",
    "Record",
    "Sequences",
    "StoreError",
    "StoreFormatError",
    "VectorStore",
    "stable_hash",
]
