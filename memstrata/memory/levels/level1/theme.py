"""Themes: a conversation's facts grouped by what they are about (xMemory's themes, Bi-Mem's scenes).

A theme holds the ids of its member facts (``fact_ids``), a text (offline: its most central facts, in
order of centrality, within ``Context.themes.words``; with a model, a summary of them) and, as provenance,
the raw turns its facts come from (``turn_ids``: deleting any of them drops the theme, and the next
ingest of the conversation groups its facts again). Its vector is the centroid of its members'
vectors. Grouping and maintenance live in :mod:`memstrata.memory.themes`; ids are ``theme:<n>`` per
conversation and stay with a theme as it grows. When a member fact is superseded the theme is stale: the next
write rebuilds its text from its current facts and keeps the old text in ``history`` with its dates. With a
model, Bi-Mem's reflective calibration appends compensatory conditions (``calibrations``) and never rewrites.

Example:
    >>> t = Theme(user_id="u", n=3, text="Ann adopted a cat named Miso.", fact_ids=["fact:s1:0-3:0"])
    >>> t.id, t.size
    ('theme:3', 1)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.models import Unit


class Theme(Unit):
    """One group of a conversation's facts, with its text and the turns its central facts come from."""

    n: int = Field(ge=0, description="the theme's number within its conversation")
    text: str = Field(description="offline: its most central facts; with a model: a summary of them")
    fact_ids: list[str] = Field(default_factory=list, description="member facts, most central first")
    turn_ids: list[str] = Field(default_factory=list, description="raw turns its member facts come from")
    end: datetime | None = Field(default=None, description="the latest member's time (timestamp: the earliest)")
    method: str = Field(default="extractive", description="'extractive' or 'llm'")
    superseded_ids: list[str] = Field(
        default_factory=list,
        description=(
            "members that were superseded when the text was built: when another is, the theme is stale and rebuilt"
        ),
    )
    history: list[dict[str, Any]] = Field(
        default_factory=list,
        description=("earlier texts, oldest first: {text, valid_from, valid_to} (a rebuilt theme keeps what it said)"),
    )
    calibrations: list[dict[str, Any]] = Field(
        default_factory=list,
        description=(
            "Bi-Mem Eq. 8, with a model: {speaker, persona, scene, condition} per check of the scene's form "
            "(``scene``) against the speaker's persona (``persona``: its basis), appended, never rewritten (an empty "
            "condition: the scene was consistent)"
        ),
    )

    @model_validator(mode="after")
    def _derive_id(self) -> Theme:
        if not self.id:
            self.id = f"theme:{self.n}"
        return self

    @property
    def size(self) -> int:
        """How many facts it groups."""
        return len(self.fact_ids)

    def child_ids(self) -> list[str]:
        """Its member facts."""
        return list(self.fact_ids)

    def embed_text(self) -> str:
        """The text with its compensatory conditions appended (Bi-Mem's s' = s + delta s)."""
        return " ".join([self.text, *(c["condition"] for c in self.calibrations if c.get("condition"))])

    def span(self) -> tuple[datetime | None, datetime | None]:
        """From its earliest member's time to its latest's."""
        return self.timestamp, self.end or self.timestamp

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its size and method."""
        return {**super().metadata(), "size": self.size, "method": self.method}


# Long and Mixed queries take the theme path: a theme gathers facts from across sessions, which a question about
# one recent moment (Short) does not need.
THEME = register(
    Level(
        kind="theme",
        unit=Theme,
        role="event",
        scopes=("Long", "Mixed"),
        lends_prior=False,
        description="themes: the conversation's facts grouped by what they are about (xMemory's "
        "themes, Bi-Mem's scenes); Long and Mixed queries search them through the "
        "theme path (Stage I and II, spreading), not ranked as Level-1 events",
    )
)
