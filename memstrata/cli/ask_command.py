"""``memstrata ask``: an answer from memory, or offline the best evidence ranked and the cited context."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from memstrata.cli import (
    FLAG,
    BaseUrl,
    ChromaUrl,
    DataDir,
    IngestModel,
    Model,
    User,
    _fail,
    _model_settings,
    _read_mem,
    _say,
    _writable,
    console,
    err,
)
from memstrata.errors import AnswerError, StoreError
from memstrata.memory.timeparse import parse_timestamp
from memstrata.views.extractive_answer import extractive_answer


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
