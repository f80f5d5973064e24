"""Presenting a LoCoMo run: ``rich`` tables and a recall-vs-budget plot.

Both read only the results dict that :func:`memstrata_bench.runner.run_locomo`
returns (or its JSON file), so old runs can be re-rendered.

Example:
    >>> tables = results_tables(result)  # doctest: +SKIP
    >>> plot_recall(result, "benchmarks/results/locomo_recall.png")  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from memstrata_bench.locomo import CATEGORY_NAMES, HEADLINE_CATEGORIES

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _pct(value: float) -> str:
    return f"{100.0 * value:.1f}"


def dataset_name(result: dict[str, Any]) -> str:
    """The name of the data file a run read (its stem, e.g. ``locomo10``); ``"LoCoMo"`` if the run did not record it.

    Example:
        >>> dataset_name({"dataset": {"path": "../shared/data/locomo/locomo10.json"}})
        'locomo10'
    """
    path = result.get("dataset", {}).get("path")
    return Path(path).stem if path else "LoCoMo"


def recall_table(result: dict[str, Any]) -> Table:
    """Methods by budget; each cell is ``recall_all/recall_frac`` in %."""
    budgets = [str(b) for b in result["budgets"]]
    table = Table(
        title=f"{dataset_name(result)} evidence recall, categories 1-4 ({result['questions']} questions): all/frac %"
    )
    table.add_column("method", style="bold", no_wrap=True)
    for budget in budgets:
        table.add_column(f"B={budget}", justify="right", no_wrap=True)
    for name, stats in by_recall(result):
        table.add_row(name, *(f"{_pct(stats['recall_all'][b])}/{_pct(stats['recall_frac'][b])}" for b in budgets))
    return table


def cost_table(result: dict[str, Any]) -> Table:
    """Per-query latency, preparation (indexing or ingestion) time and budget overruns."""
    key = str(result.get("latency_budget", ""))
    table = Table(title=f"cost (latency at B={key}, per query)")
    table.add_column("method", style="bold", no_wrap=True)
    for header in ("p50 ms", "p95 ms", "prepare s", f"tokens@{key}", "over budget"):
        table.add_column(header, justify="right", no_wrap=True)
    for name, stats in by_recall(result):
        latency = stats["latency_ms"]
        table.add_row(
            name,
            f"{latency['p50']:.0f}",
            f"{latency['p95']:.0f}",
            f"{stats.get('prepare_seconds', 0.0):.1f}",
            f"{stats.get('mean_context_tokens', {}).get(key, 0.0):.0f}",
            str(stats.get("budget_violations", 0)),
        )
    return table


def category_table(result: dict[str, Any], *, budget: int | None = None) -> Table:
    """recall_all per category at one budget (the latency budget by default), category 5 included."""
    key = str(budget or result.get("latency_budget", result["budgets"][len(result["budgets"]) // 2]))
    counts = result.get("questions_per_category", {})
    table = Table(title=f"recall_all @{key} by category, %")
    table.add_column("method", style="bold", no_wrap=True)
    for cat in (*HEADLINE_CATEGORIES, 5):
        table.add_column(f"{CATEGORY_NAMES[cat]}\n({counts.get(str(cat), '?')})", justify="right", no_wrap=True)
    for name, stats in by_recall(result):
        parts = [stats["per_category"][str(c)] for c in HEADLINE_CATEGORIES] + [stats.get("category_5", {})]
        table.add_row(name, *(_pct(p["recall_all"][key]) if p.get("questions") else "-" for p in parts))
    return table


def llm_table(result: dict[str, Any]) -> Table | None:
    """LLM mode's cost per query by category: light share, calls, tokens, context tokens, recall_all."""
    stats = result["methods"].get("memstrata", {})
    llm = stats.get("llm")
    if not llm:
        return None
    key = str(llm["budget"])
    table = Table(title=f"LLM mode, reader {llm['reader']}: per query at B={key}")
    for header in (
        "category",
        "n",
        "light %",
        "calls",
        "prompt tok",
        "completion tok",
        "tok light / deep path",
        "context tok",
        "recall_all %",
        "top nodes by tokens",
    ):
        table.add_column(header, justify="left" if header in ("category", "top nodes by tokens") else "right")
    for cat, row in llm["per_category"].items():
        recall = stats["recall_all"] if cat == "1-4" else stats["per_category"].get(cat, {}).get("recall_all", {})
        nodes = sorted(row["per_node"].items(), key=lambda kv: -(kv[1]["prompt_tokens"] + kv[1]["completion_tokens"]))
        top = ", ".join(f"{n} {v['prompt_tokens'] + v['completion_tokens']:.0f}" for n, v in nodes[:4])
        name = CATEGORY_NAMES.get(int(cat), cat) if cat.isdigit() else cat
        by_path = row.get("tokens_by_path", {})
        paths = " / ".join(f"{by_path[p]:.0f}" if p in by_path else "-" for p in ("light", "deep"))
        table.add_row(
            name,
            str(row["questions"]),
            _pct(row["light_share"]),
            f"{row['calls']:.1f}",
            f"{row['prompt_tokens']:.0f}",
            f"{row['completion_tokens']:.0f}",
            paths,
            f"{row['context_tokens']:.0f}",
            _pct(recall[key]) if key in recall else "-",
            top,
        )
    return table


