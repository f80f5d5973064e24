"""``memstrata inspect``: a user's memory as a tree of conversations, or one unit, view or HTML page of it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text
from rich.tree import Tree

from memstrata.cli import FLAG, ChromaUrl, DataDir, User, _fail, _read_mem, _writable, console
from memstrata.errors import StoreError
from memstrata.memory import levels
from memstrata.memory.index.active import tier_sizes

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore


def inspect(
    user: User,
    conversation: Annotated[str | None, typer.Option("--conversation", "-c", help="Only this conversation.")] = None,
    unit: Annotated[
        str | None, typer.Option("--unit", help="Show one episode/summary/turn id with its raw turns.")
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write the memory as one self-contained HTML page.")
    ] = None,
    entities: Annotated[
        bool, typer.Option("--entities", metavar=FLAG, help="List the entities of the entity graph.")
    ] = False,
    themes: Annotated[
        bool,
        typer.Option(
            "--themes",
            metavar=FLAG,
            help="List the themes: the facts grouped by what they are about, with their raw turns.",
        ),
    ] = False,
    persona: Annotated[
        str | None,
        typer.Option(
            "--persona", help="One speaker's persona: five dimensions with their citations, history and calibration."
        ),
    ] = None,
    tree: Annotated[
        bool, typer.Option("--tree", metavar=FLAG, help="Draw the temporal tree: year > month > week > day.")
    ] = False,
    window: Annotated[
        str | None,
        typer.Option("--window", help="What one tree window holds: 2023-05-08, 2023-W19, 2023-05, 2023 or untimed."),
    ] = None,
    entity: Annotated[
        str | None, typer.Option("--entity", help="One entity: its profile, relations, and facts with their raw turns.")
    ] = None,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """Show a user's memory: counts of every kind, and conversations > sessions > episodes > summaries."""
    _writable(html, "--html")
    store = _read_mem(data_dir, chroma_url, user, conversation).store
    try:
        if unit:
            _show_unit(store, user, conversation, unit)
            return
        if tree or window:
            from memstrata.views.tree import tree_view, window_view

            console.print(
                window_view(store, user, conversation, window) if window else tree_view(store, user, conversation)
            )
            return
        if persona:
            from memstrata.views.persona import persona_view

            for part in persona_view(store, user, conversation, persona):
                console.print(part)
            return
        if themes:
            from memstrata.views.themes import theme_view

            for part in theme_view(store, user, conversation):
                console.print(part)
            return
        if entities or entity:
            from memstrata.views.entities import entity_detail, entity_table

            for part in (
                entity_detail(store, user, conversation, entity)
                if entity
                else [entity_table(store, user, conversation)]
            ):
                console.print(part)
            return
        if html is not None:
            from memstrata.views.pages import memory_page

            html.write_text(memory_page(store, user_id=user, conversation_id=conversation), encoding="utf-8")
            console.print(Text(f"wrote {html}"))
            return
        console.print(_tree(store, user, conversation))
    except StoreError as exc:
        _fail(exc)


def _tree(store: MemoryStore, user: str, conversation: str | None) -> Tree:
    counts = {lv.kind: store.count(lv.kind, user_id=user, conversation_id=conversation) for lv in levels.levels()}
    episodes = store.get("episode", user_id=user, conversation_id=conversation)
    # episode ids repeat across conversations (ep:s1:0-5): a summary is its conversation's
    summaries = {
        (r.metadata["conversation_id"], r.payload["episode_id"]): r
        for r in store.get("summary", user_id=user, conversation_id=conversation)
    }
    root = Tree(f"[bold]{escape(user)}[/] · " + " · ".join(f"{n} {kind}" for kind, n in counts.items()))
    sizes = tier_sizes(store, user, conversation)
    root.add(
        f"[bold]tiers[/] (HMO) · cache {sizes['cache']} records in {sizes['cache_sessions']} sessions · "
        f"buffer {sizes['buffer']} records · archive {counts.get('summary', 0)} records (all)"
    )
    by_conv: dict[str, dict[str, list[Any]]] = {}
    for ep in episodes:
        by_conv.setdefault(ep.metadata["conversation_id"], {}).setdefault(ep.metadata["session_id"], []).append(ep)
    for conv_id in sorted(by_conv):
        sessions = by_conv[conv_id]
        conv_node = root.add(f"[bold cyan]{escape(conv_id)}[/] · {len(sessions)} sessions")
        for sid in sorted(sessions, key=lambda s: (len(s), s)):
            eps = sorted(sessions[sid], key=lambda e: e.payload["start_position"])
            when = eps[0].payload.get("timestamp_raw") or ""
            s_node = conv_node.add(f"session {escape(sid)} [dim]{escape(when)}[/] · {len(eps)} episodes")
            for ep in eps:
                _add_episode(s_node, ep.payload, summaries.get((conv_id, ep.payload["id"])))
    return root


def _add_episode(session: Tree, p: dict[str, Any], summary: Any) -> None:
    """One episode under its session, with its summary (stored text, escaped: it is never markup)."""
    state = " · [yellow]open[/] (closes when the chat goes quiet)" if p.get("open") else ""
    node = session.add(
        f"[green]{escape(p['id'])}[/] · {len(p['turn_ids'])} turns "
        f"({escape(p['turn_ids'][0])} … {escape(p['turn_ids'][-1])}){state}"
    )
    if summary:
        node.add(
            f"[magenta]{escape(summary.unit_id)}[/] [dim]({escape(str(summary.payload.get('method')))})[/] "
            f"{escape(summary.document[:160])}"
        )


def _show_unit(store: MemoryStore, user: str, conversation: str | None, unit: str) -> None:
    """One unit of any kind, what it contains one level down, and its raw turns."""
    found = [
        (lv, r)
        for lv in reversed(levels.levels())
        for r in store.get(lv.kind, user_id=user, conversation_id=conversation, unit_ids=[unit])
    ]
    if not found:
        _fail(f"no unit {unit!r} for user {user!r}")
    level, record = found[0]
    item = level.unit.model_validate(record.payload)
    console.print(
        f"[bold]{level.kind}[/] {escape(unit)} · conversation {escape(item.conversation_id)} · "
        f"{escape(level.description)}"
    )
    console.print(record.document, markup=False)
    for child_id in item.child_ids():
        for lv in levels.levels():
            child = store.get(lv.kind, user_id=user, conversation_id=item.conversation_id, unit_ids=[child_id])
            if child and lv.role != "raw":
                console.print(f"\n[bold]contains {lv.kind}[/] {escape(child_id)}:")
                console.print(child[0].document, markup=False)
    raws = store.get(
        levels.raw_kind(),
        user_id=user,
        conversation_id=item.conversation_id,
        unit_ids=item.linked_turn_ids() or item.child_ids(),
    )
    if raws and level.role != "raw":
        console.print(f"\n[bold]raw turns[/] ({len(raws)}):")
        for r in sorted(raws, key=lambda r: (r.metadata.get("session_id", ""), r.metadata.get("position", 0))):
            console.print(f"{r.unit_id}  {r.document}", markup=False)
