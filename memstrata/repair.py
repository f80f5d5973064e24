"""Rebuild what memstrata derived from a user's raw turns: the repair for a store ``memstrata check`` finds broken.

:func:`rebuild` deletes every derived unit of the user's conversations (turn contexts, episodes, summaries, facts,
entities, tree nodes, themes, persona versions, and any kind registered later), their edges and their counters,
then ingests the stored turns again with their ids, sessions, positions, times and metadata, as
:meth:`memstrata.memories.Memories.update` rebuilds one session. A session whose episodes were all closed is closed
again.

Kept as they are: the raw turns and their counters, the LangGraph store items, the journal, the tombstones and each
session's position counter. The facts a user removed from a persona (:meth:`Memstrata.forget_persona_item`) live
only in the persona versions, so they are read before the delete and removed again afterwards (found by their text
and turns when the rebuild gives the fact another id). A rebuild of every conversation also clears HMO's persona
anchor (``tier_state``), so the tiers start afresh as on a first ingest.

Example:
    >>> rebuild(mem, "ann")  # doctest: +SKIP
    {'conversations': 1, 'turns': 12, 'removed': 57, 'written': 57}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memstrata.memory.levels import Persona, levels, raw_kind
from memstrata.memory.models import Unit
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import read_personas

if TYPE_CHECKING:
    from memstrata.client import Memstrata

_DELETE_BATCH = 1000  # ids per delete: far below SQLite's variable limit in Chroma


@dataclass(frozen=True)
class Exclusion:
    """A fact a user removed from one persona dimension, with what finds it again after a rebuild."""

    conversation_id: str
    speaker: str
    dimension: str
    fact_id: str
    text: str | None
    turn_ids: tuple[str, ...]


def rebuild(mem: Memstrata, *, user_id: str, conversation_id: str | None = None) -> dict[str, int]:
    """Delete every unit derived from the user's raw turns (in one conversation, or in all) and build them again.

    Returns how many conversations and turns were rebuilt, and how many derived units were removed and written.

    Raises:
        LookupError: the user has no stored turns (in that conversation).

    Example:
        >>> rebuild(mem, user_id="ann", conversation_id="c1")  # doctest: +SKIP
        {'conversations': 1, 'turns': 12, 'removed': 57, 'written': 57}
    """
    store = mem.store
    sessions = _sessions(store, user_id, conversation_id)
    closed = {conv: _closed_sessions(store, user_id, conv) for conv in sessions}
    exclusions = persona_exclusions(store, user_id, list(sessions))
    removed = sum(_clear(store, user_id, conv) for conv in sessions)
    if conversation_id is None:
        store.tier_state.delete(user_id=user_id)
    for conv, ids in sessions.items():
        _reingest(mem, user_id, conv, ids, closed[conv])
    for exclusion in exclusions:
        reapply_exclusion(mem, exclusion, user_id=user_id)
    return {
        "conversations": len(sessions),
        "turns": sum(len(store.get(raw_kind(), user_id=user_id, conversation_id=c)) for c in sessions),
        "removed": removed,
        "written": sum(len(store.get(k, user_id=user_id, conversation_id=c)) for c in sessions for k in derived()),
    }


def derived() -> list[str]:
    """The derived kinds in the order they are deleted: those that link up to a parent first, so a reader during
    a rebuild never meets a unit whose parent is gone (as :meth:`MemoryStore.delete_turns` orders them).
    """
    later_first = [lv for lv in reversed(levels()) if lv.role != "raw"]
    linked_up = [lv.kind for lv in later_first if lv.unit.parent_ids is not Unit.parent_ids]
    return [*linked_up, *(lv.kind for lv in later_first if lv.kind not in linked_up)]


def _sessions(store: MemoryStore, user_id: str, conversation_id: str | None) -> dict[str, list[str]]:
    """The user's conversations (or the one named) and their session ids, from the stored raw turns."""
    out: dict[str, set[str]] = {}
    for r in store.get(raw_kind(), user_id=user_id, conversation_id=conversation_id):
        out.setdefault(r.metadata["conversation_id"], set()).add(str(r.metadata.get("session_id")))
    if not out:
        where = f" in conversation {conversation_id!r}" if conversation_id is not None else ""
        msg = f"no stored turns for user {user_id!r}{where}: nothing to rebuild"
        raise LookupError(msg)
    return {conv: sorted(ids) for conv, ids in sorted(out.items())}


def _closed_sessions(store: MemoryStore, user_id: str, conv_id: str) -> set[str]:
    """The sessions with stored episodes, none of them open: their rebuilt tails are closed too."""
    seen: dict[str, bool] = {}
    for r in store.get("episode", user_id=user_id, conversation_id=conv_id):
        session = str(r.payload.get("session_id"))
        seen[session] = seen.get(session, True) and not r.payload.get("open")
    return {s for s, shut in seen.items() if shut}


