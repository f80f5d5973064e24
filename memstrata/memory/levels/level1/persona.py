"""Persona: what a conversation says about one speaker, along Bi-Mem's five dimensions (§4.1, Eq. 7).

One unit is one version of one dimension of one speaker: ``basic_info`` (name, age, work, where they live),
``interests`` (hobbies, likes, dislikes), ``personality`` (traits, emotional patterns), ``values`` (beliefs,
motivations) or ``relationships`` (the people in their life). It holds items, each a statement with its
provenance: the fact it comes from, that fact's theme and raw turns. Nothing is in a persona that no stored fact
says.

Versions are history, never rewritten: when the speaker's facts change (a new closed episode, a fact superseded),
the dimension is rebuilt at the next write; if its items differ, the new version starts at the memory time of the
facts it was built from and the previous one ends there (``valid_to``). A point-in-time read picks the version
valid then (:func:`memstrata.memory.persona.versions.valid_at`).

Ids are ``persona:<speaker>:<dimension>:<version>``. The kind is loaded into the search snapshot but no scope ranks
it as a Level-1 event: a question takes the persona path (:mod:`memstrata.memory.search.persona`).

Example:
    >>> p = Persona(
    ...     user_id="u",
    ...     speaker="Ann",
    ...     dimension="basic_info",
    ...     version=2,
    ...     items=[PersonaItem(text="Ann moved to Lisbon.", fact_id="fact:s2:0-3:0", turn_ids=["s2:1"])],
    ... )
    >>> p.id, p.current, p.linked_turn_ids()
    ('persona:ann:basic_info:2', True, ['s2:1'])
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.models import Unit

DIMENSIONS = ("basic_info", "interests", "personality", "values", "relationships")


class PersonaItem(BaseModel):
    """One statement of a dimension and where it comes from."""

    text: str
    fact_id: str = Field(description="the stored fact it states (offline: the fact itself)")
    fact_ids: list[str] = Field(default_factory=list, description="further facts that say the same (recurrence)")
    theme_id: str = Field(default="", description="the theme (scene) holding the fact")
    turn_ids: list[str] = Field(default_factory=list, description="the raw turns the facts come from")
    score: float = 0.0


def speaker_key(name: str) -> str:
    """The id-safe form of a speaker's name: ``"Ann Lee"`` -> ``"ann_lee"``."""
    return re.sub(r"[^0-9a-z]+", "_", name.casefold()).strip("_") or "speaker"


class Persona(Unit):
    """One version of one persona dimension of one speaker."""

    speaker: str
    dimension: str
    version: int = Field(ge=1)
    items: list[PersonaItem] = Field(default_factory=list)
    text: str = Field(default="", description="the items, as one line")
    valid_from: datetime | None = None
    valid_to: datetime | None = Field(default=None, description="when the next version replaced it (history)")
    basis: str = Field(default="", description="a digest of the facts it was built from: a change marks it stale")
    built_from: int = Field(default=0, ge=0, description="the speaker's current facts when it was built")
    excluded: list[str] = Field(default_factory=list, description="fact ids a user removed from this dimension")
    method: str = Field(default="extractive", description="'extractive' (offline) or 'llm'")

    @model_validator(mode="after")
    def _derive(self) -> Persona:
        if self.dimension not in DIMENSIONS:
            msg = f"persona dimension must be one of {DIMENSIONS}, not {self.dimension!r}"
            raise ValueError(msg)
        if not self.id:
            self.id = f"persona:{speaker_key(self.speaker)}:{self.dimension}:{self.version}"
        if not self.text:
            self.text = " ".join(i.text.strip() for i in self.items)
        return self

    @property
    def current(self) -> bool:
        """False once a newer version replaced it (it stays as history)."""
        return self.valid_to is None

    def linked_turn_ids(self) -> list[str]:
        """The raw turns its items cite, each once, in order."""
        return list(dict.fromkeys(t for i in self.items for t in i.turn_ids))

    def span(self) -> tuple[datetime | None, datetime | None]:
        """From ``valid_from`` to ``valid_to`` (to ``valid_from`` while no later version replaced it)."""
        return self.valid_from, self.valid_to or self.valid_from

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its speaker, dimension, version, whether it is current and its method."""
        return {
            **super().metadata(),
            "speaker": self.speaker,
            "dimension": self.dimension,
            "version": self.version,
            "current": self.current,
            "method": self.method,
        }


PERSONA = register(
    Level(
        kind="persona",
        unit=Persona,
        role="event",
        scopes=(),
        lends_prior=False,
        description="persona: Bi-Mem's five dimensions per speaker, each a versioned list of items "
        "citing facts; read by the persona path, never ranked as a Level-1 event",
    )
)
