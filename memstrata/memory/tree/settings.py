"""H-Mem's temporal-semantic tree: how week, month and year nodes are clustered and summarised, and how many are
searched.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.tree``): pass it whole, or as a dict of
the fields to change (``tree={"alphas": ...}``); a field's description is what LangGraph Studio shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class TreeSettings:
    """H-Mem's temporal-semantic tree: how week, month and year nodes are clustered and summarised, and how many are
    searched.
    """

    alphas: Annotated[
        tuple[float, float, float],
        setting(
            "H-Mem alpha: the similarity a child needs to join a week, month or year cluster of its own window "
            "(else it gets a new parent)"
        ),
    ] = (0.8, 0.7, 0.6)
    token_caps: Annotated[
        tuple[int, int, int],
        setting("tokens of a week, month and year node's consolidated summary, at most"),
    ] = (120, 160, 200)
    node_leaves: Annotated[
        int,
        setting("a tree node reaches the raw turns of this many of its most central event summaries"),
    ] = 3
    k: Annotated[int, setting("tree nodes the light module reads per Long or Mixed query")] = 5
    llm_calls: Annotated[
        int,
        setting("with a model: node consolidations put to the model per ingest (the extractive one does the rest)"),
    ] = 40

    def __post_init__(self) -> None:
        object.__setattr__(self, "alphas", tuple(self.alphas))  # JSON sends lists
        object.__setattr__(self, "token_caps", tuple(self.token_caps))
