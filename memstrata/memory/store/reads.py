"""Reads of the stored record that ingestion stages share: a write's sessions, episodes and turns.

Every function takes the :class:`~memstrata.memory.store.MemoryStore` and returns plain units or
records; the stages in :mod:`memstrata.nodes.ingest` call them on a worker thread.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from memstrata.memory.conversation import Conversation
from memstrata.memory.levels import Episode, Fact, Persona, Turn
from memstrata.memory.segmentation import stays_open
from memstrata.memory.store import MemoryStore, held_facts

if TYPE_CHECKING:
    from collections.abc import Collection


def sessions_where(conv: Conversation) -> dict[str, Any]:
    """The ``where`` clause for the input's sessions: a write of one session reads only that session."""
    return {"session_id": {"$in": [s.session_id for s in conv.sessions]}}


def stored_turn_texts(store: MemoryStore, conv: Conversation) -> dict[str, str]:
    """The stored text of each of the input's turns that is stored (by id): unit id -> stored text."""
    ids = [t.id for s in conv.sessions for t in s.turns]
    records = store.get("turn", user_id=conv.user_id, conversation_id=conv.conversation_id, unit_ids=ids)
    return {r.unit_id: r.document for r in records}


def appended_to_open_tail(
    store: MemoryStore,
    conv: Conversation,
    fresh: list[Turn],
    *,
    present: datetime,
    max_turns: int,
    quiet: timedelta,
    max_gap: timedelta,
) -> int | None:
    """The position of the first appended turn when this write only appends new turns to its session's open tail
    and closes nothing (:func:`~memstrata.memory.segmentation.stays_open`); ``None`` when anything else may change.

    Three reads, whatever the conversation's length: the session counters, the session's open episode, and the
    turn before the appended ones (by the id a message without one gets, else by its place), or, when turns wait
    already, the turns from the episode's last on. The appended turns
    then wait, raw, in the tail after that episode (searched as raw turns,
    :func:`~memstrata.memory.search.light.pending_rows`) until a write closes or fills the tail, and that write
    cuts and distils the whole tail once. The turns already waiting join the check, so a silence among them closes
    the tail even when their own write checked nothing (a deferred write, ``ingest(..., defer=True)``).
    """
    turns = [t for s in conv.sessions for t in s.turns]
    if not fresh or len(conv.sessions) != 1 or len(fresh) != len(turns):
        return None
    session = conv.sessions[0].session_id
    marks = store.sequences.sessions(conv.user_id, conv.conversation_id)
    numbered = [int(m) for m in marks if m.isdigit()]
    if not session.isdigit() or max(numbered, default=-1) != int(session):
        return None  # an earlier session, or one whose end may close another's tail
    user_id, conversation_id = conv.user_id, conv.conversation_id
    tails = store.get(
        "episode", user_id=user_id, conversation_id=conversation_id, where={"session_id": session, "open": True}
    )
    first = min(t.position for t in fresh)
    if len(tails) != 1 or int(tails[0].payload["end_position"]) >= first:
        return None
    tail = tails[0].payload
    end = int(tail["end_position"])
    if first - 1 > end:  # turns wait after the open episode: from its last turn on, they all join the check
        before = [
            r
            for r in store.get(
                "turn",
                user_id=user_id,
                conversation_id=conversation_id,
                where={"session_id": session, "position": {"$gte": end}},
            )
            if int(r.metadata.get("position", -1)) < first
        ]
    else:  # the turn before, by the id a message without one gets (one keyed read), else by its place
        before = [
            r
            for r in store.get(
                "turn", user_id=user_id, conversation_id=conversation_id, unit_ids=[f"s{session}:t{first - 1}"]
            )
            if r.metadata.get("session_id") == session and r.metadata.get("position") == first - 1
        ] or store.get(
            "turn",
            user_id=user_id,
            conversation_id=conversation_id,
            where={"session_id": session, "position": first - 1},
        )
    if sum(r.metadata.get("position") == first - 1 for r in before) != 1:
        return None
    before.sort(key=lambda r: int(r.metadata.get("position", -1)))
    core = max(t.position for t in fresh) - int(tail["start_position"]) + 1 - int(tail.get("repeated", 0))
    times = [
        *(Turn.model_validate(r.payload).timestamp for r in before),
        *(t.timestamp for t in sorted(fresh, key=lambda t: t.position)),
    ]
    open_still = stays_open(
        core_turns=core, times=times, present=present, max_turns=max_turns, quiet=quiet, max_gap=max_gap
    )
    return first if open_still else None


