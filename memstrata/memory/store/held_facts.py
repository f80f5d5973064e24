"""A conversation's facts and episodes as this process last read them, brought up to date from the write log.

Three ingestion stages (entities, themes, persona) each need every fact of the conversation's closed episodes with
its vector. Read from Chroma, that is every fact's payload and vector, three times a write, and it grows with the
conversation: 1.9 s for the 5,743 facts of a 3,000-message conversation. :func:`closed_facts` reads them once per
process and keeps them in ``store.caches`` (:class:`~memstrata.memory.index.caches.SearchCaches`, which drops them
with the user and with the store). A later call applies this process's writes since (the store's write log,
:class:`~memstrata.memory.store.vectors.WriteLog`). Then it checks by ids alone
(:meth:`~memstrata.memory.store.vectors.VectorStore.recheck`, about 0.1 s for those 5,743 facts) that no other
process added or deleted a fact of the conversation, or closed, reopened or deleted one of its episodes. Anything
it cannot account for (a log that no longer reaches back, a reset, another process's write) reads everything again.

Two more things ride on a conversation held here, read once and then kept up to date the same way:
:func:`held_edges`, the conversation's edges from facts and themes (xMemory's kNN graph, which the themes stage diffs
at every close: 38,411 such edges at the end of a 3,000-message conversation, about a second to read), and
:func:`speakers`, who speaks in it (the persona stage's list, which took a read of every turn). The edges are read
again when this process wrote edges from those kinds of units since they were kept (another stage's, a delete, a
repair: the edge store's own counts, :attr:`~memstrata.memory.store.edges.EdgeStore.source_writes`), and with the
facts when another writer is seen. The themes stage is their only writer, and it writes them only after its facts
changed, so another process's write of them shows first as a fact it added.

What it cannot see is another process rewriting a stored fact in place under the same id while its episode stays
as it was (the entity stage's subject and supersession fields); a fact read from Chroma a moment before that write
would be as old. Nor does it see another process's turns until that process's facts show: a speaker who is new there
is missing from :func:`speakers` until then, and a speaker with no closed fact gets no persona anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memstrata.memory.levels import Fact
from memstrata.memory.store import tenant
from memstrata.memory.store.edges import Edge, source_key

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

# conversations held per store: the ones a process is writing now (each holds its facts' vectors)
MAX_HELD = 8


@dataclass
class Held:
    """One conversation's facts (with their vectors) and whether each of its episodes is open, at ``version``."""

    version: int
    facts: dict[str, tuple[Fact, np.ndarray]]
    open: dict[str, bool]
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # one catch-up at a time
    # the edges from some kinds of units (:func:`held_edges`), by (source, relation, destination), and the edge
    # store's counts of this process's writes of such edges when they were last known to be the stored ones
    edges: dict[tuple[str, str, str], Edge] | None = None
    edge_kinds: tuple[str, ...] = ()
    edge_writes: tuple[int, ...] = ()
    speakers: dict[str, str] | None = None  # each stored turn's speaker, by turn id (:func:`speakers`)

    def nbytes(self) -> int:
        """The vectors' bytes plus estimates of 2 kB per parsed fact and 300 bytes per edge.

        A store has one embedder, so every vector is the size of the first: the count is read in constant time (a
        search reads it at every open, and summing 4,000 facts' vectors took 18 ms a query on a LongMemEval user).
        """
        edges = len(self.edges) if self.edges is not None else 0
        first = next(iter(self.facts.values()), None)
        vector = first[1].nbytes if first is not None else 0
        return (vector + 2_000) * len(self.facts) + 300 * edges


