r"""``memstrata bench``: benchmark commands (mounted by the main CLI as a sub-app): locomo, longmemeval, chat,
chat-turn, scale, tenants.

Example:
    $ python -m memstrata_bench.cli locomo ../shared/data/locomo/locomo10.json \
        --methods bm25,dense,hybrid_rrf,random
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from memstrata.context import GROUPS, Context, nested
from memstrata.runtime.process import limit_blas
from memstrata_bench.provenance import provenance
from memstrata_bench.report import plot_recall, results_tables
from memstrata_bench.runner import DEFAULT_BUDGETS, METHOD_NAMES, run_locomo
from memstrata_bench.tuning import BLAS_THREADS  # the cap every method of a bench run runs under

bench_app = typer.Typer(name="bench", help="Benchmarks: evidence recall under a token budget.", no_args_is_help=True)


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [part.strip() for part in value.split(",") if part.strip()]


def _budgets(value: str) -> tuple[int, ...]:
    try:
        parsed = tuple(int(b) for b in _split(value) or [])
    except ValueError as exc:
        msg = f"--budgets must be comma-separated positive integers, got {value!r}"
        raise typer.BadParameter(msg) from exc
    if not parsed or min(parsed) < 1:
        msg = f"--budgets must be comma-separated positive integers, got {value!r}"
        raise typer.BadParameter(msg)
    return parsed


def _settings(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as Context settings, KEY a field or ``group.field`` (``themes.search_k=0``); a VALUE that
    reads as JSON is taken as such, else as text.
    """
    known = {f.name for f in dataclasses.fields(Context)}
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        group, dot, name = key.partition(".")
        fine = (key in known and group not in GROUPS) or (dot and group in GROUPS and name in _fields(GROUPS[group]))
        if not sep or not fine:
            msg = f"{pair!r}: expected KEY=VALUE with KEY a Context field or group.field (themes.search_k)"
            raise typer.BadParameter(msg, param_hint="--set")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return nested(out)