def incomplete_sessions(store: MemoryStore, conv: Conversation, fresh: Collection[str] = frozenset()) -> list[str]:
    """Sessions of the input whose finished episodes do not cover every stored turn (but the ``fresh`` ones this
    write adds, and those waiting after the session's open episode), or that lack turn contexts.

    An episode is finished when its summary and all its facts are stored (they are written
    summary, episode, facts). Anything less is an interrupted ingest or a deletion of turns;
    re-ingesting the same input repairs it.
    """
    user_id, conversation_id, where = conv.user_id, conv.conversation_id, sessions_where(conv)
    episodes = store.get("episode", user_id=user_id, conversation_id=conversation_id, where=where)
    # Turns after a session's open episode wait raw in its tail (appended_to_open_tail): nothing is derived from
    # them yet, so they are not unfinished work.
    tail_end = {str(r.payload["session_id"]): int(r.payload["end_position"]) for r in episodes if r.payload.get("open")}
    turns: dict[str, set[str]] = {}
    pending: dict[str, set[str]] = {}
    for r in store.get("turn", user_id=user_id, conversation_id=conversation_id, where=where):
        if r.unit_id not in fresh:
            session = str(r.metadata.get("session_id"))
            turns.setdefault(session, set()).add(r.unit_id)
            if int(r.metadata.get("position", -1)) > tail_end.get(session, 1 << 62):
                pending.setdefault(session, set()).add(r.unit_id)
    covered: dict[str, set[str]] = {}
    for ep in finished_episodes(store, conv.user_id, conv.conversation_id, episodes):
        covered.setdefault(ep.payload["session_id"], set()).update(ep.payload["turn_ids"])
    for session, ids in pending.items():
        covered.setdefault(session, set()).update(ids)
    viewed: dict[str, set[str]] = {}
    for r in store.get("turn_context", user_id=user_id, conversation_id=conversation_id, where=where):
        viewed.setdefault(str(r.metadata.get("session_id")), set()).add(str(r.metadata.get("turn_id")))
    return [
        s.session_id
        for s in conv.sessions
        if s.session_id in turns
        and not covered.get(s.session_id, set()) == viewed.get(s.session_id, set()) == turns[s.session_id]
    ]


def finished_episodes(store: MemoryStore, user_id: str, conv_id: str, records: list[Any]) -> list[Any]:
    """The stored episode records whose summary and every fact are stored too."""
    if not records:
        return []
    wanted = [r.payload.get("summary_id", "") for r in records]
    summaries = {r.unit_id for r in store.get("summary", user_id=user_id, conversation_id=conv_id, unit_ids=wanted)}
    fact_ids = [f for r in records for f in r.payload.get("fact_ids", [])]
    facts = (
        {r.unit_id for r in store.get("fact", user_id=user_id, conversation_id=conv_id, unit_ids=fact_ids)}
        if fact_ids
        else set()
    )
    return [
        r
        for r in records
        if r.payload.get("summary_id") in summaries and all(f in facts for f in r.payload.get("fact_ids", []))
    ]


def ended_tails(store: MemoryStore, conv: Conversation, written: set[str]) -> list[str]:
    """Earlier sessions with an open tail, when this write starts a later one: they are over, so they close."""
    numbers = [int(s) for s in written if s.isdigit()]
    if not numbers:
        return []
    tails = {str(r.payload["session_id"]) for r in open_episodes(store, conv.user_id, conv.conversation_id)}
    return sorted(s for s in tails if s.isdigit() and int(s) < max(numbers))


def open_episodes(store: MemoryStore, user_id: str, conv_id: str) -> list[Any]:
    """The stored episodes of a conversation that are still open (session tails)."""
    return store.get("episode", user_id=user_id, conversation_id=conv_id, where={"open": True})


def by_conversation(pairs: list[list[str]]) -> dict[str, list[str]]:
    """``[conversation_id, id]`` pairs grouped by conversation, in order (one store read per conversation)."""
    grouped: dict[str, list[str]] = {}
    for conv_id, unit_id in pairs:
        grouped.setdefault(conv_id, []).append(unit_id)
    return grouped


def read_sessions(
    store: MemoryStore, user_id: str, pairs: list[list[str]], *, with_vectors: bool = False
) -> dict[tuple[str, str], tuple[list[Turn], np.ndarray | None]]:
    """The stored turns of some ``[conversation_id, session_id]`` pairs, in position order (with vectors)."""
    out: dict[tuple[str, str], tuple[list[Turn], np.ndarray | None]] = {}
    for conv_id, session_ids in by_conversation(pairs).items():
        records = store.get(
            "turn",
            user_id=user_id,
            conversation_id=conv_id,
            where={"session_id": {"$in": session_ids}},
            with_vectors=with_vectors,
        )
        groups: dict[str, list[Any]] = {}
        for r in records:
            groups.setdefault(str(r.metadata.get("session_id")), []).append(r)
        for session_id, recs in groups.items():
            recs.sort(key=lambda r: r.metadata.get("position", 0))
            vecs = np.asarray([r.metadata["_vector"] for r in recs], dtype=float) if with_vectors else None
            out[(conv_id, session_id)] = ([Turn.model_validate(r.payload) for r in recs], vecs)
    return out


