"""The level abstraction: what a unit kind declares, and the registry of kinds.

A kind is a :class:`Level`: its unit class (which says what text is embedded and
BM25-indexed, its links to raw turns, its parent and child links and its time
span, see :class:`memstrata.memory.models.Unit`), its role in the hierarchy and
the retrieval scopes that search it. The store opens one Chroma collection per
registered kind, the search snapshot indexes every searched kind, ``forget``
clears them all. Adding a kind is adding its module and calling :func:`register`.

Roles:

- ``raw``: the verbatim turns (H-Mem's original fragments, HyMem's Level-2 text);
- ``view``: another embedding of the raw turns (one unit per turn, linked by its turn id);
- ``container``: verbatim groupings of turns (HyMem's Level-2 episodes), read by id, not searched;
- ``event``: units that stand for a set of turns and are searched first (HyMem's Level-1 summaries,
  atomic facts, and any later kind of the same role). A hit on an event reaches its turns;
- ``node``: nodes of a graph over the events (H-Mem's entities), loaded into the search snapshot so a
  query can seed a traversal by name, but never ranked by vectors themselves.

Example:
    >>> from memstrata.memory.levels import get_level, scope_table
    >>> get_level("summary").role
    'event'
    >>> scope_table()["Long"]
    ['summary', 'fact', 'tree_node', 'theme']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from memstrata.memory.models import Unit

Role = Literal["raw", "view", "container", "event", "node"]
SCOPES = ("Short", "Long", "Mixed")
# A plugin kind's builder: one conversation's turns (memstrata.memory.levels.Turn, which registers itself here, so
# this module names no turn type) in, its units out.
Deriver = Callable[[Sequence[Any]], list[Unit]]


@dataclass(frozen=True)
class Level:
    """One registered unit kind.

    Attributes:
        kind: the name; also the Chroma collection suffix (``memstrata_<kind>``).
        unit: the pydantic unit class.
        role: see the module docstring.
        description: one line for ``inspect`` and the docs.
        scopes: the retrieval scopes that search this kind directly.
        searched: whether the search snapshot indexes it (vectors and BM25).
        derive: for kinds built by the generic ingestion stage: the units of one
            conversation, from all of its turns in order. Built-in kinds have
            stages of their own and leave this ``None``.
        lends_prior: for ``event`` kinds: whether a unit's score lends its turns the hierarchy
            prior (a summary stands for an episode and raises all of its turns). A kind whose
            units restate single turns (atomic facts) only brings its turns as candidates.
    """

    kind: str
    unit: type[Unit]
    role: Role
    description: str
    scopes: tuple[str, ...] = ()
    searched: bool = True
    derive: Deriver | None = None
    lends_prior: bool = True

    def __post_init__(self) -> None:
        if not self.kind.replace("_", "").isalnum() or not self.kind.islower():
            msg = f"Level.kind must be lower-case letters, digits and '_', got {self.kind!r}"
            raise ValueError(msg)
        unknown = set(self.scopes) - set(SCOPES)
        if unknown:
            msg = f"Level {self.kind!r}: unknown scope(s) {sorted(unknown)}; use {SCOPES}"
            raise ValueError(msg)


_REGISTRY: dict[str, Level] = {}


def register(level: Level) -> Level:
    """Add a kind (re-registering the same kind replaces it); returns it."""
    if level.role == "raw" and any(v.role == "raw" and v.kind != level.kind for v in _REGISTRY.values()):
        msg = "only one raw kind can be registered: every other kind links to its turns"
        raise ValueError(msg)
    _REGISTRY[level.kind] = level
    return level


def unregister(kind: str) -> None:
    """Remove a kind from the registry (its stored records stay until ``forget``)."""
    _REGISTRY.pop(kind, None)


def levels(*, role: Role | None = None, searched: bool | None = None) -> list[Level]:
    """Registered kinds in registration order, optionally of one role."""
    return [
        lv
        for lv in _REGISTRY.values()
        if (role is None or lv.role == role) and (searched is None or lv.searched == searched)
    ]


def get_level(kind: str) -> Level:
    """The registered kind, or a clear error naming the registered ones."""
    try:
        return _REGISTRY[kind]
    except KeyError:
        msg = f"unknown unit kind {kind!r}; registered kinds: {sorted(_REGISTRY)}"
        raise KeyError(msg) from None


def raw_kind() -> str:
    """The kind of the verbatim turns."""
    return levels(role="raw")[0].kind


def scope_table() -> dict[str, list[str]]:
    """Retrieval scope -> the kinds it searches directly, from each kind's declaration."""
    return {scope: [lv.kind for lv in _REGISTRY.values() if scope in lv.scopes] for scope in SCOPES}
