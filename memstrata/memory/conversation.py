"""The normalized input the ingestion graph reads: conversations of sessions of turns.

Example:
    >>> from memstrata.memory.levels.level2.turn import Turn
    >>> s = Session(session_id="1", turns=[Turn(user_id="u1", session_id="1", position=0, speaker="Ann", text="Hi")])
    >>> Conversation(user_id="u1", conversation_id="c1", sessions=[s]).turn_count
    1
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from memstrata.memory.levels.level2.turn import Turn


class Session(BaseModel):
    """A normalized session: its turns in order and the session time."""

    session_id: str
    timestamp: datetime | None = None
    timestamp_raw: str | None = None
    turns: list[Turn]
    unplaced: list[int] = Field(
        default_factory=list,
        description=(
            "indexes of turns that came without a position: their positions here are provisional, and the write "
            "appends them after the session's stored turns (memstrata.memory.placement)"
        ),
    )


class Conversation(BaseModel):
    """A normalized conversation, ready to store."""

    user_id: str
    conversation_id: str
    sessions: list[Session]
    source: str = ""
    warnings: list[str] = Field(default_factory=list)

    @property
    def turn_count(self) -> int:
        """How many turns its sessions hold."""
        return sum(len(s.turns) for s in self.sessions)


def session_order(session_id: str) -> tuple[int, str]:
    """The sort key of a session id: numbered sessions in numeric order, then any other id.

    Example:
        >>> sorted(["10", "x", "2"], key=session_order)
        ['2', '10', 'x']
    """
    return (int(session_id), "") if session_id.isdigit() else (1 << 30, session_id)
