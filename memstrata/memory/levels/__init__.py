"""Unit kinds, one module each, and their registry (see :mod:`memstrata.memory.levels.base`).

Importing this package registers the built-in kinds in hierarchy order: raw
turns, their contextual view, the passages of long turns, Level-2 episodes, Level-1 summaries, atomic facts, entities,
H-Mem's temporal-semantic tree nodes, themes, persona dimensions.
"""

from memstrata.memory.levels.base import (
    SCOPES,
    Level,
    get_level,
    levels,
    raw_kind,
    register,
    scope_table,
    unregister,
)

# Importing a kind's module registers it, and the registry keeps that order (it is the order of the scope table
# and of every listing of kinds): raw turns first, then up the hierarchy. So these stay in this order, not sorted.
# isort: off
from memstrata.memory.levels.level2.turn import TURN, Turn
from memstrata.memory.levels.level2.turn_context import TURN_CONTEXT, TurnContext
from memstrata.memory.levels.level2.passage import PASSAGE, Passage
from memstrata.memory.levels.level2.episode import EPISODE, Episode
from memstrata.memory.levels.level1.summary import SUMMARY, EventSummary
from memstrata.memory.levels.level1.fact import FACT, Fact
from memstrata.memory.levels.entity import ENTITY, Entity
from memstrata.memory.levels.level1.tree_node import TREE_NODE, TreeNode
from memstrata.memory.levels.level1.theme import THEME, Theme
from memstrata.memory.levels.level1.persona import DIMENSIONS, PERSONA, Persona, PersonaItem
# isort: on

__all__ = [
    "DIMENSIONS",
    "ENTITY",
    "EPISODE",
    "FACT",
    "PASSAGE",
    "PERSONA",
    "SCOPES",
    "SUMMARY",
    "THEME",
    "TREE_NODE",
    "TURN",
    "TURN_CONTEXT",
    "Entity",
    "Episode",
    "EventSummary",
    "Fact",
    "Level",
    "Passage",
    "Persona",
    "PersonaItem",
    "Theme",
    "TreeNode",
    "Turn",
    "TurnContext",
    "get_level",
    "levels",
    "raw_kind",
    "register",
    "scope_table",
    "unregister",
]