def read_session_ends(
    store: MemoryStore, user_id: str, appended: list[list[Any]], *, back: int, with_vectors: bool = False
) -> dict[tuple[str, str], tuple[list[Turn], np.ndarray | None]]:
    """The turns of some sessions from ``back`` turns before a position on, in position order (with vectors):
    ``appended`` holds ``[conversation_id, session_id, position]`` triples.
    """
    out: dict[tuple[str, str], tuple[list[Turn], np.ndarray | None]] = {}
    for conv_id, session_id, position in appended:
        records = store.get(
            "turn",
            user_id=user_id,
            conversation_id=conv_id,
            where={"session_id": str(session_id), "position": {"$gte": max(0, int(position) - back)}},
            with_vectors=with_vectors,
        )
        records.sort(key=lambda r: r.metadata.get("position", 0))
        vecs = np.asarray([r.metadata["_vector"] for r in records], dtype=float) if with_vectors else None
        out[(conv_id, str(session_id))] = ([Turn.model_validate(r.payload) for r in records], vecs)
    return out


def read_episode_turns(store: MemoryStore, user_id: str, episodes: list[Episode]) -> dict[tuple[str, str], Turn]:
    """Every stored turn the episodes hold, by ``(conversation_id, turn_id)``."""
    turns: dict[tuple[str, str], Turn] = {}
    for conv_id, ids in by_conversation([[e.conversation_id, t] for e in episodes for t in e.turn_ids]).items():
        for r in store.get("turn", user_id=user_id, conversation_id=conv_id, unit_ids=sorted(set(ids))):
            turns[(conv_id, r.unit_id)] = Turn.model_validate(r.payload)
    return turns


def closed_facts(store: MemoryStore, user_id: str, conv_id: str) -> tuple[list[Fact], dict[str, Any]]:
    """The facts of the conversation's stored closed episodes, in episode order, and their vectors (an open
    episode's facts are redone as it grows, so the entity graph and the themes wait for it to close).

    Held in this process between writes and brought up to date from the write log
    (:mod:`memstrata.memory.store.held_facts`).
    """
    return held_facts.closed_facts(store, user_id, conv_id)


def stray_facts(store: MemoryStore, user_id: str, conv_id: str, session_id: str, known: list[str]) -> list[Any]:
    """The session's stored facts whose episode is not stored (``known``: the session's episode ids, read before).

    Two writers of one conversation could leave such facts before their race was closed (a writer's facts landed
    after the other deleted their episode); the next write that cuts the session deletes them. A fact of an episode
    stored after ``known`` was read (another writer's, stored before its facts) is told apart by reading its
    episode after the fact.
    """
    where: dict[str, Any] = {"session_id": session_id}
    if known:
        where["episode_id"] = {"$nin": sorted(set(known))}
    found = store.get("fact", user_id=user_id, conversation_id=conv_id, where=where)
    if not found:
        return []
    wanted = sorted({str(r.payload.get("episode_id", "")) for r in found})
    stored = {r.unit_id for r in store.get("episode", user_id=user_id, conversation_id=conv_id, unit_ids=wanted)}
    return [r for r in found if r.payload.get("episode_id") not in stored]


def read_personas(store: MemoryStore, user_id: str, speaker: str, conversation_id: str | None = None) -> list[Persona]:
    """Every version of every dimension of ``speaker``'s persona (name matched case-blind), in one conversation.

    Raises:
        LookupError: the speaker has no persona, or has one in several conversations and none was named.
    """
    found = [
        Persona.model_validate(r.payload)
        for r in store.get("persona", user_id=user_id, conversation_id=conversation_id)
    ]
    mine = [p for p in found if p.speaker.casefold() == speaker.casefold()]
    convs = sorted({p.conversation_id for p in mine})
    if not mine:
        known = sorted({p.speaker for p in found})
        msg = f"no persona for speaker {speaker!r}" + (
            f"; speakers with one: {known}" if known else " (none is built yet: a persona needs closed episodes)"
        )
        raise LookupError(msg)
    if len(convs) > 1:
        msg = f"{speaker!r} has a persona in several conversations {convs}; pass conversation_id"
        raise LookupError(msg)
    return sorted(mine, key=lambda p: (p.dimension, p.version))
