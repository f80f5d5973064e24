"""Entities of H-Mem's entity-relation graph: one resolved person, place, pet or thing per conversation.

An entity is built by entity linking (:mod:`memstrata.memory.entity_graph.resolution`)
from the names its facts use; its id is ``ent:<slug of the canonical name>``.
Its profile follows H-Mem's entity profiles: ``attributes`` (fact ids of
persistent statements: what it is, has, likes, where it lives or works) and
``events`` (fact ids of the most recent things it did or that happened to it).
Relations between entities are edges in the edge store, each with its turns.
Entities are stored (and searched by name when a query seeds the graph), not
ranked by vectors: the stored vector is the mean of their facts' vectors.

Example:
    >>> e = Entity(user_id="u", name="Ann", type="person", aliases=["ann"], fact_ids=["fact:s1:0-3:0"])
    >>> e.id, e.embed_text()
    ('ent:ann', 'Ann (person)')
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.models import Unit


def entity_id(name: str) -> str:
    """``ent:`` plus a lower-case slug of the name (``"Ms. Okafor"`` -> ``"ent:ms-okafor"``)."""
    slug = re.sub(r"[^\w]+", "-", name.casefold()).strip("-")
    return f"ent:{slug or 'unnamed'}"


class Entity(Unit):
    """One resolved entity of a conversation, with its aliases, mentions and profile."""

    name: str
    type: str = Field(default="thing", description="person, speaker, relative, pet, place, org or thing")
    aliases: list[str] = Field(default_factory=list, description="the variants resolved to this entity")
    fact_ids: list[str] = Field(default_factory=list, description="facts that name it")
    turn_ids: list[str] = Field(default_factory=list, description="raw turns of those facts")
    attributes: list[str] = Field(default_factory=list, description="profile: fact ids of persistent attributes")
    events: list[str] = Field(default_factory=list, description="profile: fact ids of its most recent events")

    @model_validator(mode="after")
    def _derive_id(self) -> Entity:
        if not self.id:
            self.id = entity_id(self.name)
        return self

    def embed_text(self) -> str:
        """The name and the type: ``"Ann (person)"``."""
        return f"{self.name} ({self.type})"

    def child_ids(self) -> list[str]:
        """The facts that name it."""
        return list(self.fact_ids)

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its name, type and number of facts."""
        return {**super().metadata(), "name": self.name, "type": self.type, "facts": len(self.fact_ids)}


ENTITY = register(
    Level(
        kind="entity",
        unit=Entity,
        role="node",
        description="H-Mem entity graph: resolved entities with profiles (seeds for expansion)",
    )
)
