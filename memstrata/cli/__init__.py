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

This module holds the app, the options and errors every command shares, and the store a command opens; the
commands live in ``ingest_command``, ``ask_command``, ``inspect_command``, ``memory_commands`` (single memories)
and ``store_commands`` (the store and whole users); ``bench`` comes from the benchmark distribution
(``benchmarks/``, :mod:`memstrata_bench.cli`) when it is installed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypedDict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from memstrata.client import Memstrata
from memstrata.context import CHROMA_URL_ENV, MODEL_ENV, default_data_dir
from memstrata.errors import StoreError
from memstrata.memory import levels

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
    # Every command builds its Memstrata here, from this module's name, so swapping ``memstrata.cli.Memstrata``
    # (as the tests do, for hash embeddings) reaches every command.
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
    if or_history and mem.history(user_id=user, conversation_id=conversation):
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


def _add_commands() -> None:
    """Register the commands, in the order ``--help`` lists them. Their modules import the options and helpers
    above from this package, so they are imported here, once those exist.
    """
    from memstrata.cli.ask_command import ask
    from memstrata.cli.ingest_command import ingest
    from memstrata.cli.inspect_command import inspect
    from memstrata.cli.memory_commands import delete, forget, history, list_memories, update
    from memstrata.cli.store_commands import check, export, import_, reindex, users

    app.command()(ingest)
    app.command()(ask)
    app.command()(inspect)
    app.command("list")(list_memories)
    app.command()(update)
    app.command()(delete)
    app.command()(history)
    app.command()(forget)
    app.command()(check)
    app.command()(users)
    app.command()(export)
    app.command("import")(import_)
    app.command()(reindex)


BENCH_MISSING = (
    "memstrata bench needs the benchmark package, which is not part of the library: from a clone of the repository, "
    "pip install -e benchmarks/"
)


def _mount_bench() -> None:
    """``memstrata bench`` from the benchmark distribution (``benchmarks/``, package ``memstrata_bench``) when it is
    installed; otherwise a command that says how to install it and exits 2.
    """
    try:
        from memstrata_bench.cli import bench_app
    except ImportError as exc:
        missing = exc.name is not None and exc.name.split(".")[0] == "memstrata_bench"
        why = BENCH_MISSING if missing else f"memstrata bench is unavailable: {exc}"

        @app.command(
            "bench",
            help="Benchmarks (needs the benchmark package: pip install -e benchmarks/).",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
        )
        def bench_unavailable(ctx: typer.Context) -> None:
            typer.echo(f"error: {why}", err=True)
            raise typer.Exit(2)

        return
    app.add_typer(bench_app, name="bench", help="Benchmarks (LoCoMo evidence recall under a token budget).")


_add_commands()
_mount_bench()
