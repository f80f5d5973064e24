"""What every stored unit shares: the tenant fields, the id, and the links a kind declares.

The unit kinds themselves (turns, turn contexts, episodes, summaries, and any
kind a later module adds) live in :mod:`memstrata.memory.levels`, one module
each. All units carry ``user_id`` (the isolation boundary) and
``conversation_id`` (a filter inside one user). Ids are deterministic: the
input's own ids are kept where it has them; otherwise they are derived from
(session, position), so re-ingesting the same input writes the same ids.

Example:
    >>> from memstrata.memory.levels.level2.turn import Turn
    >>> Turn(user_id="u1", session_id="1", position=0, speaker="Ann", text="Hi").linked_turn_ids()
    ['s1:t0']
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, field_validator


class Unit(BaseModel):
    """Fields and links shared by every stored unit.

    A kind overrides the link methods below; the search snapshot, the store and
    the trace read them and nothing kind-specific.
    """

    user_id: str
    conversation_id: str = "default"
    timestamp: datetime | None = None
    timestamp_raw: str | None = None
    id: str = ""

    @field_validator("user_id")
    @classmethod
    def _user_required(cls, value: str) -> str:
        if not value or not value.strip():
            msg = "user_id must be a non-empty string: it is the tenant boundary"
            raise ValueError(msg)
        return value

    def embed_text(self) -> str:
        """The text that is embedded and BM25-indexed."""
        return str(getattr(self, "text", ""))

    def linked_turn_ids(self) -> list[str]:
        """The raw turns this unit stands for (its evidence)."""
        return list(getattr(self, "turn_ids", []))

    def parent_ids(self) -> list[str]:
        """Units one level up that contain this one."""
        return []

    def child_ids(self) -> list[str]:
        """Units one level down that this one contains."""
        return []

    def span(self) -> tuple[datetime | None, datetime | None]:
        """The time this unit covers (``None`` when the input had no time)."""
        return self.timestamp, self.timestamp

    def metadata(self) -> dict[str, Any]:
        """Scalar fields stored beside the unit for filtering (``None`` values are dropped)."""
        start, _ = self.span()
        session = getattr(self, "session_id", None)
        # session_key lets one read fetch whole sessions across conversations (the bounded search path)
        return {
            "session_id": session,
            "session_key": f"{self.conversation_id}/{session}" if session else None,
            "ts": start.timestamp() if start else None,
        }
