"""Reading a conversation's tree from the store, recomputing its stale nodes, and writing it back.

Written in an order that never duplicates on a crash: the tree edges first (their
keys are idempotent), then the nodes (a leaf under a stored node counts as placed),
then the reinforcement counts. A crash between the last two loses that batch's
counts rather than counting them twice.

Example:
    >>> update = load_tree(store, "u", "c1")  # doctest: +SKIP
    >>> grown = update.grow(tree_levels())  # doctest: +SKIP
    >>> texts = {n: offline_text(update, n, caps, counter) for n in update.stale()}  # doctest: +SKIP
    >>> save_tree(store, "u", update, texts)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from memstrata.memory.levels.level1.summary import EventSummary
from memstrata.memory.levels.level1.tree_node import TREE_NODE, TreeNode
from memstrata.memory.store import Edge, MemoryStore
from memstrata.memory.timeparse import format_date
from memstrata.memory.tree.build import (
    Forest,
    Item,
    Node,
    Reinforcement,
    age_of,
    central_leaves,
    grow,
    prune,
)
from memstrata.memory.tree.consolidate import Child, consolidate
from memstrata.memory.tree.windows import UPPER, TreeLevel, active_levels, window_span

REL = "child_of"
SUMMARY_KIND = "summary"


@dataclass
class TreeUpdate:
    """One conversation's tree while it is updated: the forest, the stored units, what changed."""

    user_id: str
    conversation_id: str
    forest: Forest
    summaries: dict[str, EventSummary]
    stored: dict[str, TreeNode]
    reinforcements: list[Reinforcement] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def active(self) -> tuple[str, ...]:
        """The active levels, from the history's age (first to last leaf)."""
        span = age_of(self.forest)
        return active_levels(span[1] - span[0] if span else None)

    def grow(self, levels: Sequence[TreeLevel]) -> list[str]:
        """Prune vanished leaves, place new ones bottom-up; the stale nodes, lowest level first."""
        self.removed = prune(self.forest)
        self.reinforcements = grow(self.forest, levels, active=self.active())
        return self.stale()

    def stale(self) -> list[str]:
        """The ids of the nodes marked stale, lower levels first (week, month, year), then by id."""
        order = {level: i for i, level in enumerate(UPPER)}
        nodes = [n for n in self.forest.nodes.values() if n.stale]
        return [n.id for n in sorted(nodes, key=lambda n: (order[n.level], n.id))]

    def children(self, node_id: str) -> list[Child]:
        """A node's children as consolidation reads them (already recomputed ones with their new text)."""
        out = []
        for cid in sorted(self.forest.nodes[node_id].children, key=self.forest.sort_key):
            unit = self.summaries.get(cid) or self.stored.get(cid)
            if unit is not None:
                out.append(Child(unit.text, unit.timestamp))
        return out


def load_tree(store: MemoryStore, user_id: str, conversation_id: str, *, skip: Collection[str] = ()) -> TreeUpdate:
    """The conversation's summaries (the leaves, but ``skip``: open episodes' ones) and stored tree nodes."""
    forest = Forest()
    summaries: dict[str, EventSummary] = {}
    for r in store.get(SUMMARY_KIND, user_id=user_id, conversation_id=conversation_id, with_vectors=True):
        if r.unit_id in skip:
            continue
        s = EventSummary.model_validate(r.payload)
        summaries[s.id] = s
        order = (int(s.session_id) if s.session_id.isdigit() else 1 << 30, s.session_id, _first(s.episode_id))
        forest.add_leaf(Item(s.id, np.asarray(r.metadata["_vector"]), s.timestamp, s.session_id, order))
    stored: dict[str, TreeNode] = {}
    for r in store.get(TREE_NODE.kind, user_id=user_id, conversation_id=conversation_id, with_vectors=True):
        node = TreeNode.model_validate(r.payload)
        stored[node.id] = node
        forest.add_node(
            Node(node.id, node.level, node.window, list(node.children), node.timestamp),
            np.asarray(r.metadata["_vector"]),
        )
    return TreeUpdate(user_id, conversation_id, forest, summaries, stored)


def header(update: TreeUpdate, node_id: str) -> str:
    """``week 2023-W19 · 8 May 2023 – 14 May 2023 · 4 events``, or the untimed equivalent."""
    node = update.forest.nodes[node_id]
    leaves = len(update.forest.descendants(node_id))
    if node.window == "untimed":
        return f"{node.level}, untimed (no timestamps; session order) · {leaves} events"
    start, end = window_span(node.window)
    return f"{node.level} {node.window} · {format_date(start)} – {format_date(end)} · {leaves} events"


def offline_text(update: TreeUpdate, node_id: str, caps: Mapping[str, int], count: Callable[[str], int]) -> str:
    """The node's extractive consolidation within its level's token cap."""
    level = update.forest.nodes[node_id].level
    return consolidate(update.children(node_id), header=header(update, node_id), cap=caps[level], count=count)


