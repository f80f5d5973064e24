"""Run every method on LoCoMo in one pass and report recall, latency, ingestion and memory.

All methods see the same conversations, questions and budgets in the same
process, so their numbers sit side by side as ``shared/docs/EVAL.md`` asks.

Example:
    >>> result = run_locomo(
    ...     "locomo10.json", conversations=["conv-26"], methods=["bm25", "random"], progress=False
    ... )  # doctest: +SKIP
    >>> result["methods"]["bm25"]["recall_all"]["1500"]  # doctest: +SKIP
    0.6...
"""

from __future__ import annotations

import hashlib
import platform
import resource
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from memstrata.memory.tokens import TokenCounter
from memstrata_bench.baselines import BASELINE_NAMES, make_baseline
from memstrata_bench.locomo import (
    ADVERSARIAL_CATEGORY,
    HEADLINE_CATEGORIES,
    LocomoConversation,
    LocomoQuestion,
    load_locomo,
)
from memstrata_bench.method import Method
from memstrata_bench.metric import RecallTally, merge_tallies, score_context
from memstrata_bench.provenance import provenance

DEFAULT_BUDGETS: tuple[int, ...] = (500, 1000, 1500, 2000, 4000)
LATENCY_BUDGET = 1500
METHOD_NAMES: tuple[str, ...] = ("memstrata", *BASELINE_NAMES)


@dataclass
class MethodStats:
    """Everything measured for one method during a run."""

    budgets: tuple[int, ...]
    tallies: dict[int, RecallTally] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    prepare_seconds: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=dict)  # memstrata's ingestion, per stage
    llm_calls: dict[str, dict[str, int]] = field(default_factory=dict)  # with a model: calls, prompt tokens per site
    context_tokens: dict[int, int] = field(default_factory=dict)
    contexts: int = 0
    budget_violations: int = 0

    def tally(self, category: int) -> RecallTally:
        """The tally of one category, created on first use."""
        return self.tallies.setdefault(category, RecallTally(budgets=self.budgets))


def resolve_methods(
    methods: Sequence[str | Method] | None,
    *,
    embeddings: Embeddings | None = None,
    reader: str | None = None,
    reader_model: str = "smollm2",
    settings: dict[str, Any] | None = None,
) -> list[Method]:
    """Build methods from names (``memstrata``, ``bm25``, ``dense``, ``hybrid_rrf``, ``random``) or pass objects
    through.

    Args:
        methods: names or ready :class:`Method` objects; all five names when ``None``.
        embeddings: the shared embedder (packaged MiniLM when ``None``).
        reader: ask memstrata in LLM mode with this reader (``oracle``, ``oracle-deep`` or a server URL).
        reader_model: the model name sent to a URL reader.
        settings: :class:`~memstrata.context.Context` fields memstrata runs with (an ablation row).
    """
    wanted = list(methods) if methods is not None else list(METHOD_NAMES)
    if not wanted:
        msg = f"methods: choose at least one of {list(METHOD_NAMES)}"
        raise ValueError(msg)
    if embeddings is None and any(isinstance(m, str) and m in ("memstrata", "dense", "hybrid_rrf") for m in wanted):
        from memstrata.memory.embeddings import MiniLMEmbeddings

        embeddings = MiniLMEmbeddings()
    warm_encoder(embeddings)
    counter = TokenCounter()
    return [
        _build_method(
            m, embeddings=embeddings, counter=counter, reader=reader, reader_model=reader_model, settings=settings
        )
        if isinstance(m, str)
        else m
        for m in wanted
    ]


def warm_encoder(embeddings: Embeddings | None) -> None:
    """Load the shared encoder before any timed ingestion: whichever method prepared first paid its one-time load
    (about 3-6 s here), which made the first method's ingestion look dearer than the floor it is measured against.
    """
    if embeddings is not None:
        embeddings.embed_documents(["warm-up"])


def _build_method(
    name: str,
    *,
    embeddings: Embeddings | None,
    counter: TokenCounter,
    reader: str | None = None,
    reader_model: str = "smollm2",
    settings: dict[str, Any] | None = None,
) -> Method:
    if name not in METHOD_NAMES:
        msg = f"methods: unknown method {name!r}; choose from {list(METHOD_NAMES)}"
        raise ValueError(msg)
    if name == "memstrata" and reader:
        from memstrata_bench.reader import ReaderMethod

        return ReaderMethod(
            embeddings=embeddings,
            reader=reader,
            model_name=reader_model,
            settings=settings,
        )
    if name == "memstrata":
        from memstrata_bench.system import MemstrataMethod

        return MemstrataMethod(embeddings=embeddings, settings=settings)
    return make_baseline(name, embeddings=embeddings, counter=counter)  # type: ignore[arg-type]


