"""The ``memstrata`` command line: ingest, ask, inspect, list, update, delete, history, check, users, export, import,
reindex, forget, bench.

The data directory is ``--data-dir``, else ``$MEMSTRATA_DATA_DIR``, else
``~/.memstrata`` (an embedded Chroma store). ``--chroma-url`` (or
``$MEMSTRATA_CHROMA_URL``) uses a Chroma server instead. Only ``ingest`` and ``import``
create a store; every other command needs one that holds the user (and conversation).
Stored text is printed as data, never read as console markup. A failure is one
line on stderr: exit code 2 for bad input, a missing store, user or conversation,
an unreachable Chroma server or a model with no endpoint; 1 when ``check`` finds
problems; 130 when an ingest is interrupted (the same command resumes it).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypedDict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from rich.tree import Tree
from typer.core import TyperGroup

from memstrata.client import Memstrata
from memstrata.context import CHROMA_URL_ENV, MODEL_ENV, default_data_dir
from memstrata.memory import levels
from memstrata.memory.index.active import tier_sizes
from memstrata.memory.normalize import IngestError
from memstrata.memory.store import StoreError
from memstrata.memory.timeparse import parse_timestamp
from memstrata.runtime.llm import AnswerError
from memstrata.views.extractive_answer import extractive_answer

if TYPE_CHECKING:
    from typer._click import Context as ClickContext  # typer ships its own click; its groups are given this context

# Spelled out rather than imported: the CLI must run on a memstrata whose Context predates these settings.
INGEST_MODEL_ENV = "MEMSTRATA_INGEST_MODEL"
BASE_URL_ENVS = ("MEMSTRATA_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE")


class _Cli(TyperGroup):
    """The app's group: a store error a command did not expect (a Chroma server that stops answering mid-command)
    reaches the user as one line and exit code 2, not a traceback, whichever command met it.
    """

    def invoke(self, ctx: ClickContext) -> Any:
        try:
            return super().invoke(ctx)
        except StoreError as exc:
            _fail(exc)


app = typer.Typer(no_args_is_help=True, cls=_Cli)
# No emoji codes: stored text saying ":smile:" is printed as said (markup is escaped or off wherever it is printed).
console = Console(emoji=False)
err = Console(stderr=True, emoji=False)


def _say(label: str, message: object, *, style: str = "bold red") -> None:
    """One line on stderr: the message is data (escaped), and never hard-wrapped, so it stays one line."""
    err.print(f"[{style}]{label}:[/] {escape(str(message))}", soft_wrap=True, highlight=False)


def _fail(problem: str | Exception, *, code: int = 2) -> NoReturn:
    _say("error", problem)
    raise typer.Exit(code=code)


def _user_given(value: str) -> str:
    """The ``--user`` callback: a blank id would reach the store as a traceback deep in a read or a write."""
    if not value.strip():
        _fail("--user is empty: give the id of the user whose memory this is")
    return value


DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Embedded store folder (default $MEMSTRATA_DATA_DIR or ~/.memstrata).")
]
ChromaUrl = Annotated[
    str | None, typer.Option("--chroma-url", help="Use a Chroma server instead of the embedded store.")
]
User = Annotated[
    str, typer.Option("--user", "-u", callback=_user_given, help="The user whose memory this is (tenant id).")
]
Model = Annotated[
    str | None,
    typer.Option("--model", help="Chat model for LLM mode (else offline); needs OPENAI_API_KEY or --base-url."),
]
BaseUrl = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="OpenAI-compatible server the model is called at, e.g. http://localhost:8080/v1 "
        "(default $MEMSTRATA_BASE_URL, then $OPENAI_BASE_URL).",
    ),
]
IngestModel = Annotated[
    str | None,
    typer.Option(
        "--ingest-model", help="Chat model for ingestion only (default $MEMSTRATA_INGEST_MODEL, else --model)."
    ),
]
FLAG = ""  # a flag's metavar: the help shows no value to give (typer would show "<bool>", yet takes none)


def _where(data_dir: Path | None, chroma_url: str | None) -> tuple[Path, str | None]:
    """The embedded folder and the server URL a command uses (the URL, when set, wins, as in ``Memstrata``)."""
    return data_dir or default_data_dir(), chroma_url or os.environ.get(CHROMA_URL_ENV) or None


class _ModelSettings(TypedDict, total=False):
    """The model options a command was given (:func:`_model_settings`), as ``Context`` settings."""

    model: str
    base_url: str
    ingest_model: str


def _model_settings(model: str | None, base_url: str | None, ingest_model: str | None) -> _ModelSettings:
    """The model options given, to pass on (only those: a Context without ``base_url`` still runs the rest).

    Checked before any work: a model name with neither ``OPENAI_API_KEY`` nor a base URL would fail every call.
    """
    named = [
        (option if value is not None else f"${env}", value if value is not None else os.environ.get(env))
        for option, value, env in (("--model", model, MODEL_ENV), ("--ingest-model", ingest_model, INGEST_MODEL_ENV))
    ]
    endpoint = base_url or next((os.environ[e] for e in BASE_URL_ENVS if os.environ.get(e)), None)
    needs_key = not endpoint or "api.openai.com" in endpoint
    for source, name in named:
        if name and needs_key and not os.environ.get("OPENAI_API_KEY"):
            _fail(
                f"{source} {name!r} has no endpoint: set OPENAI_API_KEY (OpenAI's API), or pass --base-url "
                "(or set $MEMSTRATA_BASE_URL) to an OpenAI-compatible server such as http://localhost:8080/v1"
            )
    given = _ModelSettings()
    if model is not None:
        given["model"] = model
    if base_url is not None:
        given["base_url"] = base_url
    if ingest_model is not None:
        given["ingest_model"] = ingest_model
    return given


def _mem(data_dir: Path | None, chroma_url: str | None, **settings: Any) -> Memstrata:
    folder, url = _where(data_dir, chroma_url)
    if not url and folder.exists() and not folder.is_dir():
        _fail(f"--data-dir {folder} is a file, not a store folder")
    try:
        mem = Memstrata(path=folder, url=chroma_url, **settings)
    except (TypeError, ValueError) as exc:  # a setting this memstrata lacks, or a model it cannot call
        _fail(exc)
    if url:
        _reach(mem, url)
    return mem


def _reach(mem: Memstrata, url: str) -> None:
    """Open a server store now: every command then meets an unreachable server here, as one line naming the fix,
    rather than as a traceback from its first read.
    """
    try:
        _ = mem.store
    except StoreError as exc:
        if exc.__cause__ is None:  # no connection was tried (a malformed URL): its own message says what is wrong
            _fail(exc)
        _fail(
            f"the Chroma server at {url} is unreachable ({exc.__cause__}): start it (chroma run --path DIR "
            f"--port PORT) or check --chroma-url (or ${CHROMA_URL_ENV})"
        )


def _store_mem(data_dir: Path | None, chroma_url: str | None, **settings: Any) -> Memstrata:
    """An existing store: a command that reads, checks or removes never creates one in a mistyped folder."""
    folder, url = _where(data_dir, chroma_url)
    if not url and not folder.is_dir():
        held = " (it is a file)" if folder.exists() else ""
        _fail(f"no memstrata store at {folder}{held}: ingest into it first, or pass the right --data-dir")
    return _mem(data_dir, chroma_url, **settings)


def _read_mem(
    data_dir: Path | None,
    chroma_url: str | None,
    user: str,
    conversation: str | None = None,
    *,
    or_history: bool = False,
    **settings: Any,
) -> Memstrata:
    """The store a reading command reads: never created by reading, and holding the user (and conversation).

    With ``or_history``, a user (or conversation) whose memory was all deleted still counts while its history
    of updates and deletions is kept.
    """
    mem = _store_mem(data_dir, chroma_url, **settings)
    if mem.store.count(levels.raw_kind(), user_id=user, conversation_id=conversation):
        return mem
    if or_history and mem.history(user, conversation_id=conversation):
        return mem
    where = f"conversation {conversation!r} of user {user!r}" if conversation else f"user {user!r}"
    held = (
        " (the user has other conversations)"
        if conversation and mem.store.count(levels.raw_kind(), user_id=user)
        else ""
    )
    folder, url = _where(data_dir, chroma_url)
    _fail(f"no memory for {where} in {url or folder}{held}")


def _writable(path: Path | None, option: str) -> None:
    if path is not None and not path.parent.is_dir():
        _fail(f"{option} {path}: the folder {path.parent} does not exist")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        console.print(f"memstrata {version('memstrata')}")
        raise typer.Exit


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", metavar=FLAG, callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """memstrata: long-term hierarchical memory for LLM agents."""


def _meta_pairs(pairs: list[str]) -> dict[str, Any] | None:
    """``NAME=VALUE`` options as metadata (to attach, or to filter on); a value that reads as a JSON number or
    boolean is one.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            _fail(ValueError(f"--meta {pair!r}: expected NAME=VALUE"))
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[name.strip()] = value if isinstance(value, (int, float, bool)) else raw
    return out or None


