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

What it cannot see is another process rewriting a stored fact in place under the same id while its episode stays
as it was (the entity stage's subject and supersession fields); a fact read from Chroma a moment before that write
would be as old.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memstrata.memory.levels import Fact
from memstrata.memory.store import tenant

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

    def nbytes(self) -> int:
        """The vectors' bytes plus an estimate of 2 kB per parsed fact."""
        return sum(v.nbytes for _, v in self.facts.values()) + 2_000 * len(self.facts)


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
