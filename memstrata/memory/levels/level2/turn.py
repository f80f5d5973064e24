"""The raw kind: one message, verbatim (H-Mem's original fragment, HyMem's Level-2 text).

Example:
    >>> t = Turn(user_id="u1", conversation_id="c1", session_id="1", position=0, speaker="Ann", text="Hi!")
    >>> t.id, t.render()
    ('s1:t0', 'Ann: Hi!')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.models import Unit


class Turn(Unit):
    """One raw message, verbatim."""

    session_id: str
    position: int = Field(ge=0, description="0-based index of the turn inside its session")
    speaker: str
    text: str
    image_caption: str | None = None
    source_id: str | None = Field(default=None, description="The input's own id, e.g. LoCoMo 'D3:7'")
    meta: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description=("What the app attached at write time (a message's 'metadata'): filterable in listings"),
    )

    @model_validator(mode="after")
    def _derive_id(self) -> Turn:
        if not self.id:
            self.id = self.source_id or f"s{self.session_id}:t{self.position}"
        return self

    def render(self) -> str:
        """The text a reader sees: ``speaker: text`` plus any photo caption."""
        line = f"{self.speaker}: {self.text}"
        if self.image_caption:
            line += f" [shares a photo: {self.image_caption}]"
        return line

    def embed_text(self) -> str:
        """Its rendered line (:meth:`render`): speaker, text and any photo caption."""
        return self.render()

    @property
    def text_start(self) -> int:
        """Where its text starts in :meth:`render` (after ``"speaker: "``)."""
        return len(self.speaker) + 2

    def linked_turn_ids(self) -> list[str]:
        """Itself."""
        return [self.id]

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its position, speaker, source id and the app's metadata (``meta.`` keys)."""
        return {
            **super().metadata(),
            "position": self.position,
            "speaker": self.speaker,
            "source_id": self.source_id,
            **{meta_key(k): v for k, v in self.meta.items()},
        }


def meta_key(name: str) -> str:
    """The stored metadata key of an app's field ``name`` (kept apart from memstrata's own keys)."""
    return f"meta.{name}"


def changed_turns(turns: Sequence[Turn], stored: dict[str, str]) -> list[Turn]:
    """Turns that are new, or whose rendered text differs from what is stored."""
    return [t for t in turns if stored.get(t.id) != t.render()]


TURN = register(
    Level(
        kind="turn",
        unit=Turn,
        role="raw",
        scopes=("Short", "Mixed"),
        description="raw turns, verbatim (searched directly by Short and Mixed queries)",
    )
)
