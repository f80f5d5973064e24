"""What a whole-memory snapshot keeps through in-place updates, refreshed one conversation at a time.

A write through this process updates the snapshot in place (:meth:`MemoryIndex.apply
<memstrata.memory.index.snapshot.MemoryIndex.apply>`), and its per-query memo is dropped. Some
structures cost too much to rebuild from everything after every one-message write: the entity edges
and the reinforcement counters read beside the snapshot, and the entity graph built from both. Every
source counts its writes per conversation (the edge store, the counter store, the snapshot's own
``writes``), with ``"*"`` for a write that may touch any conversation; a held structure keeps the
counts it was made at and redoes only the conversations whose count moved.

Example:
    >>> def read(conv):  # one conversation's part, or (None) every part
    ...     return {conv: [f"{conv}-new"]} if conv else {"c1": ["e1"]}
    >>> held = PerConversation.read({"c1": 1}, read)
    >>> sorted(held.refresh({"c1": 2, "c2": 1}, read))
    ['c1', 'c2']
    >>> held.parts
    {'c1': ['c1-new'], 'c2': ['c2-new']}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


def moved(before: Mapping[str, int] | None, after: Mapping[str, int]) -> set[str] | None:
    """The conversations whose write count differs between two stamps; ``None`` when any may have changed
    (no earlier stamp, or the ``"*"`` count moved).
    """
    if before is None or before.get("*") != after.get("*"):
        return None
    return {c for c in before.keys() | after.keys() if before.get(c) != after.get(c)}


@dataclass
class PerConversation(Generic[T]):
    """Parts of one structure by conversation, the write counts they were read at, and a version that
    its owner may bump when a refresh changed something (to key what it derives from the parts).

    ``read(conv)`` reads one conversation's part, or every part of the scope when ``conv`` is ``None``,
    and returns them by conversation.
    """

    stamp: dict[str, int]
    parts: dict[str, T]
    version: int = 0

    @classmethod
    def read(
        cls, stamp: Mapping[str, int], read: Callable[[str | None], dict[str, T]], *, scope: str | None = None
    ) -> PerConversation[T]:
        """Every part of the scope (one conversation, or ``None``: all) read at once."""
        return cls(dict(stamp), read(scope))

    def refresh(
        self, stamp: Mapping[str, int], read: Callable[[str | None], dict[str, T]], *, scope: str | None = None
    ) -> set[str] | None:
        """Bring the parts up to ``stamp``: read again each conversation whose count moved, or everything.

        Returns the conversations whose count moved (empty: none; ``None``: everything was read).
        """
        changed = moved(self.stamp, stamp)
        if changed is None:
            self.parts = read(scope)
        else:
            for conv in changed - {"*"}:
                part = read(conv).get(conv) if scope in (None, conv) else None
                if part is None:
                    self.parts.pop(conv, None)
                else:
                    self.parts[conv] = part
        self.stamp = dict(stamp)
        return changed
