"""Atomic facts: one self-contained statement each, searched as a level of its own.

A fact is what Bi-Mem calls a fact and xMemory a semantic unit: a short
statement distilled from an episode, with its subject resolved to an entity of
the conversation's entity graph (:mod:`memstrata.memory.entity_graph`), the raw turns
it comes from, the session time plus an absolute date when the text names a
relative one ("yesterday" said on 8 May 2023 is 7 May 2023), and its validity:
``valid_from``, and ``superseded_by`` once a newer fact gives the same subject a
new value for the same single-valued attribute (see
:mod:`memstrata.memory.facts.supersession`). Superseded facts are kept as
history, never deleted.

Offline, facts come from :func:`memstrata.memory.facts.clauses.extract_facts`
(clauses with the speaker resolved); with a model, from the fact extraction
prompt. Either way, ids are ``fact:<episode>:<n>``, so re-ingesting the same
episode rewrites the same ids.

Example:
    >>> f = Fact(
    ...     user_id="u",
    ...     episode_id="ep:s1:0-3",
    ...     session_id="1",
    ...     n=0,
    ...     text="Ann moved to Lisbon.",
    ...     subject="Ann",
    ...     relation="move",
    ...     object="Lisbon",
    ...     turn_ids=["s1:t2"],
    ... )
    >>> f.id, f.linked_turn_ids(), f.current
    ('fact:s1:0-3:0', ['s1:t2'], True)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.models import Unit


class Fact(Unit):
    """One atomic statement, with its subject entity, its turns, its time and its validity."""

    episode_id: str
    session_id: str
    n: int = Field(ge=0, description="position of the fact within its episode's extraction")
    text: str = Field(description="the self-contained statement (first person resolved to a name)")
    subject: str = Field(description="the subject's name as written (resolved to an entity by linking)")
    subject_id: str = Field(default="", description="the resolved subject entity id (set by entity linking)")
    relation: str = Field(default="", description="relation label: the clause's verb lemma, or the model's label")
    object: str = Field(default="", description="the relation's object as written")
    mentions: list[str] = Field(default_factory=list, description="other entity names the statement mentions")
    types: dict[str, str] = Field(default_factory=dict, description="entity name -> type, as extracted")
    links: list[list[str]] = Field(
        default_factory=list,
        description="[subject, label, object] name triples "
        "the statement yields beside its own relation (e.g. a possessive)",
    )
    entity_ids: list[str] = Field(default_factory=list, description="resolved ids: subject first, then mentions")
    turn_ids: list[str] = Field(default_factory=list)
    event_date: datetime | None = Field(default=None, description="the absolute date a relative phrase names")
    valid_from: datetime | None = None
    superseded_by: str = ""
    method: str = Field(default="clauses", description="'clauses' (offline) or 'llm'")
    quotes: list[tuple[str, int, int]] = Field(
        default_factory=list,
        description="[turn id, start, end]: the characters of its turn's text the clause was cut from (offline)",
    )

    @model_validator(mode="after")
    def _derive_id(self) -> Fact:
        if not self.id:
            self.id = f"fact:{self.episode_id.removeprefix('ep:')}:{self.n}"
        if self.valid_from is None:
            self.valid_from = self.event_date or self.timestamp
        return self

    @property
    def current(self) -> bool:
        """False once a newer fact replaced this one (it stays as history)."""
        return not self.superseded_by

    def parent_ids(self) -> list[str]:
        """The episode it was distilled from."""
        return [self.episode_id]

    def span(self) -> tuple[datetime | None, datetime | None]:
        """The date of the event it states, else the time it was said, as both ends."""
        when = self.event_date or self.timestamp
        return when, when

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its episode, subject, relation and whether it is superseded."""
        return {
            **super().metadata(),
            "episode_id": self.episode_id,
            "subject_id": self.subject_id,
            "relation": self.relation,
            "superseded": bool(self.superseded_by),
        }


FACT = register(
    Level(
        kind="fact",
        unit=Fact,
        role="event",
        scopes=("Short", "Long", "Mixed"),
        description="atomic facts with a resolved subject, searched beside the Level-1 summaries",
    )
)
