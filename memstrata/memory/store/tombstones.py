"""Tombstones: what a user deleted or replaced stays that way, whoever writes the same message again.

A deleted turn leaves a tombstone (its id and two hashes of its content, never the text); an updated turn leaves
one for the text it had. Every write reads the conversation's tombstones before it places a single message
(:func:`drop_buried`, called by the first ingestion stage), so the middleware's re-sends of a checkpointed thread, a
re-ingest of the same file (a nightly sync) or the store adapter never bring back what was deleted, nor undo an
update. A message is the buried one when:

- it carries an id (its own, or a place it names) and that id was deleted, or updated away from the same words
  (speaker and text: a re-send's time may differ from the stored one);
- it carries no id and has the same speaker, text and time as a buried turn (how a re-ingested message without
  an id is recognised, see :mod:`memstrata.memory.placement`).

A message without an id written with no time of its own gets the write's time (``Context.stamp_untimed``), so
saying the same words again later is a new message, never mistaken for a deleted one.

Example:
    >>> graves = Tombstones(open_table("tombstones", path=Path("/tmp/memstrata-doc-tomb"), client=None))
    >>> graves.delete(user_id="ann")  # doctest: +ELLIPSIS
    0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path  # noqa: F401 - used by the doctest

from memstrata.memory.conversation import Conversation, Session
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.store import tenant
from memstrata.memory.store.tables import Table, TableRow, open_table  # noqa: F401 - open_table: the doctest

_KIND = "tombstone"


def said_hash(turn: Turn) -> str:
    """Who said what, whatever the time (how a re-sent message with an id is compared)."""
    return tenant.stable_hash("said", turn.speaker, turn.text, length=32)


def content_hash(turn: Turn) -> str:
    """Who said what, when (how a re-sent message without an id is recognised)."""
    when = f"{turn.timestamp.timestamp():.6f}" if turn.timestamp is not None else ""
    return tenant.stable_hash("content", turn.speaker, turn.text, when, length=32)


@dataclass(frozen=True)
class Graves:
    """A conversation's tombstones, as the sets a write is checked against."""

    deleted_ids: frozenset[str] = frozenset()
    replaced: frozenset[tuple[str, str]] = frozenset()  # (turn id, said hash) of texts updated away
    contents: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.deleted_ids or self.replaced or self.contents)

    def holds(self, turn: Turn, *, identified: bool) -> bool:
        """Whether ``turn`` is a buried one (``identified``: it carries an id or names its place)."""
        if identified:
            return turn.id in self.deleted_ids or (turn.id, said_hash(turn)) in self.replaced
        return content_hash(turn) in self.contents


class Tombstones:
    """The tombstone rows of every user, in the store's table backend (beside the journal)."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def bury(self, turns: Iterable[Turn], *, event: str) -> int:
        """Leave a tombstone for each turn: ``event`` is ``"delete"`` or ``"update"`` (its old text replaced)."""
        if event not in ("delete", "update"):
            msg = f"a tombstone's event is 'delete' or 'update', got {event!r}"
            raise ValueError(msg)
        at = datetime.now(UTC).isoformat(timespec="seconds")
        rows = [
            TableRow(
                tenant.storage_key(t.user_id, t.conversation_id, f"{t.id}\x1f{said_hash(t)}", namespace="tomb"),
                t.user_id,
                t.conversation_id,
                {
                    "kind": _KIND,
                    "event": event,
                    "turn_id": t.id,
                    "said": said_hash(t),
                    "content": content_hash(t),
                    "at": at,
                },
            )
            for t in turns
        ]
        return self.table.upsert(rows) if rows else 0

    def lift(self, user_id: str, conversation_id: str, turn_ids: Sequence[str], *, said: str | None = None) -> int:
        """Forget the tombstones of these turn ids (only those of the words ``said``, when given): a deliberate
        write of them again (the store adapter's put, an update back to an earlier text) is kept.
        """
        wanted = set(turn_ids)
        keys = [
            r.key
            for r in self.table.get(user_id=user_id, conversation_id=conversation_id, match={"kind": _KIND})
            if r.fields.get("turn_id") in wanted and (said is None or r.fields.get("said") == said)
        ]
        return self.table.delete(user_id=user_id, keys=keys) if keys else 0

    def graves(self, user_id: str, conversation_id: str) -> Graves:
        """The conversation's tombstones."""
        rows = self.table.get(user_id=user_id, conversation_id=conversation_id, match={"kind": _KIND})
        return Graves(
            deleted_ids=frozenset(str(r.fields["turn_id"]) for r in rows if r.fields.get("event") == "delete"),
            replaced=frozenset(
                (str(r.fields["turn_id"]), str(r.fields["said"])) for r in rows if r.fields.get("event") == "update"
            ),
            contents=frozenset(str(r.fields["content"]) for r in rows),
        )

    def delete(self, *, user_id: str) -> int:
        """Drop a user's tombstones: a user forgotten entirely."""
        return self.table.delete(user_id=user_id)


def drop_buried(conv: Conversation, graves: Graves) -> tuple[Conversation, int]:
    """The conversation without the messages its tombstones hold, and how many were dropped.

    A message placed by the input (an explicit position or its own id) is judged by its id; one to be appended
    without an id, by its speaker, text and time. A session left empty goes.
    """
    if not graves:
        return conv, 0
    sessions, dropped = [], 0
    for session in conv.sessions:
        loose = set(session.unplaced)
        kept = [
            (i, t)
            for i, t in enumerate(session.turns)
            if not graves.holds(t, identified=bool(t.source_id) or i not in loose)
        ]
        dropped += len(session.turns) - len(kept)
        if kept:
            sessions.append(_keep(session, kept))
    return conv.model_copy(update={"sessions": sessions}), dropped


def _keep(session: Session, kept: list[tuple[int, Turn]]) -> Session:
    if len(kept) == len(session.turns):
        return session
    loose = set(session.unplaced)
    return session.model_copy(
        update={"turns": [t for _, t in kept], "unplaced": [k for k, (i, _) in enumerate(kept) if i in loose]}
    )