def _fields(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


def _methods(value: str | None) -> list[str] | None:
    names = _split(value)
    unknown = sorted(set(names or []) - set(METHOD_NAMES))
    if unknown:
        msg = f"--methods: unknown {unknown}; choose from {','.join(METHOD_NAMES)}"
        raise typer.BadParameter(msg)
    return names


@bench_app.callback()
def bench() -> None:
    """Benchmarks: evidence recall under a token budget."""


def command_line() -> str:
    """This process's command line, as a user would type it."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = f"python -m {spec.name}" if spec is not None and spec.name else Path(sys.argv[0]).name
    return " ".join([program, *(shlex.quote(a) for a in sys.argv[1:])])


@bench_app.command("locomo")
def locomo(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="locomo10.json")],
    conversations: Annotated[str | None, typer.Option(help="comma-separated sample ids, e.g. conv-26,conv-30")] = None,
    methods: Annotated[str | None, typer.Option(help=f"comma-separated, from {','.join(METHOD_NAMES)}")] = None,
    out: Annotated[Path, typer.Option(help="results JSON")] = Path("benchmarks/results/locomo.json"),
    plot: Annotated[Path, typer.Option(help="recall_all vs budget PNG")] = Path("benchmarks/results/locomo_recall.png"),
    budgets: Annotated[str, typer.Option(help="comma-separated token budgets")] = ",".join(map(str, DEFAULT_BUDGETS)),
    limit: Annotated[int | None, typer.Option(help="first N questions of each conversation only")] = None,
    torch_threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's own)")] = None,
    progress: Annotated[bool, typer.Option(metavar="", help="show progress bars")] = True,
    reader: Annotated[
        str | None,
        typer.Option(
            help=(
                "run memstrata in LLM mode and report its LLM cost: 'oracle' (an upper-bound instrument that knows the "
                "gold evidence; never answer quality), 'oracle-deep' (the same, forced onto the deep path), or the "
                "base URL of an OpenAI-compatible server"
            )
        ),
    ] = None,
    reader_model: Annotated[str, typer.Option(help="model name sent to a --reader URL")] = "smollm2",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help=(
                "a Context setting memstrata runs with, as KEY=VALUE (repeatable), for an ablation row; e.g. "
                "--set themes.search_k=0"
            ),
        ),
    ] = None,
) -> None:
    """Evidence recall@B of memstrata and the baselines on LoCoMo, measured in one run."""
    settings = _settings(set_ or [])
    if torch_threads is not None:
        import torch

        torch.set_num_threads(torch_threads)
    limit_blas(BLAS_THREADS)  # memstrata's default, set before any method runs: the baselines run under it too
    result = run_locomo(
        path,
        conversations=_split(conversations),
        budgets=_budgets(budgets),
        methods=_methods(methods),
        progress=progress,
        questions_per_conversation=limit,
        command=command_line(),
        reader=reader,
        reader_model=reader_model,
        settings=settings,
    )
    result["torch_threads"] = torch_threads
    result["settings"] = settings  # the Context fields memstrata ran with (--set)
    result["blas_threads"] = BLAS_THREADS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot_recall(result, plot)
    console = Console()
    for table in results_tables(result):
        console.print(table)
    console.print(
        f"{result['questions']} questions in {result['runtime_seconds']:.0f} s; "
        f"peak memory {result['peak_memory_mb']:.0f} MB; wrote {out} and {plot}"
    )


def _shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    index, sep, count = value.partition("/")
    if not (sep and index.isdigit() and count.isdigit() and 0 <= int(index) < int(count)):
        msg = f"--shard must be i/n with 0 <= i < n, e.g. 0/4, got {value!r}"
        raise typer.BadParameter(msg)
    return int(index), int(count)


@bench_app.command("longmemeval")
def longmemeval(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="LongMemEval .json or .json.gz")],
    methods: Annotated[str | None, typer.Option(help=f"comma-separated, from {','.join(METHOD_NAMES)}")] = None,
    out: Annotated[Path, typer.Option(help="results JSON")] = Path("benchmarks/results/longmemeval.json"),
    log: Annotated[
        Path | None,
        typer.Option(
            help="per-question results, one JSON line each, appended as the run goes; a log holding questions "
            "resumes (default: --out with .jsonl)"
        ),
    ] = None,
    plot: Annotated[Path | None, typer.Option(help="recall_all vs budget PNG (default: beside --out)")] = None,
    budgets: Annotated[str, typer.Option(help="comma-separated token budgets")] = "1000,2000,4000,8000",
    questions: Annotated[int | None, typer.Option(min=1, help="the first N selected questions only")] = None,
    per_type: Annotated[
        int | None, typer.Option(min=1, help="N questions of each type (abstention is a type here), drawn with --seed")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of the --per-type draw")] = 0,
    shard: Annotated[
        str | None, typer.Option(help="i/n: run every n-th selected question from the i-th (merge with --merge)")
    ] = None,
    merge: Annotated[
        list[Path] | None,
        typer.Option(
            help="run nothing: join these logs (repeatable; e.g. the shards') into --log and summarize the selected "
            "questions"
        ),
    ] = None,
    torch_threads: Annotated[int | None, typer.Option(help="torch CPU threads (default: torch's own)")] = None,
    progress: Annotated[bool, typer.Option(metavar="", help="show a progress bar")] = True,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="a Context setting memstrata runs with, as KEY=VALUE (repeatable)"),
    ] = None,
) -> None:
    """LongMemEval-S: evidence recall@B and the paper's ranked metrics of memstrata and the baselines, in one run."""
    from memstrata_bench.longmemeval_run import merge_longmemeval, plot_recall, results_tables, run_longmemeval

    settings = _settings(set_ or [])
    log = log or out.with_suffix(".jsonl")
    plot = plot or out.with_name(f"{out.stem}_recall.png")
    if merge:
        result = merge_longmemeval(
            path, merge, log=log, command=command_line(), questions=questions, per_type=per_type, seed=seed
        )
    else:
        if torch_threads is not None:
            import torch

            torch.set_num_threads(torch_threads)
        limit_blas(BLAS_THREADS)
        result = run_longmemeval(
            path,
            log=log,
            methods=_methods(methods),
            budgets=_budgets(budgets),
            shard=_shard(shard),
            settings=settings,
            progress=progress,
            command=command_line(),
            questions=questions,
            per_type=per_type,
            seed=seed,
        )
        result["torch_threads"] = torch_threads
        result["blas_threads"] = BLAS_THREADS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot_recall(result, plot)
    console = Console()
    for table in results_tables(result):
        console.print(table)
    missing = (
        f"; {len(result['questions_missing'])} selected questions not run yet" if result["questions_missing"] else ""
    )
    console.print(f"{result['questions']} questions{missing}; wrote {out}, {log} and {plot}")


@bench_app.command("chat")
def chat(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="locomo10.json")] = Path(
        "../shared/data/locomo/locomo10.json"
    ),
    conversation: Annotated[str | None, typer.Option(help="sample id (default: the file's first)")] = None,
    messages: Annotated[int, typer.Option(min=2, help="the conversation's first N turns")] = 60,
    one_session: Annotated[
        bool,
        typer.Option(
            metavar="",
            help=(
                "stamp the messages one minute apart in one live session; --no-one-session keeps each LoCoMo "
                "session's time"
            ),
        ),
    ] = True,
    ids: Annotated[bool, typer.Option(metavar="", help="send each message with its dia_id as its id")] = True,
    model: Annotated[
        str,
        typer.Option(
            help=(
                "'none' (offline), 'counting' (memstrata.testing.CountingChatModel: schema-valid replies, for "
                "counting calls and prompt tokens), or the base URL of an OpenAI-compatible server"
            )
        ),
    ] = "none",
    reader_model: Annotated[str, typer.Option(help="model name sent to a --model URL")] = "smollm2",
    recall: Annotated[
        bool, typer.Option(metavar="", help="score both stores on the questions whose evidence was written")
    ] = True,
    out: Annotated[Path, typer.Option(help="results JSON")] = Path("benchmarks/results/chat.json"),
    plot: Annotated[Path, typer.Option(help="prompt tokens and seconds per message, PNG")] = Path(
        "benchmarks/results/chat.png"
    ),
) -> None:
    """One conversation written a message at a time, against the same messages in one call."""
    from memstrata.memory.embeddings import MiniLMEmbeddings
    from memstrata_bench.chat import plot_chat, run_chat

    limit_blas(BLAS_THREADS)
    result = run_chat(
        path,
        embeddings=MiniLMEmbeddings(),
        conversation=conversation,
        messages=messages,
        one_session=one_session,
        ids=ids,
        model=model,
        reader_model=reader_model,
        recall=recall,
    )
    result["command"] = command_line()
    result["provenance"] = provenance(result["command"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot_chat(result, plot)
    summary = {k: result[k] for k in ("conversation", "messages", "model", "offline")}
    summary |= {k: result[k] for k in ("llm", "recall") if k in result}
    if "llm" in summary:
        summary["llm"] = {k: v for k, v in summary["llm"].items() if k not in ("stream", "batch")} | {
            "stream": {k: summary["llm"]["stream"][k] for k in ("calls", "prompt_tokens")},
            "batch": {k: summary["llm"]["batch"][k] for k in ("calls", "prompt_tokens")},
        }
    Console().print_json(json.dumps(summary))
    Console().print(f"wrote {out} and {plot}")


@bench_app.command("chat-turn")
def chat_turn(
    latency_ms: Annotated[float, typer.Option(min=0, help="each model call waits this long before replying")] = 500.0,
    reader: Annotated[
        str | None,
        typer.Option(help="the base URL of an OpenAI-compatible server (default: a scripted reader)"),
    ] = None,
    reader_model: Annotated[str, typer.Option(help="model name sent to a --reader URL")] = "smollm2",
    modes: Annotated[
        str | None, typer.Option(help="comma-separated, from light,deep,chat,paper-light,paper-deep (default: all)")
    ] = None,
    repeats: Annotated[int, typer.Option(min=1, help="times each question is asked in each mode")] = 1,
    out: Annotated[Path, typer.Option(help="results JSON")] = Path("benchmarks/results/chat_turn.json"),
) -> None:
    """A chat turn in LLM mode: time to the first answer token, sequential model calls and calls per turn."""
    import asyncio

    from rich.table import Table

    from memstrata_bench.chat_turn import run_chat_turn

    limit_blas(BLAS_THREADS)
    result = asyncio.run(
        run_chat_turn(
            latency_ms=latency_ms, reader=reader, reader_name=reader_model, modes=_split(modes), repeats=repeats
        )
    )
    result["command"] = command_line()
    result["provenance"] = provenance(result["command"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    table = Table(title=f"a chat turn, {result['reader']} reader, {latency_ms:g} ms a call (medians)")
    columns = ("ttft_s", "total_s", "calls_before_first_token", "sequential_calls_max", "calls", "prompt_tokens")
    for name in ("mode", *columns):
        table.add_column(name)
    for mode, row in result["modes"].items():
        table.add_row(mode, *(str(row["summary"][c]) for c in columns))
    Console().print(table)
    Console().print(f"wrote {out}")


@bench_app.command("scale")
def scale(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="locomo10.json")],
    sizes: Annotated[str, typer.Option(help="comma-separated turn counts of one user")] = "10000,100000,1000000",
    chat_rounds: Annotated[int, typer.Option(help="write-then-read rounds of the chat pattern (0 skips it)")] = 200,
    chat_turns: Annotated[int, typer.Option(help="turns the user holds in the chat pattern")] = 6000,
    questions: Annotated[int, typer.Option(help="planted questions asked at each size")] = 200,
    revisits: Annotated[
        int,
        typer.Option(
            help="then the first N of them asked again on the archive-only and tiered paths, after the tiers took "
            "the first pass's promotions (a user returning to topics)"
        ),
    ] = 0,
    budget: Annotated[int, typer.Option(help="context budget of the planted questions")] = 1500,
    out: Annotated[Path, typer.Option(help="results JSON")] = Path("benchmarks/results/scale.json"),
    plot: Annotated[Path, typer.Option(help="latency vs size PNG")] = Path("benchmarks/results/scale_latency.png"),
    workdir: Annotated[Path | None, typer.Option(help="where the stores are built (default: a temp folder)")] = None,
    originals: Annotated[
        int | None,
        typer.Option(help="LoCoMo conversations ingested through the graph before copies start (default: all)"),
    ] = None,
    server: Annotated[
        bool,
        typer.Option(
            "--server",
            metavar="",
            help="grow and query the sizes through a `chroma run` server started over the store (loopback)",
        ),
    ] = False,
    store: Annotated[
        Path | None,
        typer.Option(
            help="grow the user in this folder and keep it; a folder a stopped run left is grown on from its last "
            "whole conversation (large sizes take hours to grow; Ctrl-C or SIGTERM stops growing after the "
            "conversation being written)"
        ),
    ] = None,
) -> None:
    """One user with many turns (planted LoCoMo questions), and the chat pattern of write-then-read."""
    import shutil
    import tempfile

    from memstrata.context import Context
    from memstrata_bench.scale import NOTE, GrowthStoppedError, chat_pattern, plot_scale, run_sizes

    try:
        targets = [int(s) for s in _split(sizes) or []]
    except ValueError as exc:
        msg = f"--sizes must be comma-separated integers, got {sizes!r}"
        raise typer.BadParameter(msg) from exc
    console = Console()
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)  # a folder that does not exist yet is made
    root = Path(tempfile.mkdtemp(prefix="memstrata-scale-", dir=workdir))
    threshold = Context(user_id="-").scale.max_turns
    command = command_line()
    result: dict = {
        "provenance": provenance(command),
        "command": command,
        "snapshot_max_turns": threshold,
        "sizes": [],
        "note": NOTE,
    }

    def report(row: dict) -> None:  # a size's row, again as each of its paths is measured
        if not result["sizes"] or result["sizes"][-1] is not row:
            result["sizes"].append(row)
        console.print({"turns": row["turns"], **row["paths"]})
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    try:
        run_sizes(
            path,
            targets,
            questions=questions,
            budget=budget,
            workdir=root,
            threshold=threshold,
            originals=originals,
            server=server,
            revisits=revisits,
            report=report,
            keep=store,
        )
        if chat_rounds:
            result["chat"] = chat_pattern(path, turns=chat_turns, rounds=chat_rounds, workdir=root, originals=originals)
            console.print(result["chat"])
    except GrowthStoppedError as stopped:  # the sizes measured so far are in --out already (report)
        console.print(f"{stopped}" + ("; run the same command to grow on" if store else ""))
        raise typer.Exit(code=1) from None
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if result["sizes"]:
        plot_scale(result, plot)
    console.print(f"wrote {out}" + (f" and {plot}" if result["sizes"] else ""))


@bench_app.command("tenants")
def tenants(
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="locomo10.json")],
    users: Annotated[int, typer.Option(min=2, help="users in the one store")] = 1000,
    conversation: Annotated[str, typer.Option(help="the LoCoMo conversation every user is grown from")] = "conv-26",
    sessions: Annotated[int, typer.Option(min=1, help="its first N sessions make a user's memory")] = 3,
    warm_users: Annotated[int, typer.Option(min=1, help="users asked every question (the rest: one each)")] = 10,
    budget: Annotated[int, typer.Option(help="context budget of every question")] = 1500,
    vector_noise: Annotated[
        float, typer.Option(help="norm of each copy's Gaussian noise on the vectors (0: the source's vectors)")
    ] = 0.5,
    seed: Annotated[int, typer.Option(help="which users are the warm ones")] = 0,
    server: Annotated[
        bool,
        typer.Option("--server", metavar="", help="the store in a `chroma run` server started here (loopback)"),
    ] = False,
    workdir: Annotated[Path | None, typer.Option(help="where the store is built (default: a temp folder)")] = None,
    out: Annotated[Path, typer.Option(help="results JSON")] = Path("benchmarks/results/tenants.json"),
    plot: Annotated[Path, typer.Option(help="query latency PNG")] = Path("benchmarks/results/tenants_latency.png"),
) -> None:
    """Many users in one store: a user's query among them against the same user alone, and the serving peak."""
    import shutil
    import tempfile

    from memstrata_bench.chroma_run import start_chroma
    from memstrata_bench.tenants import NOTE, plot_tenants, run_tenants

    console = Console()
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)  # a folder that does not exist yet is made
    folder = Path(tempfile.mkdtemp(prefix="memstrata-tenants-", dir=workdir))
    chroma = start_chroma(folder / "chroma") if server else None
    try:
        result = run_tenants(
            path,
            folder=folder,
            conversation=conversation,
            sessions=sessions,
            users=users,
            warm_users=warm_users,
            budget=budget,
            noise=vector_noise,
            seed=seed,
            url=chroma.url if chroma else None,
            server_peak=chroma.peak_mb if chroma else lambda: None,
            progress=console.print,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    finally:
        if chroma:
            chroma.stop()
        shutil.rmtree(folder, ignore_errors=True)
    result["command"] = command_line()
    result["provenance"] = provenance(result["command"]) | {"note": NOTE}
    result["deployment"] = "chroma run" if server else "embedded"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    plot_tenants(result, plot)
    console.print_json(json.dumps({k: v for k, v in result.items() if k not in ("latencies", "provenance")}))
    console.print(f"wrote {out} and {plot}")


if __name__ == "__main__":
    bench_app()