@app.command()
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


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    user: User,
    conversation: Annotated[str | None, typer.Option("--conversation", "-c", help="Only this conversation.")] = None,
    budget: Annotated[
        int, typer.Option("--budget", "-b", min=1, max=1_000_000, help="Context budget in tokens.")
    ] = 1500,
    model: Model = None,
    base_url: BaseUrl = None,
    ingest_model: IngestModel = None,
    as_json: Annotated[bool, typer.Option("--json", metavar=FLAG, help="Print the full result as JSON.")] = False,
    top: Annotated[int, typer.Option("--top", min=1, help="Evidence rows shown ranked before the context.")] = 5,
    html: Annotated[Path | None, typer.Option("--html", help="Also write the query's trace as an HTML page.")] = None,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """Answer from memory (with a model), or show the best evidence ranked and the cited context (offline)."""
    _writable(html, "--html")
    settings = _model_settings(model, base_url, ingest_model)
    mem = _read_mem(data_dir, chroma_url, user, conversation, **settings)
    failed = False
    try:
        result = mem.ask(question, user_id=user, conversation_id=conversation, context_budget=budget)
    except AnswerError as exc:  # the model failed: say so, still show the evidence, exit 2
        _say("error", exc)
        result, failed = exc.result, True
    except (StoreError, ValueError) as exc:
        _fail(exc)
    if html is not None:
        from memstrata.views.pages import trace_page

        html.write_text(trace_page(result), encoding="utf-8")
        err.print(Text(f"wrote {html}", style="dim"))
    if as_json:
        console.print_json(result.model_dump_json())
        return
    _print_result(question, result, budget, top)
    if failed:
        raise typer.Exit(code=2)


