"""The memory model: every unit memstrata stores, with its links and provenance.

All units carry ``user_id`` (the isolation boundary) and ``conversation_id``
(a filter inside one user). Ids are deterministic: the input's own ids are kept
where it has them; otherwise they are derived from (session, position), so
re-ingesting the same input writes the same ids and adds nothing.

Example:
    >>> t = Turn(user_id="u1", conversation_id="c1", session_id="1", position=0,
    ...          speaker="Ann", text="Hi!")
    >>> t.id
    's1:t0'
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator


class UnitKind(StrEnum):
    """One Chroma collection per kind."""

    TURN = "turn"
    CONTEXT = "turn_context"
    EPISODE = "episode"
    SUMMARY = "summary"
    FACT = "fact"
    THEME = "theme"
    PERSONA = "persona"
    TREE_NODE = "tree_node"
    ENTITY = "entity"


class Tier(StrEnum):
    """HMO tiers; every unit defaults to the archive until scored."""

    CACHE = "cache"
    BUFFER = "buffer"
    ARCHIVE = "archive"


def stable_hash(*parts: str, length: int = 16) -> str:
    """A short, stable hash of the parts (used for storage keys and derived ids)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return digest[:length]


class Unit(BaseModel):
    """Fields shared by every stored unit."""

    user_id: str
    conversation_id: str = "default"
    timestamp: datetime | None = None
    timestamp_raw: str | None = None
    # HMO tier metadata; filled by the tiering stage, harmless defaults before it.
    importance: float = 5.0
    recall_count: int = 0
    last_access: datetime | None = None
    tier: Tier = Tier.ARCHIVE

    @field_validator("user_id")
    @classmethod
    def _user_required(cls, value: str) -> str:
        if not value or not value.strip():
            msg = "user_id must be a non-empty string: it is the tenant boundary"
            raise ValueError(msg)
        return value


class Turn(Unit):
    """One raw message, verbatim."""

    session_id: str
    position: int = Field(ge=0, description="0-based index of the turn inside its session")
    speaker: str
    text: str
    image_caption: str | None = None
    source_id: str | None = Field(default=None, description="The input's own id, e.g. LoCoMo 'D3:7'")
    id: str = ""

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


class TurnContext(Unit):
    """A turn read together with its neighbours in the session: the contextual view search embeds.

    A reply like "Went swimming with the kids!" says little alone; next to the
    question it answers, its vector and its words match what it is about. One
    record per turn, linked by ``turn_id``; the turn itself stays verbatim.
    """

    turn_id: str
    session_id: str
    text: str = Field(description="The rendered previous, own and next turn of the session, one per line")
    id: str = ""

    @model_validator(mode="after")
    def _derive_id(self) -> TurnContext:
        if not self.id:
            self.id = "ctx:" + self.turn_id
        return self


class Episode(Unit):
    """Level-2: contiguous turns on one topic, kept verbatim."""

    session_id: str
    turn_ids: list[str]
    start_position: int
    end_position: int
    text: str = Field(description="The verbatim turns, one rendered turn per line")
    summary_id: str = ""
    id: str = ""

    @model_validator(mode="after")
    def _derive_id(self) -> Episode:
        if not self.id:
            self.id = f"ep:s{self.session_id}:{self.start_position}-{self.end_position}"
        if not self.summary_id:
            self.summary_id = "sum:" + self.id.removeprefix("ep:")
        return self


class EventSummary(Unit):
    """Level-1: a dense summary of exactly one episode; this is what is searched first."""

    episode_id: str
    session_id: str
    text: str
    participants: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    turn_ids: list[str] = Field(default_factory=list)
    method: str = Field(default="extractive", description="'extractive' or 'llm'")
    id: str = ""

    @model_validator(mode="after")
    def _derive_id(self) -> EventSummary:
        if not self.id:
            self.id = "sum:" + self.episode_id.removeprefix("ep:")
        return self


class Fact(Unit):
    """An atomic, persistent statement (xMemory semantic / Bi-Mem fact)."""

    id: str
    text: str
    entities: list[str] = Field(default_factory=list)
    turn_ids: list[str] = Field(default_factory=list)
    episode_id: str | None = None


class Theme(Unit):
    """A cluster of facts (xMemory theme / Bi-Mem scene) with a calibration note."""

    id: str
    summary: str
    fact_ids: list[str] = Field(default_factory=list)
    calibration: str = ""


class Persona(Unit):
    """A profile of one speaker or entity (Bi-Mem's five dimensions)."""

    id: str
    subject: str
    dimensions: dict[str, str] = Field(default_factory=dict)
    source_ids: list[str] = Field(default_factory=list)


class TreeNode(Unit):
    """A day/week/month/year consolidation node of H-Mem's temporal tree."""

    id: str
    level: str
    period: str
    summary: str
    child_ids: list[str] = Field(default_factory=list)


class Entity(Unit):
    """A resolved entity with its labelled relations."""

    id: str
    name: str
    aliases: list[str] = Field(default_factory=list)
    relations: list[dict[str, Any]] = Field(default_factory=list)
    turn_ids: list[str] = Field(default_factory=list)


class Session(BaseModel):
    """A normalized session: its turns in order and the session time."""

    session_id: str
    timestamp: datetime | None = None
    timestamp_raw: str | None = None
    turns: list[Turn]


class Conversation(BaseModel):
    """A normalized conversation, ready to segment."""

    user_id: str
    conversation_id: str
    sessions: list[Session]
    source: str = ""
    warnings: list[str] = Field(default_factory=list)

    @property
    def turn_count(self) -> int:
        return sum(len(s.turns) for s in self.sessions)