def run_locomo(
    path: str | Path,
    *,
    conversations: Sequence[str] | None = None,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    methods: Sequence[str | Method] | None = None,
    progress: bool = True,
    questions_per_conversation: int | None = None,
    embeddings: Embeddings | None = None,
    command: str | None = None,
    reader: str | None = None,
    reader_model: str = "smollm2",
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Measure every method on LoCoMo in the same run.

    Args:
        path: ``locomo10.json``.
        conversations: sample ids to run (all ten when ``None``).
        budgets: token budgets B for recall@B.
        methods: method names or objects (all five when ``None``).
        progress: show ``rich`` progress bars on stderr.
        questions_per_conversation: keep only the first N questions of each conversation (for quick runs).
        embeddings: the embedder shared by dense, hybrid and memstrata (packaged MiniLM by default).
        command: the command line to record (default: this process's ``sys.argv``).
        reader: run memstrata in LLM mode with this reader and report its LLM cost (see
            :mod:`memstrata_bench.reader`); ``None`` runs it offline.
        reader_model: the model name sent to a URL reader.
        settings: :class:`~memstrata.context.Context` fields memstrata runs with (an ablation row; the CLI records
            them in the results).

    Returns:
        The results dict; see ``benchmarks/README.md`` for its keys.
    """
    budgets = check_budgets(budgets)
    started = time.perf_counter()
    convs = load_locomo(path, conversations=conversations)
    for conv in convs:
        conv.questions = conv.questions[:questions_per_conversation]
    active = resolve_methods(
        methods, embeddings=embeddings, reader=reader, reader_model=reader_model, settings=settings
    )
    check_unique([m.name for m in active])
    stats = {m.name: MethodStats(budgets=budgets) for m in active}
    latency_budget = LATENCY_BUDGET if LATENCY_BUDGET in budgets else budgets[len(budgets) // 2]
    for method in active:
        if hasattr(method, "record_budget"):
            method.record_budget = latency_budget  # LLM cost is metered at the latency budget
    counter = TokenCounter()
    try:
        with _progress_bars(progress) as bars:
            _run_all(convs, active, stats, counter=counter, latency_budget=latency_budget, bars=bars)
    finally:
        for method in active:
            close_method(method)
    result = _report(convs, stats, counter=counter, latency_budget=latency_budget)
    for method in active:
        rows = getattr(method, "rows", None)
        if rows is not None:
            from memstrata_bench.reader import cost_report

            result["methods"][method.name]["llm"] = {
                "reader": reader,
                "budget": latency_budget,
                "per_category": cost_report(rows),
            }
    result.update(_run_info(path, convs, budgets, command, time.perf_counter() - started))
    return result


def _run_all(
    convs: list[LocomoConversation],
    methods: list[Method],
    stats: dict[str, MethodStats],
    *,
    counter: TokenCounter,
    latency_budget: int,
    bars: Progress,
) -> None:
    task = bars.add_task("queries", total=sum(len(c.questions) for c in convs) * len(methods))
    for conv in convs:
        texts = conv.turn_texts()
        for method in methods:
            bars.update(task, description=f"{method.name} · prepare {conv.sample_id}")
            stats[method.name].prepare_seconds += _timed_prepare(method, conv)
            _add_stages(stats[method.name], getattr(method, "stats", None))
            bars.update(task, description=f"{method.name} · {conv.sample_id}")
            begin = getattr(method, "begin_question", None)
            for question in conv.questions:
                gold = [texts[dia_id] for dia_id in question.evidence]
                if begin is not None:
                    begin(question, conv)
                _run_question(
                    method, question, conv, gold, stats[method.name], counter=counter, latency_budget=latency_budget
                )
                bars.advance(task)


def _add_stages(stats: MethodStats, ingested: dict[str, Any] | None) -> None:
    """Add one ingestion's seconds per stage (and, with a model, its calls per call site) to the method's."""
    for stage, seconds in (ingested or {}).get("stage_seconds", {}).items():
        stats.stage_seconds[stage] = stats.stage_seconds.get(stage, 0.0) + float(seconds)
    for site, meter in (ingested or {}).get("llm", {}).items():
        row = stats.llm_calls.setdefault(site, {"calls": 0, "prompt_tokens": 0})
        for name in row:
            row[name] += int(meter.get(name, 0)) if isinstance(meter, dict) else 0


def _timed_prepare(method: Method, conv: LocomoConversation) -> float:
    start = time.perf_counter()
    method.prepare(conv)
    return time.perf_counter() - start


def _run_question(
    method: Method,
    question: LocomoQuestion,
    conv: LocomoConversation,
    gold: list[str],
    stats: MethodStats,
    *,
    counter: TokenCounter,
    latency_budget: int,
) -> None:
    """Ask one question at every budget, timing the latency budget, and tally the scores."""
    contexts: dict[int, str] = {}
    # The timed budget goes first, so no method can serve it from work done for another budget.
    for budget in sorted(stats.budgets, key=lambda b: b != latency_budget):
        start = time.perf_counter()
        contexts[budget] = method.context(question.question, conv, budget)
        if budget == latency_budget:
            stats.latencies_ms.append((time.perf_counter() - start) * 1000.0)
    tokens = counter.count_many([contexts[b] for b in stats.budgets])
    scores: dict[int, tuple[bool, float]] = {}
    for budget, used in zip(stats.budgets, tokens, strict=True):
        stats.context_tokens[budget] = stats.context_tokens.get(budget, 0) + used
        over = used > budget
        stats.budget_violations += int(over)
        scores[budget] = (False, 0.0) if over else score_context(contexts[budget], gold)
    stats.contexts += 1
    stats.tally(question.category).add(scores)


def _report(
    convs: list[LocomoConversation],
    stats: dict[str, MethodStats],
    *,
    counter: TokenCounter,
    latency_budget: int,
) -> dict[str, Any]:
    methods = {name: _method_report(s, latency_budget) for name, s in stats.items()}
    headline = sum(1 for c in convs for q in c.questions if q.category in HEADLINE_CATEGORIES)
    per_category = {
        str(cat): sum(1 for c in convs for q in c.questions if q.category == cat)
        for cat in (*HEADLINE_CATEGORIES, ADVERSARIAL_CATEGORY)
    }
    memstrata = stats.get("memstrata")
    return {
        "methods": methods,
        "questions": headline,
        "questions_per_category": per_category,
        "ingest_seconds": memstrata.prepare_seconds if memstrata else None,
        "peak_memory_mb": peak_memory_mb(),
        "token_stats": _token_stats(convs, counter),
        "latency_budget": latency_budget,
    }


def _method_report(stats: MethodStats, latency_budget: int) -> dict[str, Any]:
    headline = merge_tallies((stats.tally(c) for c in HEADLINE_CATEGORIES), stats.budgets)
    adversarial = stats.tally(ADVERSARIAL_CATEGORY)
    latencies = np.asarray(stats.latencies_ms) if stats.latencies_ms else np.zeros(1)
    n = stats.contexts or 1
    return {
        **headline.summary(),
        "per_category": {
            str(c): {**stats.tally(c).summary(), "questions": stats.tally(c).questions} for c in HEADLINE_CATEGORIES
        },
        "category_5": {**adversarial.summary(), "questions": adversarial.questions},
        "latency_ms": {
            "p50": float(np.percentile(latencies, 50)),
            "p95": float(np.percentile(latencies, 95)),
            "budget": latency_budget,
            "queries": len(stats.latencies_ms),
        },
        "prepare_seconds": stats.prepare_seconds,
        **({"stage_seconds": {k: round(v, 3) for k, v in stats.stage_seconds.items()}} if stats.stage_seconds else {}),
        **({"ingest_llm_calls": stats.llm_calls} if stats.llm_calls else {}),
        "mean_context_tokens": {str(b): stats.context_tokens.get(b, 0) / n for b in stats.budgets},
        "budget_violations": stats.budget_violations,
    }


def _token_stats(convs: list[LocomoConversation], counter: TokenCounter) -> dict[str, float]:
    """Size of each whole conversation rendered as the baselines render turns."""
    sizes = counter.count_many(["\n".join(t.render() for t in c.turns) for c in convs])
    return {
        "conversation_tokens_mean": float(np.mean(sizes)) if sizes else 0.0,
        "conversation_tokens_max": float(max(sizes, default=0)),
    }


def _run_info(
    path: str | Path,
    convs: list[LocomoConversation],
    budgets: tuple[int, ...],
    command: str | None,
    seconds: float,
) -> dict[str, Any]:
    data = Path(path).read_bytes()
    command = command or shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
    return {
        "provenance": provenance(command),
        "command": command,
        "budgets": list(budgets),
        "conversations": [c.sample_id for c in convs],
        "dataset": {"path": str(path), "sha256": hashlib.sha256(data).hexdigest()},
        "runtime_seconds": seconds,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def peak_memory_mb() -> float:
    """Peak resident memory of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def check_budgets(budgets: Sequence[int]) -> tuple[int, ...]:
    """The budgets, sorted and without repeats; every one a positive integer."""
    cleaned = tuple(sorted({int(b) for b in budgets}))
    if not cleaned or cleaned[0] < 1:
        msg = f"budgets: need one or more positive token budgets, got {list(budgets)}"
        raise ValueError(msg)
    return cleaned


def check_unique(names: list[str]) -> None:
    """Refuse a method named twice."""
    if len(set(names)) != len(names):
        msg = f"methods: each method name must appear once, got {names}"
        raise ValueError(msg)


def close_method(method: Method) -> None:
    """Release what a method holds (its store), if it holds anything."""
    close = getattr(method, "close", None)
    if callable(close):
        close()


def _progress_bars(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )
