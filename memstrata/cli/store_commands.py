"""The commands over the store and whole users: ``check``, ``users``, ``export``, ``import`` and ``reindex``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memstrata.cli import (
    FLAG,
    ChromaUrl,
    DataDir,
    User,
    _fail,
    _mem,
    _read_mem,
    _say,
    _store_mem,
    _user_given,
    _writable,
    console,
)
from memstrata.memory import levels

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore


def check(
    user: User,
    conversation: Annotated[str | None, typer.Option("--conversation", "-c", help="Only this conversation.")] = None,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            metavar=FLAG,
            help="rebuild everything derived from the raw turns (of the conversation, or of every one), then check",
        ),
    ] = False,
) -> None:
    """Verify the invariants every write keeps (parents, entities, edges, counters, word index, positions)."""
    from memstrata.memory.store.invariants import check_store

    mem = _read_mem(data_dir, chroma_url, user, conversation)
    store = mem.store
    if repair:
        _say("rebuilt", json.dumps(mem.rebuild(user_id=user, conversation_id=conversation)), style="green")
    problems = check_store(store, user, conversation)
    for problem in problems:
        console.print(str(problem), markup=False)
    if problems:
        _fail(f"{len(problems)} problem(s) in {_checked(store, user, conversation)}", code=1)
    console.print(f"checked {_checked(store, user, conversation)}: no problems", markup=False)


def _checked(store: MemoryStore, user: str, conversation: str | None) -> str:
    """What ``check`` covered, so a clean result shows it read the memory: "user 'ann': 3 conversations, ..."."""
    scope: dict[str, Any] = {"user_id": user, "conversation_id": conversation}
    turns = store.get(levels.raw_kind(), **scope)
    units = sum(store.count(lv.kind, **scope) for lv in levels.levels())
    what = f"conversation {conversation!r} of user {user!r}" if conversation else f"user {user!r}"
    n = len({r.metadata["conversation_id"] for r in turns})
    return f"{what}: {n} conversation{'s' * (n != 1)}, {len(turns)} turns, {units} units"


def users(data_dir: DataDir = None, chroma_url: ChromaUrl = None) -> None:
    """List every user with memory in the store, one a line."""
    found = _store_mem(data_dir, chroma_url).users()
    for user in found:
        typer.echo(user)
    if not found:
        _say("note", "the store holds no user", style="yellow")


def export(
    user: User,
    out: Annotated[Path, typer.Argument(help="The JSON-lines file to write ('-': standard output).")],
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """Write a user's memory as JSON lines: everything that cannot be rebuilt (turns, sessions, store items,
    history, tombstones, persona exclusions). `memstrata import` reads it back.
    """
    mem = _read_mem(data_dir, chroma_url, user, or_history=True)
    if str(out) != "-":
        _writable(out, "the export file")
    try:
        counts = mem.export(sys.stdout if str(out) == "-" else out, user_id=user)
    except LookupError as exc:
        _fail(exc)
    _say("exported", json.dumps(counts), style="green")


def import_(
    source: Annotated[Path, typer.Argument(help="A file written by `memstrata export` ('-': standard input).")],
    as_user: Annotated[
        str | None, typer.Option("--as", help="Import under this user id instead of the exported one.")
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", metavar=FLAG, help="Delete that user's memory first, if it has any.")
    ] = False,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """Read a user's memory from `memstrata export` and rebuild what is derived (the store is created if needed)."""
    if as_user is not None:
        _user_given(as_user)
    if str(source) != "-" and not source.is_file():
        _fail(f"{source}: no such file")
    mem = _mem(data_dir, chroma_url)
    try:
        counts = mem.import_(sys.stdin if str(source) == "-" else source, user_id=as_user, replace=replace)
    except ValueError as exc:
        _fail(exc)
    typer.echo(json.dumps(counts))


def reindex(
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
    words_only: Annotated[
        bool,
        typer.Option(
            "--words",
            metavar=FLAG,
            help="only rebuild the word index from the stored text: an embedded store's file, a server store's "
            "per-unit terms (no re-embedding)",
        ),
    ] = False,
    tiers: Annotated[
        bool,
        typer.Option(
            "--tiers",
            metavar=FLAG,
            help="only score and tier (HMO) what was written while tiers were off, for every user (no re-embedding)",
        ),
    ] = False,
) -> None:
    """Re-embed every collection with the current embedder (after changing models), and rebuild the word index."""
    mem = _store_mem(data_dir, chroma_url)
    if tiers:
        typer.echo(json.dumps(mem.score_tiers()))
        return
    store = mem.store
    embedded = {} if words_only else {"embedded": store.reindex()}
    typer.echo(json.dumps({**embedded, "words": store.index_words()}))
