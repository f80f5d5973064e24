"""Single memories, as a mem0 user manages them: list, get, update, delete, and what changed.

A memory here is a stored unit of one user: a raw turn (what was said), a fact or a summary (what memstrata made of
it). Turns are what a user edits: updating or deleting one removes every unit built from it (its episode, summary,
facts, themes, persona versions, tree nodes) and rebuilds what the session's remaining turns support, so nothing
stale stays searchable (``memstrata check`` holds after each). A deleted turn, and the old text of an updated one,
leave a tombstone (:mod:`memstrata.memory.store.tombstones`): a later write of the same message (a chat thread sent
again, a re-ingested file) does not bring it back. Every change is journaled per user (:func:`history`).

:class:`Memories` does it for one store; the facade (:class:`~memstrata.Memstrata`) owns one and its ``memories``,
``update``, ``delete`` and ``history`` call it. Every method takes, by keyword only, a ``user_id`` (and a
``conversation_id`` where it takes one), as the facade's methods do; every read goes through the store's one
tenant scope.

Example:
    >>> mem.memories(user_id="ann", speaker="Ann", limit=2)  # doctest: +SKIP
    [{'id': 's1:t0', 'kind': 'turn', 'conversation_id': 'c1', 'speaker': 'Ann', 'text': '...', ...}, ...]
    >>> mem.update("s1:t0", "I moved to Porto.", user_id="ann", conversation_id="c1")  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memstrata.memory.levels import Turn, get_level, raw_kind
from memstrata.memory.levels.level2.turn import meta_key
from memstrata.memory.store.reads import open_episodes, read_sessions
from memstrata.memory.store.tables import TableRow
from memstrata.memory.store.tombstones import said_hash
from memstrata.memory.timeparse import parse_timestamp

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore


# ---- helpers --------------------------------------------------------------------------------------


def _meta_where(metadata: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(metadata, dict) or not all(isinstance(v, (str, int, float, bool)) for v in metadata.values()):
        msg = f"metadata filter must map names to strings, numbers or booleans, got {metadata!r}"
        raise ValueError(msg)
    return {meta_key(k): v for k, v in metadata.items()}


def _check_kind(kind: str) -> None:
    get_level(kind)  # a clear error naming the registered kinds


def _time(value: datetime | str | None, name: str) -> datetime | None:
    if value is None:
        return None
    parsed = parse_timestamp(value)
    if parsed is None:
        msg = f"{name}: could not read {value!r} as a time"
        raise ValueError(msg)
    return parsed


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts).isoformat() if ts is not None else None  # stored naive


def _shown(record: Any) -> dict[str, Any]:
    payload = record.payload
    keep = ("speaker", "session_id", "position", "subject", "superseded_by", "episode_id", "dimension")
    return {
        "id": record.unit_id,
        "kind": record.kind,
        "conversation_id": record.metadata["conversation_id"],
        "text": record.document,
        "time": payload.get("timestamp_raw") or payload.get("timestamp"),
        **{k: payload[k] for k in keep if k in payload},
        **({"metadata": payload["meta"]} if payload.get("meta") else {}),
        "unit": payload,
    }


def _as_messages(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """Stored turns as messages that put each back in its place, with its id, time and metadata."""
    return [
        {
            "speaker": t.speaker,
            "text": t.text,
            "session": t.session_id,
            "position": t.position,
            "id": t.id,
            **({"timestamp": t.timestamp_raw or t.timestamp.isoformat()} if t.timestamp else {}),
            **({"image_caption": t.image_caption} if t.image_caption else {}),
            **({"metadata": t.meta} if t.meta else {}),
        }
        for t in turns
    ]


class Memories:
    """The single-memory management of one store, owned by the facade (its ``update`` and the others call it).

    Args:
        store: gives the store (the facade's, opened again after a close).
        ingest: writes messages as :meth:`memstrata.Memstrata.ingest` does (a rebuilt session is ingested again).
    """

    def __init__(self, store: Callable[[], MemoryStore], ingest: Callable[..., dict[str, Any]]) -> None:
        self._store = store
        self._ingest = ingest

    @property
    def store(self) -> MemoryStore:
        """The store the memories are in."""
        return self._store()

    def conversations(self, *, user_id: str) -> list[dict[str, Any]]:
        """The user's conversations: id, how many turns and sessions, first and last time."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.store.get(raw_kind(), user_id=user_id):
            conv = r.metadata["conversation_id"]
            row = out.setdefault(
                conv, {"conversation_id": conv, "turns": 0, "sessions": set(), "first": None, "last": None}
            )
            row["turns"] += 1
            row["sessions"].add(r.metadata.get("session_id"))
            ts = r.metadata.get("ts")
            if ts is not None:
                row["first"] = ts if row["first"] is None else min(row["first"], ts)
                row["last"] = ts if row["last"] is None else max(row["last"], ts)
        return [
            {**row, "sessions": len(row["sessions"]), "first": _iso(row["first"]), "last": _iso(row["last"])}
            for _, row in sorted(out.items())
        ]

    def memories(
        self,
        *,
        user_id: str,
        kind: str = "turn",
        conversation_id: str | None = None,
        speaker: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        metadata: dict[str, Any] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """One page of the user's memories of one kind, in time order, filtered by conversation, speaker, time and
        the ``metadata`` the app attached at write time (every name equal; a unit built from turns matches when one
        of its turns does).
        """
        _check_kind(kind)
        if limit < 1 or offset < 0:
            msg = f"limit must be at least 1 and offset at least 0, got limit={limit}, offset={offset}"
            raise ValueError(msg)
        lo, hi = _time(since, "since"), _time(until, "until")
        where: dict[str, Any] = {"speaker": speaker} if speaker is not None and kind == raw_kind() else {}
        if metadata and kind == raw_kind():
            where.update(_meta_where(metadata))
        rows = [
            r
            for r in self.store.get(kind, user_id=user_id, conversation_id=conversation_id, where=where or None)
            if (lo is None or (r.metadata.get("ts") or float("-inf")) >= lo.timestamp())
            and (hi is None or (r.metadata.get("ts") or float("inf")) <= hi.timestamp())
        ]
        if metadata and kind != raw_kind():
            rows = self._built_from(user_id, conversation_id, rows, metadata)
        rows.sort(
            key=lambda r: (
                r.metadata["conversation_id"],
                r.metadata.get("ts") or 0.0,
                str(r.metadata.get("session_id")),
                r.payload.get("position", 0),
                r.unit_id,
            )
        )
        return [_shown(r) for r in rows[offset : offset + limit]]

    def memory(
        self, memory_id: str, *, user_id: str, kind: str = "turn", conversation_id: str | None = None
    ) -> dict[str, Any]:
        """One memory by id (in every conversation of the user unless one is named).

        Raises:
            LookupError: no such memory, or the id names one in several conversations and none was given.
        """
        _check_kind(kind)
        found = self.store.get(kind, user_id=user_id, conversation_id=conversation_id, unit_ids=[memory_id])
        if not found:
            msg = f"no {kind} {memory_id!r} for user {user_id!r}" + (
                f" in {conversation_id!r}" if conversation_id else ""
            )
            raise LookupError(msg)
        if len(found) > 1:
            convs = sorted(r.metadata["conversation_id"] for r in found)
            msg = f"{kind} {memory_id!r} is in several conversations {convs}; pass conversation_id"
            raise LookupError(msg)
        return _shown(found[0])

    def update(self, turn_id: str, text: str, *, user_id: str, conversation_id: str) -> dict[str, Any]:
        """Replace what a turn says; everything built from it is removed and rebuilt from the session's turns."""
        if not text.strip():
            msg = "the new text is empty: delete the turn instead"
            raise ValueError(msg)
        old = Turn.model_validate(self.memory(turn_id, user_id=user_id, conversation_id=conversation_id)["unit"])
        new = old.model_copy(update={"text": text})
        close = self._closed(user_id, conversation_id, old.session_id)
        # The old words are buried first (a re-send of them while this runs is refused), the new ones unburied (an
        # update back to an earlier text is kept).
        self.store.tombstones.bury([old], event="update")
        self.store.tombstones.lift(user_id, conversation_id, [turn_id], said=said_hash(new))
        removed = self._remove(user_id, conversation_id, [turn_id])
        self.rebuild_sessions(
            {old.session_id}, user_id=user_id, conversation_id=conversation_id, close=close, extra=[new]
        )
        self._journal(user_id, conversation_id, "update", turn_id, before=old.text, after=text)
        return {"updated": turn_id, "removed": removed}

    def delete(self, turn_id: str | None = None, *, user_id: str, conversation_id: str) -> dict[str, int]:
        """Delete one turn (and what was built from it, the rest of its session rebuilt), or with no ``turn_id`` the
        whole conversation. Returns the units removed per kind.

        Raises:
            LookupError: the conversation or the turn is not stored for this user.
        """
        if turn_id is None:
            turns = [
                Turn.model_validate(r.payload)
                for r in self.store.get(raw_kind(), user_id=user_id, conversation_id=conversation_id)
            ]
            if not turns:
                msg = f"no conversation {conversation_id!r} for user {user_id!r}"
                raise LookupError(msg)
            ids = [t.id for t in turns]
            self.store.tombstones.bury(turns, event="delete")
            removed = self._remove(user_id, conversation_id, ids)
            self.store.sequences.delete(user_id=user_id, conversation_id=conversation_id)
            self._journal(user_id, conversation_id, "delete_conversation", None, before=f"{len(ids)} turns", after=None)
            return removed
        old = Turn.model_validate(self.memory(turn_id, user_id=user_id, conversation_id=conversation_id)["unit"])
        close = self._closed(user_id, conversation_id, old.session_id)
        self.store.tombstones.bury([old], event="delete")  # before the turn goes: no re-send in between brings it back
        removed = self._remove(user_id, conversation_id, [turn_id])
        self.rebuild_sessions({old.session_id}, user_id=user_id, conversation_id=conversation_id, close=close)
        # The deleted words are not journaled: history says which turn went and when, never what it said.
        self._journal(user_id, conversation_id, "delete", turn_id, before=None, after=None)
        return removed

    def history(self, *, user_id: str, conversation_id: str | None = None) -> list[dict[str, Any]]:
        """What was updated or deleted, oldest first: {at, event, conversation_id, turn_id, before, after}; ``at`` is
        an ISO-8601 time in UTC.
        """
        events = [
            json.loads(str(r.fields["event"]))
            for r in self.store.journal.get(user_id=user_id, conversation_id=conversation_id)
        ]
        events.sort(key=lambda e: (e["at"], e.get("turn_id") or ""))
        return [{**e, "at": datetime.fromtimestamp(e["at"], UTC).isoformat(timespec="microseconds")} for e in events]

    def _built_from(
        self, user_id: str, conversation_id: str | None, rows: list[Any], metadata: dict[str, Any]
    ) -> list[Any]:
        """The units among ``rows`` built from at least one turn whose metadata matches."""
        turns = self.store.get(
            raw_kind(), user_id=user_id, conversation_id=conversation_id, where=_meta_where(metadata)
        )
        match = {(r.metadata["conversation_id"], r.unit_id) for r in turns}
        unit = get_level(rows[0].kind).unit if rows else None
        return [
            r
            for r in rows
            if unit is not None
            and any(
                (r.metadata["conversation_id"], t) in match for t in unit.model_validate(r.payload).linked_turn_ids()
            )
        ]

    def _closed(self, user_id: str, conversation_id: str, session_id: str) -> bool:
        """Whether the session has no open episode (its tail was closed): a rebuild closes it again."""
        return not any(
            str(r.metadata.get("session_id")) == session_id for r in open_episodes(self.store, user_id, conversation_id)
        )

    def _remove(self, user_id: str, conversation_id: str, turn_ids: list[str]) -> dict[str, int]:
        removed = self.store.delete_turns(user_id, conversation_id, turn_ids)
        gone = set(turn_ids)
        items = [
            row.key
            for row in self.store.items.get(user_id=user_id, conversation_id=conversation_id)
            if (ids := set(json.loads(str(row.fields.get("turn_ids", "[]"))))) and ids <= gone
        ]  # all its messages
        removed["items"] = self.store.items.delete(user_id=user_id, keys=items) if items else 0
        return removed

    def replay(self, *, user_id: str, conversation_id: str, **overrides: Any) -> dict[str, Any]:
        """Write a conversation's stored turns again, unchanged: nothing new is added, and every stage builds what it
        lacks (how a stopped write resumes; with ``tiers=True``, how records written while tiers were off are scored).
        """
        turns = sorted(
            (
                Turn.model_validate(r.payload)
                for r in self.store.get(raw_kind(), user_id=user_id, conversation_id=conversation_id)
            ),
            key=lambda t: (t.session_id, t.position),
        )
        if not turns:
            return {}
        payload = {"conversation_id": conversation_id, "messages": _as_messages(turns)}
        return self._ingest(payload, user_id=user_id, stamp_untimed=False, **overrides)

    def rebuild_sessions(
        self,
        sessions: set[str],
        *,
        user_id: str,
        conversation_id: str,
        close: bool,
        extra: Sequence[Turn] = (),
    ) -> None:
        """Ingest the sessions' remaining turns (and ``extra``) again: each keeps its place; the units built from the
        removed turns are rebuilt from what remains (closed again if they were closed).
        """
        read = read_sessions(self.store, user_id, [[conversation_id, s] for s in sorted(sessions)])
        turns = sorted(
            [*(t for stored, _ in read.values() for t in stored), *extra], key=lambda t: (t.session_id, t.position)
        )
        if not turns:
            return
        messages = _as_messages(turns)
        # An untimed turn stays untimed: the rebuild is not a new write of it.
        self._ingest(
            {"conversation_id": conversation_id, "messages": messages},
            user_id=user_id,
            close=close,
            stamp_untimed=False,
        )

    def _journal(
        self,
        user_id: str,
        conversation_id: str,
        event: str,
        turn_id: str | None,
        *,
        before: str | None,
        after: str | None,
    ) -> None:
        at = time.time()
        entry = {
            "at": at,
            "event": event,
            "conversation_id": conversation_id,
            "turn_id": turn_id,
            "before": before,
            "after": after,
        }
        key = f"{at:.6f}\x1f{conversation_id}\x1f{turn_id or ''}"
        self.store.journal.upsert([TableRow(key, user_id, conversation_id, {"event": json.dumps(entry)})])
