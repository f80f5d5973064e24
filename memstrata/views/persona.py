"""``memstrata inspect --persona SPEAKER``: a speaker's five dimensions with their citations, history and calibration.

Example:
    >>> for part in persona_view(store, "u1", None, "Caroline"):
    ...     console.print(part)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text
from rich.tree import Tree

from memstrata.memory.levels import DIMENSIONS, Persona, Theme, raw_kind
from memstrata.memory.store.reads import read_personas

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore


def _when(p: Persona) -> str:
    start = f"{p.valid_from:%-d %b %Y}" if p.valid_from else "untimed"
    return f"{start} – {p.valid_to:%-d %b %Y}" if p.valid_to else f"since {start}"


def persona_view(store: MemoryStore, user: str, conversation: str | None, speaker: str) -> list[Any]:
    """One tree: dimension > current items > raw turns they cite; then each dimension's earlier versions, and how
    the speaker's scenes were calibrated (or that calibration needs a model).
    """
    try:
        versions = read_personas(store, user, speaker, conversation)
    except LookupError as exc:
        return [Text(str(exc))]
    conv = versions[0].conversation_id
    turns = {
        r.unit_id: r.document
        for r in store.get(
            raw_kind(),
            user_id=user,
            conversation_id=conv,
            unit_ids=sorted({t for v in versions for t in v.linked_turn_ids()}),
        )
    }
    root = Tree(
        Text.assemble((versions[0].speaker, "bold cyan"), f" · {conv} · persona (Bi-Mem's five dimensions)")
    )  # a Text: the speaker and conversation are stored text, never markup
    for d in DIMENSIONS:
        mine = [v for v in versions if v.dimension == d]
        current = next((v for v in reversed(mine) if v.current), None)
        if current is None:
            root.add(Text(f"{d}: nothing yet", style="dim"))
            continue
        node = root.add(Text.assemble((d, "magenta"), f" · v{current.version} · {_when(current)} · {current.method}"))
        for item in current.items:
            cited = node.add(
                Text.assemble(
                    item.text,
                    " ",
                    (
                        f"[{item.fact_id}"
                        + (f" +{len(item.fact_ids)}" if item.fact_ids else "")
                        + (f" · {item.theme_id}" if item.theme_id else "")
                        + "]",
                        "green",
                    ),
                )
            )
            for tid in item.turn_ids:
                if tid in turns:
                    cited.add(Text(f"{tid}  {turns[tid]}"[:200], style="dim"))
        if current.excluded:
            node.add(Text(f"removed by the user: {', '.join(current.excluded)}", style="yellow"))
        earlier = [v for v in mine if not v.current]
        if earlier:
            history = node.add(Text(f"history: {len(earlier)} earlier version(s)", style="dim"))
            for v in reversed(earlier):
                history.add(Text(f"v{v.version} · {_when(v)} · {v.text}"[:220], style="dim"))
    themes = [Theme.model_validate(r.payload) for r in store.get("theme", user_id=user, conversation_id=conv)]
    checks = [(t, c) for t in themes for c in t.calibrations if c.get("speaker") == versions[0].speaker]
    if checks:
        cal = root.add(
            Text(
                f"calibration (Eq. 8): {len(checks)} scene checks, "
                f"{sum(bool(c['condition']) for _, c in checks)} conditions appended"
            )
        )
        for t, c in checks:
            if c["condition"]:
                cal.add(Text.assemble((t.id, "magenta"), " + ", c["condition"][:180]))
    else:
        root.add(Text("calibration: none (it needs a model; offline there is no calibration)", style="dim"))
    return [root]