def _clear(store: MemoryStore, user_id: str, conv_id: str) -> int:
    """Delete the conversation's edges, derived units and their counters; how many units went."""
    raw = raw_kind()
    edges = [e for e in store.edges.get(user_id, conversation_id=conv_id) if {e.src_kind, e.dst_kind} != {raw}]
    store.edges.delete(user_id, edges)  # first: no edge ever names a unit that is gone
    removed = 0
    for kind in derived():
        ids = [r.unit_id for r in store.get(kind, user_id=user_id, conversation_id=conv_id)]
        for start in range(0, len(ids), _DELETE_BATCH):
            store.delete(kind, user_id=user_id, conversation_id=conv_id, unit_ids=ids[start : start + _DELETE_BATCH])
        removed += len(ids)
    # counters whose unit was gone already (a writer that lost a race) go too; a raw turn's stay
    left = [c.item for c in store.counters.all(user_id, conversation_id=conv_id) if c.kind != raw]
    store.counters.delete(user_id, left)
    return removed


def _reingest(mem: Memstrata, user_id: str, conv_id: str, sessions: list[str], closed: set[str]) -> None:
    """Ingest the conversation's stored turns again: the closed sessions closed, then the others as a write would."""
    shut = [s for s in sessions if s in closed]
    if shut:
        mem.managed.rebuild_sessions(set(shut), user_id=user_id, conversation_id=conv_id, close=True)
    if rest := [s for s in sessions if s not in closed]:
        mem.managed.rebuild_sessions(set(rest), user_id=user_id, conversation_id=conv_id, close=False)


def persona_exclusions(store: MemoryStore, user_id: str, conversations: list[str] | None = None) -> list[Exclusion]:
    """The facts removed from the user's current persona versions (of these conversations, or of all), with each
    fact's text and turns, sorted by conversation, speaker, dimension and fact (an export writes them in this order).
    """
    out: set[Exclusion] = set()
    for conv in conversations if conversations is not None else [None]:
        current = [
            p
            for r in store.get("persona", user_id=user_id, conversation_id=conv)
            if (p := Persona.model_validate(r.payload)).current
        ]
        for c in sorted({p.conversation_id for p in current}):
            wanted = sorted({f for p in current if p.conversation_id == c for f in p.excluded})
            facts = {
                r.unit_id: r.payload for r in store.get("fact", user_id=user_id, conversation_id=c, unit_ids=wanted)
            }
            out |= {
                Exclusion(
                    c,
                    p.speaker,
                    p.dimension,
                    f,
                    facts.get(f, {}).get("text"),
                    tuple(facts.get(f, {}).get("turn_ids", [])),
                )
                for p in current
                if p.conversation_id == c
                for f in p.excluded
            }
    return sorted(out, key=lambda e: (e.conversation_id, e.speaker, e.dimension, e.fact_id))


def reapply_exclusion(mem: Memstrata, e: Exclusion, *, user_id: str) -> bool:
    """Remove the fact from the rebuilt (or imported) persona again; ``False`` when no persona version can hold the
    exclusion.
    """
    fact_id = _same_fact(mem.store, user_id, e)
    try:
        mem.forget_persona_item(e.speaker, e.dimension, fact_id, user_id=user_id, conversation_id=e.conversation_id)
        return True
    except LookupError:  # no version holds the item (or no persona): the current version still keeps it out
        pass
    try:
        versions = read_personas(mem.store, user_id, e.speaker, e.conversation_id)
    except LookupError:
        return False
    current = next((v for v in versions if v.dimension == e.dimension and v.current), None)
    if current is None:
        return False
    if fact_id not in current.excluded:
        edited = current.model_copy(update={"excluded": sorted({*current.excluded, fact_id})})
        mem.store.upsert("persona", [edited], documents=[edited.embed_text()], extra=[edited.metadata()])
    return True


def _same_fact(store: MemoryStore, user_id: str, e: Exclusion) -> str:
    """The excluded fact's id, or that of the rebuilt fact with its text and turns (a different cut renames it)."""
    facts = store.get("fact", user_id=user_id, conversation_id=e.conversation_id)
    if e.text is None or any(r.unit_id == e.fact_id for r in facts):
        return e.fact_id
    same = sorted(
        r.unit_id
        for r in facts
        if r.payload.get("text") == e.text and tuple(r.payload.get("turn_ids", [])) == e.turn_ids
    )
    return same[0] if same else e.fact_id