def results_tables(result: dict[str, Any]) -> list[Table]:
    """The tables the CLI prints, in order."""
    llm = llm_table(result)
    return [recall_table(result), category_table(result), cost_table(result), *([llm] if llm else [])]


def plot_recall(result: dict[str, Any], path: str | Path, **options: Any) -> Path:
    """Write a PNG of recall_all against budget, one line per method (``options``: :func:`recall_figure`'s);
    returns the path.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    recall_figure(result, **options).savefig(out, bbox_inches="tight")
    return out


def recall_figure(result: dict[str, Any], *, title: str | None = None, log_budgets: bool = False) -> Figure:
    """recall_all against budget, one line per method, titled with the dataset's name (see :func:`dataset_name`)
    unless ``title`` is given; ``log_budgets`` spaces the budgets on a log scale.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    budgets = list(result["budgets"])
    figure = Figure(figsize=(7.0, 4.5), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for name, stats in by_recall(result):
        axes.plot(budgets, [100.0 * stats["recall_all"][str(b)] for b in budgets], marker="o", label=name)
    axes.set_xlabel("context budget (MiniLM tokens)")
    axes.set_ylabel("recall_all (%)")
    axes.set_title(title or f"{dataset_name(result)} evidence recall, categories 1-4 ({result['questions']} questions)")
    if log_budgets:
        axes.set_xscale("log", base=2)
    axes.set_xticks(budgets, [str(b) for b in budgets])
    axes.set_ylim(0, 100)
    axes.grid(alpha=0.3)
    axes.legend()
    return figure


def by_recall(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Methods, best recall_all at the latency budget first."""
    key = str(result.get("latency_budget", result["budgets"][0]))
    return sorted(result["methods"].items(), key=lambda item: -item[1]["recall_all"].get(key, 0.0))


def markdown_table(result: dict[str, Any], *, budgets: list[str] | None = None) -> str:
    """The headline table as Markdown: recall_all / recall_frac in % per budget, and latency."""
    methods = result["methods"]
    budgets = budgets or list(next(iter(methods.values()))["recall_all"])
    head = "| method | " + " | ".join(f"B={b}" for b in budgets) + " | p50 / p95 ms |"
    rows = [head, "|" + "---|" * (len(budgets) + 2)]
    for name, m in methods.items():
        cells = [f"{100 * m['recall_all'][b]:.1f} / {100 * m['recall_frac'][b]:.1f}" for b in budgets]
        lat = m.get("latency_ms", {})
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {lat.get('p50', 0):.0f} / {lat.get('p95', 0):.0f} |")
    return "\n".join(rows)


def markdown_categories(result: dict[str, Any], budget: str = "1500") -> str:
    """recall_all at one budget, per category, as Markdown."""
    methods = result["methods"]
    cats = sorted(next(iter(methods.values()))["per_category"])
    rows = ["| method | " + " | ".join(f"cat {c}" for c in cats) + " |", "|" + "---|" * (len(cats) + 1)]
    for name, m in methods.items():
        rows.append(
            f"| {name} | " + " | ".join(f"{100 * m['per_category'][c]['recall_all'][budget]:.1f}" for c in cats) + " |"
        )
    return "\n".join(rows)
