"""Growing H-Mem's temporal-semantic tree (§3.2 "Tree Construction"), incrementally and bottom-up.

The leaves are HyMem's Level-1 event summaries: they exist offline and with a
model, each stands for exactly one verbatim episode, and each carries its
session's time, so every leaf falls in one day window. Level by level (week,
month, year, as far as :func:`~memstrata.memory.tree.windows.active_levels`
allows), every item of the level below that has no parent yet is placed:

- only nodes of the same window (beta) are candidates;
- the item joins the cluster of its most similar member (cosine of the
  vectors) if that similarity reaches the level's alpha, and that member is
  reinforced (H-Mem's n_m, r_m);
- otherwise it gets a new parent of its own, which is then placed one level up.

A node whose children changed is marked stale, and so is every ancestor; the
ingestion stage recomputes exactly those (their text, span, vector and turns),
so appending a session touches only its windows and their ancestors, and a
node is updated in place, never duplicated. Placed items never move.

Example:
    >>> import numpy as np
    >>> from datetime import datetime
    >>> from memstrata.memory.tree.windows import tree_levels
    >>> f = Forest()
    >>> f.add_leaf(Item("sum:a", np.array([1.0, 0.0]), datetime(2023, 5, 8)))
    >>> f.add_leaf(Item("sum:b", np.array([0.9, 0.436]), datetime(2023, 5, 9)))
    >>> _ = grow(f, tree_levels(), active=("day", "week"))
    >>> [(n.id, n.children) for n in f.nodes.values()]
    [('tree:week:2023-W19:0', ['sum:a', 'sum:b'])]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from memstrata.memory.tree.windows import LEVELS, TreeLevel, window_key


@dataclass
class Item:
    """A leaf as the tree sees it: id, unit vector, time (``None`` when untimed) and session order."""

    id: str
    vector: np.ndarray
    when: datetime | None
    session_id: str = ""
    order: tuple[int, str, int] = (0, "", 0)


@dataclass
class Node:
    """An upper node: its level, window, children (ids one level down) and whether it must be recomputed."""

    id: str
    level: str
    window: str
    children: list[str] = field(default_factory=list)
    start: datetime | None = None
    stale: bool = False


@dataclass(frozen=True)
class Reinforcement:
    """One consolidation of a unit (H-Mem's n_m += 1, r_m = ``at``), at memory time, not wall-clock time."""

    unit_id: str
    at: datetime | None


@dataclass
class Forest:
    """One conversation's tree: its leaves, its nodes, the parent of every placed item, and every vector."""

    leaves: dict[str, Item] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    parent: dict[str, str] = field(default_factory=dict)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)

    def add_leaf(self, item: Item) -> None:
        """Add a leaf and its vector, normalized to unit length."""
        self.leaves[item.id] = item
        self.vectors[item.id] = _unit(item.vector)

    def add_node(self, node: Node, vector: np.ndarray | None = None) -> None:
        """Load a stored node (its children's parent links follow from it)."""
        self.nodes[node.id] = node
        for child in node.children:
            self.parent[child] = node.id
        if vector is not None:
            self.vectors[node.id] = _unit(vector)

    def level_of(self, item_id: str) -> str:
        """An item's level: ``"day"`` for a leaf, else its node's level."""
        return "day" if item_id in self.leaves else self.nodes[item_id].level

    def when(self, item_id: str) -> datetime | None:
        """An item's time: a leaf's own, a node's start."""
        return self.leaves[item_id].when if item_id in self.leaves else self.nodes[item_id].start

    def session(self, item_id: str) -> str:
        """A leaf's session id; ``""`` for a node."""
        return self.leaves[item_id].session_id if item_id in self.leaves else ""

    def sort_key(self, item_id: str) -> tuple[int, float, tuple[int, str, int], str]:
        """The key of time order: timed items first, by time, then by session order, then by id."""
        when = self.when(item_id)
        order = self.leaves[item_id].order if item_id in self.leaves else (0, "", 0)
        return (when is None, when.timestamp() if when else 0.0, order, item_id)

    def at_level(self, level: str) -> list[str]:
        """The ids at one level: every leaf for ``"day"``, else the nodes of that level."""
        return list(self.leaves) if level == "day" else [n.id for n in self.nodes.values() if n.level == level]

    def descendants(self, node_id: str) -> list[str]:
        """The leaves under a node, in time order."""
        out: list[str] = []
        stack = [node_id]
        while stack:
            current = stack.pop()
            if current in self.leaves:
                out.append(current)
            elif current in self.nodes:
                stack.extend(self.nodes[current].children)
        return sorted(out, key=self.sort_key)

    def ancestors(self, item_id: str) -> list[str]:
        """The item's parent, its parent's parent and so on up to the root."""
        out, current = [], self.parent.get(item_id)
        while current is not None and current not in out:
            out.append(current)
            current = self.parent.get(current)
        return out

    def recenter(self, node_id: str) -> None:
        """A node's vector: the normalized mean of its children's (no model call)."""
        kids = [self.vectors[c] for c in self.nodes[node_id].children if c in self.vectors]
        if kids:
            self.vectors[node_id] = _unit(np.mean(kids, axis=0))


