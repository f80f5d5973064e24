"""Where the next message of a conversation goes: per session, the next free position and the latest time.

A message written without a position (a chat app's append) takes the next position
of its session from here, reserved atomically (:meth:`Table.reserve`), so two
processes appending to one conversation never get the same one. A message without
an id but with a time also claims its place under its speaker, text and time
(:meth:`Sequences.claim_places`), so the same message written twice at once is stored once. A write that
places its turns itself (a LoCoMo file, an explicit ``position``) moves the
counter past them, so later appends follow. The latest time of each session is
what decides whether the next message continues it or starts a new one.

Example:
    >>> import tempfile
    >>> seq = Sequences(open_table("sequences", path=Path(tempfile.mkdtemp()), client=None))
    >>> seq.delete(user_id="ann")  # a fresh folder: nothing to delete
    0
    >>> seq.reserve("ann", "c1", "1", 2, floor=0), seq.reserve("ann", "c1", "1", 1, floor=0)
    (0, 2)
    >>> seq.sessions("ann", "c1")["1"].next
    3
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path  # noqa: F401 - used by the doctest
from typing import Any

from memstrata.memory.store import tenant
from memstrata.memory.store.tables import COUNTER_FIELD, Table, TableRow, open_table  # noqa: F401

_KIND = "session"


@dataclass(frozen=True)
class SessionMark:
    """One stored session of a conversation: its next free position and its latest message time."""

    session_id: str
    next: int
    latest: float | None  # seconds since the epoch; None when no message of it had a time


def _mark(row: TableRow) -> SessionMark:
    """The session counter a row of this table holds."""
    latest = row.fields.get("latest")
    return SessionMark(
        str(row.fields["session_id"]),
        int(row.fields.get(COUNTER_FIELD) or 0),
        float(latest) if latest is not None else None,
    )


class Sequences:
    """Per-session position counters and latest times, in the store's table backend."""

    def __init__(self, table: Table) -> None:
        self.table = table

    @staticmethod
    def _row(user_id: str, conversation_id: str, session_id: str, **fields: Any) -> TableRow:
        key = tenant.storage_key(user_id, conversation_id, session_id, namespace="seq")
        return TableRow(key, user_id, conversation_id, {"kind": _KIND, "session_id": session_id, **fields})

    def sessions(self, user_id: str, conversation_id: str) -> dict[str, SessionMark]:
        """The conversation's sessions that have a counter, by id."""
        rows = self.table.get(user_id=user_id, conversation_id=conversation_id, match={"kind": _KIND})
        return {str(r.fields["session_id"]): _mark(r) for r in rows}

    def reserve(
        self, user_id: str, conversation_id: str, session_id: str, n: int, *, floor: int, latest: datetime | None = None
    ) -> int:
        """The first of ``n`` positions of the session that no other writer gets (``floor`` or later)."""
        fields = {"latest": latest.timestamp()} if latest is not None else {}
        return self.table.reserve(self._row(user_id, conversation_id, session_id, **fields), n, floor=floor)

    def advance(
        self, user_id: str, conversation_id: str, session_id: str, past: int, latest: datetime | None = None
    ) -> None:
        """Turns were written up to position ``past - 1``: later appends start after them."""
        self.reserve(user_id, conversation_id, session_id, 0, floor=past, latest=latest)

    def claim_places(
        self, user_id: str, conversation_id: str, wanted: list[tuple[str, str, int]]
    ) -> list[tuple[str, int]]:
        """``(message key, session, position)`` proposals -> the place each message has: the first writer's.

        A message without an id is known by its speaker, text and time (``key``); two writers that append
        the same one at the same moment each propose a place, and both end up with the one claimed first.
        """
        rows = [
            TableRow(
                tenant.storage_key(user_id, conversation_id, key, namespace="msg"),
                user_id,
                conversation_id,
                {"kind": "message", "session_id": session, "position": position},
            )
            for key, session, position in wanted
        ]
        return (
            [
                (str(r.fields["session_id"]), int(r.fields["position"]))  # type: ignore[arg-type]
                for r in self.table.claim(rows)
            ]
            if rows
            else []
        )

    def delete(self, *, user_id: str, conversation_id: str | None = None) -> int:
        """Forget the counters of a user (or of one of its conversations); the number of rows removed."""
        if conversation_id is None:
            return self.table.delete(user_id=user_id)
        keys = [r.key for r in self.table.get(user_id=user_id, conversation_id=conversation_id)]
        return self.table.delete(user_id=user_id, keys=keys) if keys else 0