def closed_facts(store: MemoryStore, user_id: str, conv_id: str) -> tuple[list[Fact], dict[str, np.ndarray]]:
    """The facts of the conversation's closed episodes, in episode order, and their vectors, as stored now.

    A fact whose episode is not stored is left out: another writer of the conversation deleted the episode, and
    the fact goes too (:func:`memstrata.nodes.ingest.facts.drop_orphan_facts`).
    """
    caches = store.caches
    key = (user_id, conv_id)
    with caches.facts_lock:
        held = caches.facts.get(key)
    if held is not None:
        with held.lock:
            if _catch_up(store, user_id, conv_id, held):
                with caches.facts_lock:
                    if key in caches.facts:
                        caches.facts.move_to_end(key)
                return _closed(held)
    held = _read(store, user_id, conv_id)
    with caches.facts_lock:
        caches.facts[key] = held
        caches.facts.move_to_end(key)
        while len(caches.facts) > MAX_HELD:
            caches.facts.popitem(last=False)
    with held.lock:
        return _closed(held)


def _read(store: MemoryStore, user_id: str, conv_id: str) -> Held:
    version = store.versions.get(user_id)  # writes from here on are replayed by the next call (idempotently)
    records = store.get("fact", user_id=user_id, conversation_id=conv_id, with_vectors=True)
    facts = {
        r.unit_id: (Fact.model_validate(r.payload), np.asarray(r.metadata["_vector"], dtype=np.float32))
        for r in records
    }
    # The episodes are read after the facts: an episode is stored before its facts, so a fact read here whose
    # episode is missing lost it to a delete, not to a write still under way.
    episodes = {
        r.unit_id: bool(r.payload.get("open")) for r in store.get("episode", user_id=user_id, conversation_id=conv_id)
    }
    return Held(version, facts, episodes)


def _catch_up(store: MemoryStore, user_id: str, conv_id: str, held: Held) -> bool:
    """Apply this process's writes since ``held.version``; whether ``held`` is now the stored state."""
    changes = store.versions.since(user_id, held.version)
    if changes is None:
        return False
    for change in changes:
        if change.kind == "fact":
            _apply(held.facts, change, conv_id, lambda u, v: (u, np.asarray(v, dtype=np.float32)))
        elif change.kind == "episode":
            _apply(held.open, change, conv_id, lambda u, _v: bool(u.open))
        elif change.kind == "turn" and held.speakers is not None:
            _apply(held.speakers, change, conv_id, lambda u, _v: u.speaker)
        held.version = change.version
    # every fact, and the closed episodes (an episode another writer closed keeps its id), by the conversation's
    # scope key, which names the user: no other tenant's ids are read
    closed = [e for e, is_open in held.open.items() if not is_open]
    for kind, known, extra in (("fact", list(held.facts), None), ("episode", closed, {"open": False})):
        keys = {store.storage_key(user_id, conv_id, unit_id) for unit_id in known}
        where = tenant.where(user_id, conv_id, extra)
        still, new = store.recheck(kind, user_id=user_id, where=where, known=keys, conversation_id=conv_id)
        if new or len(still) != len(keys):
            return False
    return True


def _apply(into: dict[str, Any], change: Any, conv_id: str, value: Any) -> None:
    if change.op == "upsert":
        for unit, vector in zip(change.units, change.vectors, strict=True):
            if unit.conversation_id == conv_id:
                into[unit.id] = value(unit, vector)
    elif change.op == "delete" and change.conversation_id == conv_id:
        for unit_id in change.unit_ids:
            into.pop(unit_id, None)


def _closed(held: Held) -> tuple[list[Fact], dict[str, np.ndarray]]:
    closed = {e for e, is_open in held.open.items() if not is_open}
    kept = [(f, v) for f, v in held.facts.values() if f.episode_id in closed]
    kept.sort(key=lambda fv: (fv[0].episode_id, fv[0].n))
    return [f for f, _ in kept], {f.id: v for f, v in kept}


