"""``memstrata ingest``: conversations into a user's memory, under a progress bar, with what was written."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memstrata.cli import (
    FLAG,
    BaseUrl,
    ChromaUrl,
    DataDir,
    IngestModel,
    Model,
    User,
    _fail,
    _mem,
    _meta_pairs,
    _model_settings,
    _say,
    _where,
    console,
)
from memstrata.errors import IngestError, StoreError

if TYPE_CHECKING:
    from memstrata.client import Memstrata


def ingest(
    path: Annotated[
        Path,
        typer.Argument(help="LoCoMo JSON, or a JSON list of {speaker, text, timestamp} messages; - reads stdin."),
    ],
    user: User,
    conversation: Annotated[
        str | None,
        typer.Option(
            "--conversation",
            "-c",
            help="Only this conversation (LoCoMo sample_id), or the id for a plain message list.",
        ),
    ] = None,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
    model: Model = None,
    base_url: BaseUrl = None,
    ingest_model: IngestModel = None,
    close: Annotated[
        bool,
        typer.Option(
            "--close",
            metavar=FLAG,
            help="Close every session's open episode now (a finished record); else it closes when the chat goes quiet.",
        ),
    ] = False,
    meta: Annotated[
        list[str] | None,
        typer.Option(
            "--meta",
            help=("NAME=VALUE attached to every message written (repeat for several); `list --meta` filters on it."),
        ),
    ] = None,
) -> None:
    """Ingest conversations into a user's memory: messages with ids or times are stored once, others appended."""
    settings = _model_settings(model, base_url, ingest_model)
    source = _ingest_source(path)  # before the store opens: a mistyped file name leaves no empty store behind
    metadata = _meta_pairs(meta or [])
    folder, url = _where(data_dir, chroma_url)
    fresh = not url and not folder.exists()
    mem = _mem(data_dir, chroma_url, **settings)
    try:
        # For LoCoMo files --conversation selects a sample_id; for message lists it names the conversation.
        stats = _ingest_with_progress(
            mem,
            source,
            user_id=user,
            conversation_id=conversation,
            only_conversation=conversation,
            close=close,
            metadata=metadata,
        )
    except (IngestError, StoreError) as exc:
        if fresh:
            _drop_if_empty(mem, folder)
        _fail(exc)
    except KeyboardInterrupt:
        _fail("interrupted: run the same command again to resume where it stopped (what was stored is kept)", code=130)
    for warning in stats.get("warnings", []):
        _say("warning", warning, style="yellow")
    console.print(_stats_table(stats))


def _ingest_source(path: Path) -> Any:
    """The file to ingest, or for ``-`` the JSON read from stdin, checked before any store is opened."""
    if str(path) != "-":
        if not path.is_file():
            _fail(f"{path}: no such file")
        return path
    try:
        return json.loads(sys.stdin.read())
    except json.JSONDecodeError as exc:
        _fail(f"<stdin>: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")
    except UnicodeDecodeError as exc:
        _fail(f"<stdin>: not UTF-8 text ({exc.reason})")


def _ingest_with_progress(mem: Memstrata, source: Any, **options: Any) -> dict[str, Any]:
    """``Memstrata.ingest`` under a progress bar that leaves nothing behind, on success or error."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("reading", total=None)

        def on_progress(event: dict[str, Any]) -> None:
            if event.get("stage") == "load":
                bar.update(task, total=event.get("total_turns"), description="embedding turns")
            elif event.get("stage") == "turns":
                bar.advance(task, event.get("done", 0))
            bar.update(task, description=escape(event.get("message", "")[:70]))  # may quote the input

        stats = mem.ingest(source, on_progress=on_progress, **options)
        bar.update(task, completed=bar.tasks[0].total or 0)
    return stats


def _drop_if_empty(mem: Memstrata, folder: Path) -> None:
    """Remove the store folder this ingest created, when the failure left no turn of anyone in it (input that fails
    to normalize is found after the store opened): a later command would take the empty folder for a store.
    """
    try:
        empty = not mem.store.users()
    except StoreError:
        return
    if empty:
        mem.close()
        shutil.rmtree(folder, ignore_errors=True)


def _stats_table(stats: dict[str, Any]) -> Table:
    table = Table(title="ingest", show_header=False)
    for key in (
        "conversations",
        "turns_seen",
        "turns_added",
        "sessions_touched",
        "episodes_written",
        "episodes_replaced",
        "summaries_written",
        "seconds",
        "turns_per_second",
    ):
        if key in stats:
            table.add_row(key, str(stats[key]))
    for node, row in (stats.get("llm") or {}).items():
        table.add_row(
            f"llm {node}",
            f"{row.get('calls', 0)} calls, {row.get('prompt_tokens', 0)}+"
            f"{row.get('completion_tokens', 0)} tokens, {row.get('fallbacks', 0)} fallbacks",
        )
    return table