def _print_result(question: str, result: Any, budget: int, top: int) -> None:
    """The answer (or an extractive one), the path taken, the best evidence ranked, and the packed context."""
    if result.answer is not None:
        console.print(Text.assemble(("answer:", "bold"), " ", result.answer, "\n"))
    elif result.trace.get("path") == "light" and result.evidence:
        found = extractive_answer(
            question, [(f"{e.speaker}: {e.text}", parse_timestamp(e.time)) for e in result.evidence]
        )
        if found:
            console.print(
                Text.assemble(
                    ("extractive answer", "bold"), (" (a clause of the best turn, no model)", "dim"), ": ", found, "\n"
                )
            )
    trace = result.trace
    line = (
        f"path: {trace.get('path')} · iterations: {trace.get('iterations')} · "
        f"{len(result.evidence)} turns · {result.context_tokens}/{budget} tokens · "
        f"llm calls: {trace.get('llm', {}).get('calls', 0)}"
    )
    console.print(Text(line, style="dim"))
    for gate in trace.get("gate", []):
        console.print(Text(f"gate {gate['iteration']}: {gate['path']} ({gate['reason']})", style="dim"))
    if not result.evidence:
        console.print("[yellow]no evidence found[/]")
        return
    console.print(_evidence_table(result.evidence[:top]))
    console.print("\n[bold]packed context[/] [dim](chronological, as a prompt would get it)[/]")
    console.print(result.context, markup=False)