def grow(forest: Forest, levels: Sequence[TreeLevel], *, active: Iterable[str]) -> list[Reinforcement]:
    """Place every unplaced item, level by level, then mark the ancestors of changed nodes stale.

    Returns the reinforcements this caused (a leaf's first consolidation, the member a new item joined).
    """
    active = set(active)
    events = [
        Reinforcement(i, forest.leaves[i].when)
        for i in sorted(forest.leaves, key=forest.sort_key)
        if i not in forest.parent and "week" in active
    ]
    below = "day"
    for level in levels:
        if level.name not in active:
            break
        by_window: dict[str, list[Node]] = {}
        for node in forest.nodes.values():
            if node.level == level.name:
                by_window.setdefault(node.window, []).append(node)
        for item_id in sorted((i for i in forest.at_level(below) if i not in forest.parent), key=forest.sort_key):
            events += _place(forest, item_id, level, by_window)
        below = level.name
    for node in [n for n in forest.nodes.values() if n.stale]:
        for up in forest.ancestors(node.id):
            forest.nodes[up].stale = True
    return events


def _place(forest: Forest, item_id: str, level: TreeLevel, by_window: dict[str, list[Node]]) -> list[Reinforcement]:
    when = forest.when(item_id)
    window = window_key(level.name, when, session_id=forest.session(item_id))
    vector = forest.vectors[item_id]
    best: tuple[float, Node | None, str] = (-2.0, None, "")
    for candidate in by_window.get(window, []):
        for child in candidate.children:
            sim = float(vector @ forest.vectors[child]) if child in forest.vectors else -2.0
            if sim > best[0]:
                best = (sim, candidate, child)
    sim, node, sibling = best
    events = []
    if node is not None and sim >= level.alpha:
        events.append(Reinforcement(sibling, when))
    else:
        siblings = by_window.setdefault(window, [])
        node = Node(id=f"tree:{level.name}:{window}:{len(siblings)}", level=level.name, window=window, start=when)
        while node.id in forest.nodes:  # a pruned window may leave a gap in the numbering
            node.id += "+"
        siblings.append(node)
        forest.nodes[node.id] = node
    node.children.append(item_id)
    node.stale = True
    if when is not None and (node.start is None or when < node.start):
        node.start = when
    forest.parent[item_id] = node.id
    forest.recenter(node.id)
    return events


def prune(forest: Forest) -> list[str]:
    """Drop children that no longer exist (a rebuilt conversation) and the nodes left empty; their ids.

    A node that lost a child is stale, and so are its ancestors.
    """
    removed: list[str] = []
    for level in LEVELS[1:]:
        for node in [n for n in forest.nodes.values() if n.level == level]:
            kept = [c for c in node.children if c in forest.leaves or c in forest.nodes]
            if len(kept) != len(node.children):
                for gone in set(node.children) - set(kept):  # nor is it anyone's child (its edge goes too)
                    forest.parent.pop(gone, None)
                node.children, node.stale = kept, True
                forest.recenter(node.id)
            if not kept:
                removed.append(node.id)
                del forest.nodes[node.id]
                forest.parent.pop(node.id, None)
    for child in [c for c, p in forest.parent.items() if p not in forest.nodes]:
        del forest.parent[child]
    return removed


def central_leaves(forest: Forest, node_id: str, k: int) -> list[str]:
    """The ``k`` leaves under a node closest to its vector (the events its summary stands for), in time order."""
    leaves = forest.descendants(node_id)
    vector = forest.vectors.get(node_id)
    if vector is None or len(leaves) <= k:
        return leaves
    ranked = sorted(leaves, key=lambda i: -float(vector @ forest.vectors[i]))[:k]
    return sorted(ranked, key=forest.sort_key)


def age_of(forest: Forest) -> tuple[datetime, datetime] | None:
    """The first and last leaf time, or ``None`` when no leaf has a time."""
    times = [i.when for i in forest.leaves.values() if i.when is not None]
    return (min(times), max(times)) if times else None


def _unit(vector: np.ndarray) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32).ravel()
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v
