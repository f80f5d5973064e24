"""``memstrata inspect --tree`` and ``--window KEY``: the temporal-semantic tree as a person reads it.

``--tree`` draws year -> month -> week -> day per conversation, each node with its
event count and the start of its consolidated summary, and each day with its event
summaries. ``--window 2023-05`` lists what one window holds: its tree nodes and the
event summaries (and raw turns) dated inside it.

Example:
    >>> console.print(tree_view(store, "u1", None))  # doctest: +SKIP
    >>> console.print(window_view(store, "u1", None, "2023-05"))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from memstrata.errors import StoreError
from memstrata.memory.levels import EventSummary, TreeNode
from memstrata.memory.tree.windows import UNTIMED, window_key, window_level, window_span

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

_SHOWN = 140


def _nodes(store: MemoryStore, user: str, conversation: str | None) -> list[TreeNode]:
    return [
        TreeNode.model_validate(r.payload) for r in store.get("tree_node", user_id=user, conversation_id=conversation)
    ]


def _summaries(store: MemoryStore, user: str, conversation: str | None) -> list[EventSummary]:
    return [
        EventSummary.model_validate(r.payload) for r in store.get("summary", user_id=user, conversation_id=conversation)
    ]


def tree_view(store: MemoryStore, user: str, conversation: str | None) -> Tree:
    """Per conversation: its year (or top) nodes, down to weeks, then days with their event summaries."""
    nodes = _nodes(store, user, conversation)
    summaries = {(s.conversation_id, s.id): s for s in _summaries(store, user, conversation)}
    by_id = {(n.conversation_id, n.id): n for n in nodes}
    children = {c for n in nodes for c in n.children}
    levels = {lv: sum(1 for n in nodes if n.level == lv) for lv in ("year", "month", "week")}
    root = Tree(
        f"[bold]{escape(user)}[/] · temporal tree · "
        + " · ".join(f"{n} {lv}" for lv, n in levels.items())
        + f" · {len(summaries)} events (leaves)"
    )
    for conv in sorted({n.conversation_id for n in nodes}):
        branch = root.add(f"[bold cyan]{escape(conv)}[/]")
        tops = sorted(
            (n for n in nodes if n.conversation_id == conv and n.id not in children),
            key=lambda n: (n.timestamp is None, n.timestamp or 0, n.id),
        )
        for top in tops:
            _add(branch, top, by_id, summaries)
    return root


def _add(
    parent: Tree, node: TreeNode, by_id: dict[tuple[str, str], TreeNode], summaries: dict[tuple[str, str], EventSummary]
) -> None:
    label = f"[bold]{node.level}[/] {escape(node.window)}" + ("" if node.timed else " [dim](no timestamps)[/]")
    branch = parent.add(f"{label} · {node.leaves} events · [dim]{escape(node.text[:_SHOWN])}[/]")
    if node.level != "week":
        kids = [by_id[(node.conversation_id, c)] for c in node.children if (node.conversation_id, c) in by_id]
        for kid in sorted(kids, key=lambda n: (n.timestamp is None, n.timestamp or 0, n.id)):
            _add(branch, kid, by_id, summaries)
        return
    days: dict[str, list[EventSummary]] = {}
    for c in node.children:
        s = summaries.get((node.conversation_id, c))
        if s is not None:
            days.setdefault(window_key("day", s.timestamp, session_id=s.session_id), []).append(s)
    for day, items in sorted(days.items()):
        day_branch = branch.add(f"[bold]day[/] {escape(day)} · {len(items)} events")
        for s in items:
            day_branch.add(f"[magenta]{escape(s.id)}[/] {escape(s.text[:_SHOWN])}")


def window_view(store: MemoryStore, user: str, conversation: str | None, key: str) -> Group:
    """What one window holds: its tree nodes and the event summaries dated inside it."""
    level = window_level(key)
    if level is None and key != UNTIMED:
        msg = f"--window {key!r}: use 2023-05-08 (day), 2023-W19 (week), 2023-05 (month), 2023 (year) or untimed"
        raise StoreError(msg)
    nodes = [n for n in _nodes(store, user, conversation) if n.window == key]
    if key == UNTIMED:
        inside = [s for s in _summaries(store, user, conversation) if s.timestamp is None]
    else:
        start, end = window_span(key)
        inside = [s for s in _summaries(store, user, conversation) if s.timestamp and start <= s.timestamp <= end]
    table = Table(title=f"tree nodes of {escape(key)} ({level or 'untimed'})")
    for column in ("node", "conversation", "events", "summary"):
        table.add_column(column)
    for n in sorted(nodes, key=lambda n: (n.conversation_id, n.id)):
        table.add_row(escape(n.id), escape(n.conversation_id), str(n.leaves), escape(n.text))
    events = Table(title=f"{len(inside)} event summaries in {escape(key)}")
    for column in ("summary", "conversation", "time", "turns", "text"):
        events.add_column(column)
    for s in sorted(inside, key=lambda s: (s.conversation_id, s.timestamp or 0, s.id)):
        events.add_row(
            escape(s.id),
            escape(s.conversation_id),
            escape(s.timestamp_raw or ""),  # as the input wrote it
            str(len(s.turn_ids)),
            escape(s.text[:200]),
        )
    return Group(table, events)
