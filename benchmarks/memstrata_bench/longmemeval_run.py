"""Run memstrata and the baselines on LongMemEval-S in one pass, one results line per question as it goes.

Every question's row (each method's budget recall, ranked-list metrics, latency and ingestion seconds) is appended
to a JSON-lines log as soon as the question is done. A stopped run started again skips the questions its log
holds; ``shard=(i, n)`` runs every n-th question, and :func:`merge_longmemeval` joins the shards' logs. The
results are always summarized from the rows, so a resumed, sharded or merged run reports like a single one.

Example:
    >>> result = run_longmemeval(
    ...     "longmemeval_s_dev.json.gz", methods=["bm25"], per_type=1, log="/tmp/lme.jsonl", progress=False
    ... )  # doctest: +SKIP
    >>> result["methods"]["bm25"]["retrieval"]["session"]["recall_any@5"]  # doctest: +SKIP
    0.8...
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from memstrata.memory.tokens import TokenCounter
from memstrata_bench import report
from memstrata_bench.baselines import make_baseline
from memstrata_bench.longmemeval import (
    ABSTENTION,
    KS,
    LEVELS,
    QUESTION_TYPES,
    LongMemEvalQuestion,
    MemstrataAtQuestionTime,
    SharedEncoding,
    parse_record,
    ranked_turns,
    read_records,
    retrieval_scores,
    select_records,
    shard_of,
)
from memstrata_bench.method import Method
from memstrata_bench.metric import score_context
from memstrata_bench.provenance import provenance
from memstrata_bench.runner import (
    METHOD_NAMES,
    check_budgets,
    check_unique,
    close_method,
    peak_memory_mb,
    warm_encoder,
)

DEFAULT_BUDGETS: tuple[int, ...] = (1000, 2000, 4000, 8000)
LATENCY_BUDGET = 2000
WARM_UP = "What did we talk about?"
"""The query each method answers first, untimed for latency: a fresh store's first query also loads its search
snapshot, which a long-lived process does once per user (its time is reported as ``first_query_ms``)."""
LOG_FORMAT = "memstrata-longmemeval-log"
SHARED = ("budgets", "methods", "dataset_sha256", "settings")
"""Header fields two logs must agree on to be resumed or merged."""


def run_longmemeval(
    path: str | Path,
    *,
    log: str | Path,
    methods: Sequence[str | Method] | None = None,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    questions: int | None = None,
    per_type: int | None = None,
    seed: int = 0,
    shard: tuple[int, int] | None = None,
    embeddings: Embeddings | None = None,
    settings: dict[str, Any] | None = None,
    progress: bool = True,
    command: str = "",
) -> dict[str, Any]:
    """Ask the selected questions (those the log lacks) of every method, then summarize the log's rows.

    Args:
        path: a LongMemEval ``.json`` or ``.json.gz`` file.
        log: the JSON-lines log: appended to question by question; a log holding questions resumes.
        methods: names (``memstrata``, ``bm25``, ``dense``, ``hybrid_rrf``, ``random``) or :class:`Method` objects.
        budgets: token budgets B of the evidence recall.
        questions: keep the first N selected questions.
        per_type: draw N questions of each type (abstention is a type here), seeded by ``seed``.
        seed: the seed of the ``per_type`` draw.
        shard: ``(i, n)``: only every n-th selected question, from the i-th.
        embeddings: the model of dense, hybrid and memstrata (packaged MiniLM by default).
        settings: :class:`~memstrata.context.Context` fields memstrata runs with.
        progress: show a ``rich`` progress bar on stderr.
        command: the command line recorded in the results.

    Returns:
        The results dict (see ``docs/benchmarks/longmemeval.md``).
    """
    started = time.perf_counter()
    budgets = check_budgets(budgets)
    records = shard_of(select_records(read_records(path), per_type=per_type, limit=questions, seed=seed), shard)
    names = [m if isinstance(m, str) else m.name for m in (methods or METHOD_NAMES)]
    check_unique(names)
    header = _header(path, budgets=budgets, methods=names, settings=settings or {}, command=command)
    rows = open_log(Path(log), header)
    active, shared = build_methods(methods or METHOD_NAMES, embeddings=embeddings, settings=settings, budgets=budgets)
    counter = TokenCounter()
    todo = [r for r in records if str(r["question_id"]) not in rows]
    try:
        with _progress_bar(progress) as bar:
            task = bar.add_task("questions", total=len(todo))
            for record in todo:
                question = parse_record(record, where=f"{path}: {record['question_id']}")
                row = ask_question(question, active, shared=shared, budgets=budgets, counter=counter, bar=(bar, task))
                append_row(Path(log), row)
                rows[question.question_id] = row
                bar.advance(task)
    finally:
        for method in active:
            close_method(method)
    ids = [str(r["question_id"]) for r in records]
    result = summarize([rows[i] for i in ids if i in rows], header, missing=[i for i in ids if i not in rows])
    result["selection"] = {"questions": questions, "per_type": per_type, "seed": seed, "shard": _shard_text(shard)}
    result["runtime_seconds"] = time.perf_counter() - started
    result["peak_memory_mb"] = peak_memory_mb()  # this run's process (a merge reports none)
    result["log"] = str(log)
    return result


def build_methods(
    methods: Sequence[str | Method],
    *,
    embeddings: Embeddings | None,
    settings: dict[str, Any] | None,
    budgets: tuple[int, ...],
) -> tuple[list[Method], SharedEncoding | None]:
    """The methods, dense before hybrid (the first to prepare pays the shared encoding), and that encoding."""
    wanted = list(methods)
    unknown = [m for m in wanted if isinstance(m, str) and m not in METHOD_NAMES]
    if unknown or not wanted:
        msg = f"methods: unknown {unknown}; choose one or more of {list(METHOD_NAMES)}"
        raise ValueError(msg)
    if embeddings is None and any(m in ("memstrata", "dense", "hybrid_rrf") for m in wanted):
        from memstrata.memory.embeddings import MiniLMEmbeddings

        embeddings = MiniLMEmbeddings()
    warm_encoder(embeddings)
    shared = SharedEncoding(embeddings) if embeddings is not None else None
    counter = TokenCounter()
    wanted.sort(key=lambda m: m == "hybrid_rrf")  # stable: dense (if asked) encodes, hybrid reads it back

    def build(name: str) -> Method:
        if name == "memstrata":
            return MemstrataAtQuestionTime(embeddings=embeddings, rank_budget=max(budgets), settings=settings)  # type: ignore[arg-type]
        return make_baseline(name, embeddings=shared, counter=counter)  # type: ignore[arg-type]

    return [build(m) if isinstance(m, str) else m for m in wanted], shared


def ask_question(
    question: LongMemEvalQuestion,
    methods: Sequence[Method],
    *,
    shared: SharedEncoding | None,
    budgets: tuple[int, ...],
    counter: TokenCounter,
    bar: tuple[Progress, Any] | None = None,
) -> dict[str, Any]:
    """One question's row: its facts, then each method's prepare time, latency, recall and ranked metrics."""
    if shared is not None:
        shared.clear()
    conv = question.conversation
    row: dict[str, Any] = {
        "kind": "question",
        "question_id": question.question_id,
        "question_type": question.question_type,
        "category": question.category,
        "evidence_turns": len(question.evidence),
        "user_evidence_turns": len(question.user_evidence()),
        "answer_sessions": len(question.answer_sessions),
        "haystack_turns": len(conv.turns),
        "haystack_tokens": sum(counter.count_many([t.render() for t in conv.turns])),
        "methods": {},
    }
    started = time.perf_counter()
    for method in methods:
        if bar is not None:
            bar[0].update(bar[1], description=f"{question.question_id} · {method.name}")
        row["methods"][method.name] = _ask_method(method, question, budgets=budgets, counter=counter)
        close_method(method)  # memstrata's store of this haystack goes now, not at the next question
    row["seconds"] = round(time.perf_counter() - started, 3)
    return row


def _ask_method(
    method: Method, question: LongMemEvalQuestion, *, budgets: tuple[int, ...], counter: TokenCounter
) -> dict[str, Any]:
    conv = question.conversation
    begin = getattr(method, "begin", None)
    if callable(begin):
        begin(question)
    start = time.perf_counter()
    method.prepare(conv)
    prepared = time.perf_counter() - start
    contexts, first, latency = _contexts(method, question, budgets=budgets)
    tokens = dict(zip(budgets, counter.count_many([contexts[b] for b in budgets]), strict=True))
    gold = question.gold_texts()
    recall = (
        {str(b): list(score_context(contexts[b], gold)) if tokens[b] <= b else [False, 0.0] for b in budgets}
        if gold
        else None
    )
    ranked = ranked_turns(method, question.question, conv)
    stages = (getattr(method, "stats", None) or {}).get("stage_seconds")
    return {
        "prepare_seconds": round(prepared, 4),
        "latency_ms": round(latency, 3),
        "first_query_ms": round(first, 3),
        "recall": recall,
        "context_tokens": {str(b): tokens[b] for b in budgets},
        "over_budget": sum(tokens[b] > b for b in budgets),
        "retrieval": retrieval_scores(question, ranked) if ranked is not None else None,
        "ranked_turns": len(ranked) if ranked is not None else None,
        **({"stage_seconds": stages} if stages else {}),
    }


def _contexts(
    method: Method, question: LongMemEvalQuestion, *, budgets: tuple[int, ...]
) -> tuple[dict[int, str], float, float]:
    """The contexts at each budget, the warm-up's milliseconds and the timed call's."""
    conv, timed = question.conversation, latency_budget(budgets)
    start = time.perf_counter()
    method.context(WARM_UP, conv, timed)
    first = (time.perf_counter() - start) * 1000.0
    contexts: dict[int, str] = {}
    latency = 0.0
    for budget in sorted(budgets, key=lambda b: b != timed):  # the timed call first: nothing served from another
        start = time.perf_counter()
        contexts[budget] = method.context(question.question, conv, budget)
        latency = (time.perf_counter() - start) * 1000.0 if budget == timed else latency
    return contexts, first, latency


def latency_budget(budgets: Sequence[int]) -> int:
    """The budget whose call is timed: 2000 when run, else the middle one."""
    ordered = sorted(budgets)
    return LATENCY_BUDGET if LATENCY_BUDGET in ordered else ordered[len(ordered) // 2]


# ---- the log: resume, shards, merge -----------------------------------------------------------------------------
def _header(
    path: str | Path, *, budgets: tuple[int, ...], methods: list[str], settings: dict[str, Any], command: str
) -> dict[str, Any]:
    return {
        "kind": "header",
        "format": LOG_FORMAT,
        "version": 1,
        "dataset": str(path),
        "dataset_sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
        "budgets": list(budgets),
        "methods": methods,
        "settings": settings,
        "provenance": provenance(command),
    }


def read_log(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A log's header and its rows by question id (a line cut off by a stopped run is left out)."""
    header: dict[str, Any] | None = None
    rows: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the last line of a run killed mid-write
        if record.get("kind") == "header" and header is None:
            header = record
        elif record.get("kind") == "question":
            rows.setdefault(str(record["question_id"]), record)
    if header is None or header.get("format") != LOG_FORMAT:
        msg = f"{path}: not a LongMemEval results log (no '{LOG_FORMAT}' header line)"
        raise ValueError(msg)
    return header, rows