def held_edges(store: MemoryStore, user_id: str, conv_id: str, kinds: tuple[str, ...]) -> list[Edge]:
    """The conversation's stored edges whose source is a unit of one of ``kinds``, as :func:`closed_facts` left the
    conversation held (call it first, in the same stage): kept from the last call when this process wrote no such
    edge since except through :func:`rewrite_edges`, else read.
    """
    held = _current(store, user_id, conv_id)
    if held is None:
        return _read_edges(store, user_id, conv_id, kinds)
    with held.lock:
        return list(_edges_of(held, store, user_id, conv_id, kinds).values())


def rewrite_edges(
    store: MemoryStore,
    user_id: str,
    conv_id: str,
    kinds: tuple[str, ...],
    diff: Callable[[list[Edge]], tuple[list[Edge], list[Edge]]],
) -> tuple[list[Edge], list[Edge]]:
    """Bring the conversation's edges from ``kinds`` up to date: ``diff`` gets them (:func:`held_edges`) and returns
    (stale, new); those are deleted and added, and the held edges follow. The conversation stays locked meanwhile, so
    two writes of this process never diff against the same edges.
    """
    held = _current(store, user_id, conv_id)
    if held is None:
        stale, new = diff(_read_edges(store, user_id, conv_id, kinds))
        _write_edges(store, user_id, stale, new)
        return stale, new
    with held.lock:
        edges = _edges_of(held, store, user_id, conv_id, kinds)
        stale, new = diff(list(edges.values()))
        _write_edges(store, user_id, stale, new)
        for e in stale:
            edges.pop((e.src, e.rel, e.dst), None)
        for e in new:
            edges[(e.src, e.rel, e.dst)] = e
        held.edge_writes = _edge_writes(store, user_id, conv_id, kinds)
    return stale, new


def _edges_of(
    held: Held, store: MemoryStore, user_id: str, conv_id: str, kinds: tuple[str, ...]
) -> dict[tuple[str, str, str], Edge]:
    """The held edges from ``kinds`` (the caller holds ``held.lock``), read when not held or written meanwhile."""
    writes = _edge_writes(store, user_id, conv_id, kinds)
    if held.edges is None or held.edge_kinds != kinds or held.edge_writes != writes:
        held.edges = {(e.src, e.rel, e.dst): e for e in _read_edges(store, user_id, conv_id, kinds)}
        held.edge_kinds, held.edge_writes = kinds, writes
    return held.edges


def _write_edges(store: MemoryStore, user_id: str, stale: list[Edge], new: list[Edge]) -> None:
    store.edges.delete(user_id, stale)
    store.edges.add(user_id, new)


def speakers(store: MemoryStore, user_id: str, conv_id: str) -> list[str]:
    """Who speaks in the conversation's stored turns, sorted; held like the edges (call :func:`closed_facts` first)."""
    held = _current(store, user_id, conv_id)
    if held is None:
        return _names(_read_speakers(store, user_id, conv_id))
    with held.lock:
        if held.speakers is None:
            held.speakers = _read_speakers(store, user_id, conv_id)
        return _names(held.speakers)


def _current(store: MemoryStore, user_id: str, conv_id: str) -> Held | None:
    with store.caches.facts_lock:
        return store.caches.facts.get((user_id, conv_id))


def _edge_writes(store: MemoryStore, user_id: str, conv_id: str, kinds: tuple[str, ...]) -> tuple[int, ...]:
    counts = store.edges.source_writes.get(user_id, {})
    return (counts.get("*", 0), *(counts.get(source_key(conv_id, k), 0) for k in kinds))


def _read_edges(store: MemoryStore, user_id: str, conv_id: str, kinds: tuple[str, ...]) -> list[Edge]:
    return [e for k in kinds for e in store.edges.get(user_id, conversation_id=conv_id, src_kind=k)]


def _names(speaker_of: dict[str, str]) -> list[str]:
    return sorted(set(speaker_of.values()) - {""})


def _read_speakers(store: MemoryStore, user_id: str, conv_id: str) -> dict[str, str]:
    turns = store.get("turn", user_id=user_id, conversation_id=conv_id)
    return {r.unit_id: str(r.metadata.get("speaker") or "") for r in turns}
