"""The commands over single memories: ``list``, ``update``, ``delete``, ``history`` and ``forget``."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from memstrata.cli import FLAG, ChromaUrl, DataDir, User, _fail, _meta_pairs, _read_mem, _say, console


def list_memories(
    user: User,
    conversation: Annotated[str | None, typer.Option("--conversation", "-c", help="Only this conversation.")] = None,
    kind: Annotated[str, typer.Option("--kind", help="turn, fact, summary, episode, theme, persona...")] = "turn",
    speaker: Annotated[str | None, typer.Option("--speaker", help="Only turns of this speaker.")] = None,
    since: Annotated[str | None, typer.Option("--since", help="From this time on (e.g. 2024-04-01).")] = None,
    until: Annotated[str | None, typer.Option("--until", help="Up to this time.")] = None,
    meta: Annotated[
        list[str] | None,
        typer.Option(
            "--meta",
            help=(
                "NAME=VALUE: only memories whose write attached this metadata (repeat for several; a number or "
                "true/false matches as such)."
            ),
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000, help="Rows per page.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Rows skipped (the page's start).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", metavar=FLAG, help="Print the rows as JSON.")] = False,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """List a user's memories in time order: one kind, with filters and paging (and its conversations)."""
    mem = _read_mem(data_dir, chroma_url, user, conversation)
    try:
        rows = mem.memories(
            user_id=user,
            kind=kind,
            conversation_id=conversation,
            speaker=speaker,
            since=since,
            until=until,
            metadata=_meta_pairs(meta or []),
            limit=limit,
            offset=offset,
        )
    except (KeyError, ValueError) as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps([{k: v for k, v in r.items() if k != "unit"} for r in rows], default=str))
        return
    table = Table(title=Text(f"{user} · {kind} · {offset + 1}-{offset + len(rows)}"))
    for column in ("id", "conversation", "time", "text"):
        table.add_column(column)
    for r in rows:  # stored text as plain Text: brackets in it are what was said, not markup
        table.add_row(Text(r["id"]), Text(r["conversation_id"]), Text(str(r["time"] or "")), Text(r["text"][:140]))
    console.print(table)


def update(
    user: User,
    conversation: Annotated[str, typer.Option("--conversation", "-c", help="The turn's conversation.")],
    turn: Annotated[str, typer.Option("--turn", help="The turn id (as `list` shows it).")],
    text: Annotated[str, typer.Option("--text", help="What the turn says now.")],
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """Replace what one turn says; everything built from it is rebuilt."""
    mem = _read_mem(data_dir, chroma_url, user, conversation)
    try:
        done = mem.update(turn, text, user_id=user, conversation_id=conversation)
    except (LookupError, ValueError) as exc:
        _fail(exc)
    typer.echo(json.dumps(done))


def delete(
    user: User,
    conversation: Annotated[str, typer.Option("--conversation", "-c", help="The conversation.")],
    turn: Annotated[str | None, typer.Option("--turn", help="Only this turn (else the whole conversation).")] = None,
    yes: Annotated[bool, typer.Option("--yes", metavar=FLAG, help="Do not ask for confirmation.")] = False,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """Delete one turn (its session rebuilt without it) or a whole conversation."""
    mem = _read_mem(data_dir, chroma_url, user, conversation)
    what = f"turn {turn!r} of" if turn else "all of conversation"
    if not yes and not typer.confirm(f"Delete {what} {conversation!r} of user {user!r}?"):
        raise typer.Exit(code=1)
    try:
        removed = mem.delete(turn, user_id=user, conversation_id=conversation)
    except LookupError as exc:
        _fail(exc)
    typer.echo(json.dumps(removed))


def history(
    user: User,
    conversation: Annotated[str | None, typer.Option("--conversation", "-c", help="Only this conversation.")] = None,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """What was updated or deleted in a user's memory, oldest first: one JSON object a line."""
    mem = _read_mem(data_dir, chroma_url, user, conversation, or_history=True)
    events = mem.history(user_id=user, conversation_id=conversation)
    for event in events:
        typer.echo(json.dumps(event, default=str))  # never wrapped; `at` is whatever the journal keeps
    if not events:
        _say("note", f"nothing updated or deleted for user {user!r}", style="dim")


def forget(
    user: User,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
    yes: Annotated[bool, typer.Option("--yes", metavar=FLAG, help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete every trace of a user."""
    mem = _read_mem(data_dir, chroma_url, user, or_history=True)
    if not yes and not typer.confirm(f"Delete all memory of user {user!r}?"):
        raise typer.Exit(code=1)
    typer.echo(json.dumps(mem.delete_user(user_id=user)))