def _check_same(header: dict[str, Any], other: dict[str, Any], where: Path) -> None:
    differ = [key for key in SHARED if header.get(key) != other.get(key)]
    if differ:
        theirs = {key: other.get(key) for key in differ}
        msg = (
            f"{where} was written with other {', '.join(differ)} ({theirs}): pass another log "
            "(--log), or run with the same settings"
        )
        raise ValueError(msg)


def open_log(path: Path, header: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rows a log already holds (after checking it was written with the same settings), or a new log.

    ``header`` (this run's) gets ``runs``: the provenance of the runs whose rows the log holds, then this run's.
    """
    if path.is_file() and path.stat().st_size:
        found, rows = read_log(path)
        _check_same(header, found, path)
        if not path.read_bytes().endswith(b"\n"):  # a line cut off by a kill: the next row starts on its own line
            append_row(path, None)
        header["runs"] = [*_runs(found), header["provenance"]]
        return rows
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(header) + "\n", encoding="utf-8")
    return {}


def append_row(path: Path, row: dict[str, Any] | None) -> None:
    """Append one question's row (``None``: only end the last line) and flush it to disk."""
    with path.open("a", encoding="utf-8") as out:
        out.write((json.dumps(row) if row is not None else "") + "\n")


def merge_longmemeval(
    path: str | Path,
    logs: Sequence[str | Path],
    *,
    log: str | Path,
    questions: int | None = None,
    per_type: int | None = None,
    seed: int = 0,
    command: str = "",
) -> dict[str, Any]:
    """Join the logs of several runs (shards) into ``log`` and summarize the selected questions.

    The logs must share budgets, methods, settings and data; a question in two logs is taken from the first.
    ``questions``, ``per_type`` and ``seed`` select as the runs did (without a shard), so ``questions_missing``
    names what no shard has run yet.
    """
    found = [read_log(Path(p)) for p in logs]
    if not found:
        msg = "logs: name at least one log to merge"
        raise ValueError(msg)
    first = found[0][0]
    if hashlib.sha256(Path(path).read_bytes()).hexdigest() != first["dataset_sha256"]:
        msg = f"{path}: not the data the logs were run on ({first['dataset']}); pass that file"
        raise ValueError(msg)
    rows: dict[str, dict[str, Any]] = {}
    for (header, part), where in zip(found, logs, strict=True):
        _check_same(first, header, Path(where))
        for qid, row in part.items():
            rows.setdefault(qid, row)
    merged = {**first, "provenance": provenance(command), "runs": [run for h, _ in found for run in _runs(h)]}
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text("".join(json.dumps(r) + "\n" for r in [merged, *rows.values()]), encoding="utf-8")
    ids = [
        str(r["question_id"]) for r in select_records(read_records(path), per_type=per_type, limit=questions, seed=seed)
    ]
    result = summarize([rows[i] for i in ids if i in rows], merged, missing=[i for i in ids if i not in rows])
    result["selection"] = {"questions": questions, "per_type": per_type, "seed": seed, "shard": None}
    result["log"] = str(log)
    return result


def _runs(header: dict[str, Any]) -> list[dict[str, Any]]:
    """The provenance of the runs whose rows a log holds (its own run's, unless it was merged or resumed)."""
    return list(header.get("runs") or [header["provenance"]])


def _shard_text(shard: tuple[int, int] | None) -> str | None:
    return f"{shard[0]}/{shard[1]}" if shard else None


# ---- summary ----------------------------------------------------------------------------------------------------
def summarize(rows: list[dict[str, Any]], header: dict[str, Any], *, missing: Sequence[str] = ()) -> dict[str, Any]:
    """The results dict of some question rows (any mix of runs) and the header of their log."""
    budgets = [str(b) for b in header["budgets"]]
    headline = [r for r in rows if r["category"] != ABSTENTION]
    methods = {name: _method_summary(rows, name, budgets) for name in header["methods"]}
    dense = methods.get("dense", {}).get("prepare_seconds")
    tokens = [r["haystack_tokens"] for r in rows] or [0]
    return {
        "benchmark": "longmemeval",
        "methods": methods,
        "questions": len(headline),
        "questions_per_type": {t: sum(r["category"] == t for r in rows) for t in (*QUESTION_TYPES, ABSTENTION)},
        "questions_missing": list(missing),
        "question_seconds": float(sum(r["seconds"] for r in rows)),
        "embedding_floor_seconds": dense,
        "budgets": [int(b) for b in budgets],
        "latency_budget": latency_budget(header["budgets"]),
        "rank_budget": max(header["budgets"]),
        "ks": list(KS),
        "token_stats": {"haystack_tokens_mean": float(np.mean(tokens)), "haystack_tokens_max": float(max(tokens))},
        "provenance": header["provenance"],
        "command": header["provenance"]["command"],
        "runs": _runs(header),
        "dataset": {"path": header["dataset"], "sha256": header["dataset_sha256"]},
        "settings": header["settings"],
    }


def _method_summary(rows: list[dict[str, Any]], name: str, budgets: list[str]) -> dict[str, Any]:
    mine = [r for r in rows if name in r["methods"]]
    headline = [r for r in mine if r["category"] != ABSTENTION]
    latencies = np.asarray([r["methods"][name]["latency_ms"] for r in mine] or [0.0])
    firsts = np.asarray([r["methods"][name]["first_query_ms"] for r in mine] or [0.0])
    prepare = [r["methods"][name]["prepare_seconds"] for r in mine]
    stages: dict[str, float] = {}
    for r in mine:
        for stage, seconds in r["methods"][name].get("stage_seconds", {}).items():
            stages[stage] = round(stages.get(stage, 0.0) + float(seconds), 3)
    by_type = {t: [r for r in mine if r["category"] == t] for t in (*QUESTION_TYPES, ABSTENTION)}
    return {
        **_scores(headline, name, budgets),
        "per_type": {t: _scores(rs, name, budgets) for t, rs in by_type.items() if rs and t != ABSTENTION},
        ABSTENTION: _scores(by_type[ABSTENTION], name, budgets),
        "latency_ms": {
            "p50": float(np.percentile(latencies, 50)),
            "p95": float(np.percentile(latencies, 95)),
            "budget": latency_budget([int(b) for b in budgets]),
            "queries": len(mine),
        },
        "first_query_ms": {"p50": float(np.percentile(firsts, 50)), "p95": float(np.percentile(firsts, 95))},
        "prepare_seconds": float(sum(prepare)),
        "prepare_seconds_per_question": float(np.mean(prepare)) if prepare else 0.0,
        **({"stage_seconds": stages} if stages else {}),
        "mean_context_tokens": {b: _mean([r["methods"][name]["context_tokens"][b] for r in mine]) for b in budgets},
        "budget_violations": sum(r["methods"][name]["over_budget"] for r in mine),
        "mean_ranked_turns": _mean(
            [r["methods"][name]["ranked_turns"] for r in mine if r["methods"][name]["ranked_turns"] is not None]
        ),
    }


def _scores(rows: list[dict[str, Any]], name: str, budgets: list[str]) -> dict[str, Any]:
    """Budget recall and the ranked metrics of one method over some rows, with the counts they average over."""
    scored = [r["methods"][name]["recall"] for r in rows if r["methods"][name]["recall"] is not None]
    retrieval: dict[str, Any] = {}
    for level in LEVELS:
        values = [
            r["methods"][name]["retrieval"][level] for r in rows if (r["methods"][name]["retrieval"] or {}).get(level)
        ]
        keys = values[0].keys() if values else ()
        retrieval[level] = {key: _mean([v[key] for v in values]) for key in keys} | {"questions": len(values)}
    return {
        "questions": len(rows),
        "recall_questions": len(scored),
        "recall_all": {b: _mean([float(s[b][0]) for s in scored]) for b in budgets},
        "recall_frac": {b: _mean([float(s[b][1]) for s in scored]) for b in budgets},
        "retrieval": retrieval,
        "latency_ms_p50": float(np.median([r["methods"][name]["latency_ms"] for r in rows])) if rows else 0.0,
    }


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else 0.0


def _progress_bar(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )


# ---- presentation -----------------------------------------------------------------------------------------------
def _pct(value: float) -> str:
    return f"{100.0 * value:.1f}"


SHORT_TYPES = {
    "single-session-user": "ss-user",
    "single-session-assistant": "ss-asst",
    "single-session-preference": "ss-pref",
    "multi-session": "multi",
    "temporal-reasoning": "temporal",
    "knowledge-update": "k-update",
    ABSTENTION: "abstain",
}
"""Column names narrow enough for an 80-column terminal."""


def results_tables(result: dict[str, Any]) -> list[Any]:
    """The ``rich`` tables the CLI prints: budget recall, the paper's metrics, per type, and cost."""
    from rich.table import Table

    budgets = [str(b) for b in result["budgets"]]
    recall = Table(title=f"LongMemEval evidence recall ({result['questions']} questions, abstention apart): all/frac %")
    recall.add_column("method", style="bold", no_wrap=True)
    for b in budgets:
        recall.add_column(f"B={b}", justify="right")
    for name, m in report.by_recall(result):
        recall.add_row(name, *(f"{_pct(m['recall_all'][b])}/{_pct(m['recall_frac'][b])}" for b in budgets))
    return [recall, paper_table(result), type_table(result), cost_table(result)]


def paper_table(result: dict[str, Any]) -> Any:
    """The paper's metrics, one row per method and level, in %."""
    from rich.table import Table

    table = Table(title="the paper's metrics on each method's ranked turns, %")
    table.add_column("method", style="bold", no_wrap=True)
    table.add_column("level", no_wrap=True)
    metrics = [f"{m}@{k}" for k in result["ks"] for m in ("recall_any", "recall_all", "ndcg")]
    for metric in metrics:
        table.add_column(metric.replace("recall_", ""), justify="right")
    for name, m in report.by_recall(result):
        for level in LEVELS:
            scores = m["retrieval"][level]
            n = scores["questions"]
            cells = [_pct(scores[x]) if n else "-" for x in metrics]
            table.add_row(name if level == LEVELS[0] else "", f"{level} ({n})", *cells)
    return table


def type_table(result: dict[str, Any]) -> Any:
    """Per type: recall_all at the latency budget and session recall_any@5, in %."""
    from rich.table import Table

    key, counts = str(result["latency_budget"]), result["questions_per_type"]
    table = Table(title=f"by type: recall_all @{key} / session recall_any@5, % rounded")
    table.add_column("method", style="bold", no_wrap=True)
    types = [t for t in (*QUESTION_TYPES, ABSTENTION) if counts.get(t)]
    for t in types:
        table.add_column(f"{SHORT_TYPES[t]}\n({counts[t]})", justify="right")
    for name, m in report.by_recall(result):
        parts = [m[ABSTENTION] if t == ABSTENTION else m["per_type"][t] for t in types]
        table.add_row(name, *(_type_cell(p, key) for p in parts))
    return table


def _type_cell(part: dict[str, Any], key: str) -> str:
    recall = f"{100 * part['recall_all'][key]:.0f}" if part["recall_questions"] else "-"
    session = part["retrieval"]["session"]
    return f"{recall}/{100 * session['recall_any@5']:.0f}" if session["questions"] else f"{recall}/-"


def cost_table(result: dict[str, Any]) -> Any:
    """Latency at the latency budget, ingestion per question against the embedding floor, tokens."""
    from rich.table import Table

    key, floor = str(result["latency_budget"]), result.get("embedding_floor_seconds")
    shared = " (hybrid_rrf reads dense's encoding)" if {"dense", "hybrid_rrf"} <= set(result["methods"]) else ""
    table = Table(
        title=f"cost: query latency at B={key} (and of a fresh store's first query); ingestion per question "
        f"(x dense's, the embedding floor){shared}"
    )
    table.add_column("method", style="bold", no_wrap=True)
    for header in (
        "p50 ms",
        "p95 ms",
        "first p50 ms",
        "prepare s/q",
        "x floor",
        f"tokens@{key}",
        "ranked turns",
        "over budget",
    ):
        table.add_column(header, justify="right")
    for name, m in report.by_recall(result):
        table.add_row(
            name,
            f"{m['latency_ms']['p50']:.0f}",
            f"{m['latency_ms']['p95']:.0f}",
            f"{m['first_query_ms']['p50']:.0f}",
            f"{m['prepare_seconds_per_question']:.1f}",
            f"{m['prepare_seconds'] / floor:.1f}" if floor else "-",
            f"{m['mean_context_tokens'][key]:.0f}",
            f"{m['mean_ranked_turns']:.0f}",
            str(m["budget_violations"]),
        )
    return table


def plot_recall(result: dict[str, Any], path: str | Path) -> Path:
    """Write a PNG of recall_all against budget, one line per method; returns the path."""
    title = f"LongMemEval evidence recall ({result['questions']} questions, abstention apart)"
    return report.plot_recall(result, path, title=title, log_budgets=True)