def _evidence_table(evidence: list[Any]) -> Table:
    """The best evidence first, with its citation and why it ranked there (stored text as plain ``Text``)."""
    table = Table(title="best evidence, ranked (score order, then MMR spreads near-repeats)", title_justify="left")
    for column in ("#", "cite", "turn", "score", "why"):
        table.add_column(column, overflow="fold")
    for rank, e in enumerate(evidence, 1):
        parts = e.score_parts
        how = f"via {e.found_by}" if e.level == "level1" else "raw-turn search"
        why = f"{how}; own match {parts.get('own', 0):.2f}, fused {parts.get('semantic', 0):.2f}" + (
            f", time {parts['temporal']:.2f}" if parts.get("temporal") else ""
        )
        cite = e.turn_id + (f" · {e.time}" if e.time else "")
        table.add_row(str(rank), Text(cite), Text(f"{e.speaker}: {e.text}"[:160]), f"{e.score:.3f}", Text(why))
    return table


@app.command()
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


def _tree(store: Any, user: str, conversation: str | None) -> Tree:
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


def _show_unit(store: Any, user: str, conversation: str | None, unit: str) -> None:
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


@app.command("list")
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
            user,
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


@app.command()
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
        done = mem.update(user, conversation, turn, text)
    except (LookupError, ValueError) as exc:
        _fail(exc)
    typer.echo(json.dumps(done))


@app.command()
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
        removed = mem.delete(user, conversation, turn)
    except LookupError as exc:
        _fail(exc)
    typer.echo(json.dumps(removed))


@app.command()
def history(
    user: User,
    conversation: Annotated[str | None, typer.Option("--conversation", "-c", help="Only this conversation.")] = None,
    data_dir: DataDir = None,
    chroma_url: ChromaUrl = None,
) -> None:
    """What was updated or deleted in a user's memory, oldest first: one JSON object a line."""
    mem = _read_mem(data_dir, chroma_url, user, conversation, or_history=True)
    events = mem.history(user, conversation_id=conversation)
    for event in events:
        typer.echo(json.dumps(event, default=str))  # never wrapped; `at` is whatever the journal keeps
    if not events:
        _say("note", f"nothing updated or deleted for user {user!r}", style="dim")


@app.command()
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
    typer.echo(json.dumps(mem.delete_user(user)))


@app.command()
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
        _say("rebuilt", json.dumps(mem.rebuild(user, conversation_id=conversation)), style="green")
    problems = check_store(store, user, conversation)
    for problem in problems:
        console.print(str(problem), markup=False)
    if problems:
        _fail(f"{len(problems)} problem(s) in {_checked(store, user, conversation)}", code=1)
    console.print(f"checked {_checked(store, user, conversation)}: no problems", markup=False)


def _checked(store: Any, user: str, conversation: str | None) -> str:
    """What ``check`` covered, so a clean result shows it read the memory: "user 'ann': 3 conversations, ..."."""
    scope = {"user_id": user, "conversation_id": conversation}
    turns = store.get(levels.raw_kind(), **scope)
    units = sum(store.count(lv.kind, **scope) for lv in levels.levels())
    what = f"conversation {conversation!r} of user {user!r}" if conversation else f"user {user!r}"
    n = len({r.metadata["conversation_id"] for r in turns})
    return f"{what}: {n} conversation{'s' * (n != 1)}, {len(turns)} turns, {units} units"


@app.command()
def users(data_dir: DataDir = None, chroma_url: ChromaUrl = None) -> None:
    """List every user with memory in the store, one a line."""
    found = _store_mem(data_dir, chroma_url).users()
    for user in found:
        typer.echo(user)
    if not found:
        _say("note", "the store holds no user", style="yellow")


@app.command()
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
        counts = mem.export(user, sys.stdout if str(out) == "-" else out)
    except LookupError as exc:
        _fail(exc)
    _say("exported", json.dumps(counts), style="green")


@app.command("import")
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


@app.command()
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


def _mount_bench() -> None:
    try:
        from memstrata.bench.cli import bench_app
    except ImportError as exc:  # pragma: no cover - the bench ships with the package
        logging.getLogger(__name__).debug("bench unavailable: %s", exc)
        return
    app.add_typer(bench_app, name="bench", help="Benchmarks (LoCoMo evidence recall under a token budget).")


_mount_bench()

if __name__ == "__main__":  # pragma: no cover
    app()
