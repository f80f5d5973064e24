"""``memstrata inspect --themes``: each conversation's themes with their size, their facts and raw turns.

Example:
    >>> for part in theme_view(store, "u1", None):
    ...     console.print(part)  # doctest: +SKIP
"""

from __future__ import annotations

from statistics import median
from typing import TYPE_CHECKING, Any

from rich.text import Text
from rich.tree import Tree

from memstrata.memory.levels import Fact, Theme, raw_kind

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore


def themes_of(store: MemoryStore, user: str, conversation: str | None) -> list[Theme]:
    """The user's themes, largest first."""
    return sorted(
        (Theme.model_validate(r.payload) for r in store.get("theme", user_id=user, conversation_id=conversation)),
        key=lambda t: (t.conversation_id, -t.size, t.n),
    )


def theme_stats(themes: list[Theme]) -> dict[str, Any]:
    """Count and size distribution (the numbers the ingest stats also report)."""
    sizes = sorted(t.size for t in themes)
    return {
        "count": len(sizes),
        "min": sizes[0] if sizes else 0,
        "median": median(sizes) if sizes else 0,
        "max": sizes[-1] if sizes else 0,
        "facts": sum(sizes),
    }


def theme_view(store: MemoryStore, user: str, conversation: str | None, *, facts_shown: int = 5) -> list[Any]:
    """One tree per conversation: themes > their most central facts > each fact's raw turns."""
    themes = themes_of(store, user, conversation)
    if not themes:
        return [
            Text(
                f"no themes for user {user!r}"
                + (f" in {conversation!r}" if conversation else "")
                + ": they are built when an episode closes"
            )
        ]
    parts: list[Any] = []
    for conv_id in dict.fromkeys(t.conversation_id for t in themes):
        mine = [t for t in themes if t.conversation_id == conv_id]
        s = theme_stats(mine)
        root = Tree(
            Text.assemble(
                (conv_id, "bold cyan"),  # a Text: a conversation id is stored text, never markup
                f" · {s['count']} themes over {s['facts']} facts · size "
                f"min {s['min']} / median {s['median']} / max {s['max']}",
            )
        )
        shown = {f for t in mine for f in t.fact_ids[:facts_shown]}
        facts = (
            {
                r.unit_id: Fact.model_validate(r.payload)
                for r in store.get("fact", user_id=user, conversation_id=conv_id, unit_ids=sorted(shown))
            }
            if shown
            else {}
        )
        turns = (
            {
                r.unit_id: r
                for r in store.get(
                    raw_kind(),
                    user_id=user,
                    conversation_id=conv_id,
                    unit_ids=sorted({t for f in facts.values() for t in f.turn_ids}),
                )
            }
            if facts
            else {}
        )
        for theme in mine:
            node = root.add(
                Text.assemble(
                    (f"{theme.id}", "magenta"), f" · {theme.size} facts · {theme.method} · ", theme.text[:160]
                )
            )
            for fid in theme.fact_ids[:facts_shown]:
                fact = facts.get(fid)
                if fact is None:
                    continue
                f_node = node.add(Text.assemble((fid, "green"), " ", fact.text))
                for tid in fact.turn_ids:
                    if tid in turns:
                        f_node.add(Text(f"{tid}  {turns[tid].document}"[:200], style="dim"))
            if theme.size > facts_shown:
                node.add(Text(f"… {theme.size - facts_shown} more facts (inspect --unit {theme.id})", style="dim"))
        parts.append(root)
    return parts