def refresh(update: TreeUpdate, node_id: str, text: str, *, method: str, leaves_per_node: int) -> TreeNode:
    """The recomputed unit of one stale node (kept in ``update.stored`` so its parent reads the new text)."""
    forest = update.forest
    node = forest.nodes[node_id]
    leaves = forest.descendants(node_id)
    times = [t for t in (forest.leaves[i].when for i in leaves) if t is not None]
    central = central_leaves(forest, node_id, leaves_per_node)
    turns = list(dict.fromkeys(t for i in central for t in update.summaries[i].turn_ids))
    child_kind = SUMMARY_KIND if node.level == "week" else TREE_NODE.kind
    number = int(node_id.rsplit(":", 1)[1].rstrip("+") or 0)
    unit = TreeNode(
        user_id=update.user_id,
        conversation_id=update.conversation_id,
        id=node_id,
        level=node.level,
        window=node.window,
        n=number,
        text=text,
        children=list(node.children),
        child_kind=child_kind,
        turn_ids=turns,
        leaves=len(leaves),
        timestamp=min(times) if times else None,
        end=max(times) if times else None,
        timed=bool(times),
        method=method,
    )
    update.stored[node_id] = unit
    node.stale = False
    return unit


def save_tree(store: MemoryStore, update: TreeUpdate, units: Sequence[TreeNode]) -> int:
    """Write the recomputed nodes, their edges and the reinforcement counts; delete pruned nodes and their counts."""
    user, conv, forest = update.user_id, update.conversation_id, update.forest
    gone = [
        e
        for e in store.edges.get(user, conversation_id=conv, rel=REL)
        if e.dst in update.removed or forest.parent.get(e.src) != e.dst
    ]
    store.edges.delete(user, gone)
    store.edges.add(
        user,
        [
            Edge(
                conv,
                child,
                REL,
                u.id,
                src_kind=u.child_kind,
                dst_kind=TREE_NODE.kind,
                turn_ids=tuple(update.summaries[child].turn_ids) if child in update.summaries else (),
            )
            for u in units
            for child in u.children
        ],
    )
    store.delete(TREE_NODE.kind, user_id=user, conversation_id=conv, unit_ids=update.removed)  # their n_m, r_m too
    store.upsert(
        TREE_NODE.kind,
        list(units),
        documents=[u.embed_text() for u in units],
        vectors=[forest.vectors[u.id].tolist() for u in units],
        extra=[u.metadata() for u in units],
    )
    _reinforce(store, update, units)
    return len(units)


def unstored_children(store: MemoryStore, update: TreeUpdate, units: Sequence[TreeNode]) -> list[str]:
    """The children of the just-written nodes that are not stored: another writer deleted them after the tree was
    read (a summary whose episode it cut again, or a node its own tree update pruned), so the tree must be read and
    written again.
    """
    missing = []
    for kind in (SUMMARY_KIND, TREE_NODE.kind):
        wanted = sorted({c for u in units if u.child_kind == kind for c in u.children})
        if wanted:
            found = store.get(kind, user_id=update.user_id, conversation_id=update.conversation_id, unit_ids=wanted)
            stored = {r.unit_id for r in found}
            missing += [c for c in wanted if c not in stored]
    return missing


def _reinforce(store: MemoryStore, update: TreeUpdate, units: Sequence[TreeNode]) -> None:
    """H-Mem's n_m += 1 and r_m for every consolidation, at memory time (so results never depend on run time).

    A recomputed node counts one consolidation per distinct time of the leaves under it, as if
    each leaf had arrived alone: the counters skip times at or before the stored ``r_m``, so the
    count is the same however the conversation was batched, resumed or written concurrently.
    """
    leaf_times = {u.id: {update.forest.leaves[i].when for i in update.forest.descendants(u.id)} for u in units}
    events = [*update.reinforcements, *(Reinforcement(u.id, t) for u in units for t in leaf_times[u.id])]
    by_time: dict[float, list[tuple[str, str, str]]] = {}
    for event in events:
        kind = SUMMARY_KIND if event.unit_id in update.summaries else TREE_NODE.kind
        at = event.at.timestamp() if isinstance(event.at, datetime) else 0.0
        by_time.setdefault(at, []).append((update.conversation_id, kind, event.unit_id))
    for at in sorted(by_time):  # oldest first: r_m ends at the latest consolidation
        store.counters.reinforce(update.user_id, by_time[at], at=at)
    # another process may have replaced a summary meanwhile: its counter must not outlive it
    store.drop_orphan_counters(update.user_id, sorted({item for items in by_time.values() for item in items}))


def _first(episode_id: str) -> int:
    tail = episode_id.rsplit(":", 1)[-1].split("-")[0]
    return int(tail) if tail.isdigit() else 0
