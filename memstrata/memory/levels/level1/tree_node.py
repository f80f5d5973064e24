"""H-Mem's temporal-semantic tree: week, month and year nodes over the Level-1 event summaries.

The tree's leaves are HyMem's Level-1 event summaries (kind ``summary``): they
exist in both modes, each stands for exactly one verbatim episode, and each
carries its session's time, so it falls in one day window. Upper nodes are
this kind: a node of one level (week, month or year) and one window holds
children one level down that are similar enough (H-Mem's alpha) and consolidates
their text, with a model or extractively (see :mod:`memstrata.memory.tree`).
A node's raw turns are those of its most central leaves, so a hit on a month
reaches the episodes that month's summary speaks for, not the whole month.
Nodes are searched by Long and Mixed queries (H-Mem's upper summaries); Short
queries read raw turns and leaf events only. Leaves without a time sit in
``untimed`` windows, in session order, and the node says so.

Example:
    >>> n = TreeNode(
    ...     user_id="u",
    ...     level="week",
    ...     window="2023-W19",
    ...     n=0,
    ...     text="[week 2023-W19] Ann ran.",
    ...     children=["sum:s1:0-3"],
    ...     child_kind="summary",
    ...     turn_ids=["s1:t2"],
    ... )
    >>> n.id, n.child_ids(), n.linked_turn_ids()
    ('tree:week:2023-W19:0', ['sum:s1:0-3'], ['s1:t2'])
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.models import Unit


class TreeNode(Unit):
    """One week, month or year node of a conversation's temporal-semantic tree."""

    level: Literal["week", "month", "year"]
    window: str = Field(description="the window key: 2023-W19, 2023-05, 2023, or 'untimed'")
    n: int = Field(default=0, ge=0, description="the node's number among the clusters of its window")
    text: str = Field(description="the consolidated summary of the children")
    children: list[str] = Field(default_factory=list, description="ids one level down (summaries under weeks)")
    child_kind: str = Field(default="summary", description="'summary' for weeks, 'tree_node' above")
    turn_ids: list[str] = Field(default_factory=list, description="raw turns of the node's most central leaves")
    leaves: int = Field(default=0, description="event summaries under the node")
    end: datetime | None = Field(default=None, description="the latest child's time (timestamp is the first's)")
    timed: bool = Field(default=True, description="False when the children have no time (session order only)")
    method: str = Field(default="extractive", description="'extractive' or 'llm'")

    @model_validator(mode="after")
    def _derive_id(self) -> TreeNode:
        if not self.id:
            self.id = f"tree:{self.level}:{self.window}:{self.n}"
        return self

    def child_ids(self) -> list[str]:
        """Its children, one level down."""
        return list(self.children)

    def span(self) -> tuple[datetime | None, datetime | None]:
        """From its first child's time to its latest child's."""
        return self.timestamp, self.end or self.timestamp

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its level, window and whether it is timed."""
        return {**super().metadata(), "level": self.level, "window": self.window, "timed": self.timed}


TREE_NODE = register(
    Level(
        kind="tree_node",
        unit=TreeNode,
        role="event",
        scopes=("Long", "Mixed"),
        description="H-Mem temporal-semantic tree: week/month/year consolidations of the "
        "Level-1 summaries (searched by Long and Mixed queries)",
    )
)
