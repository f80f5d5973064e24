"""Write the current tables at the top of BENCHMARKS.md from the results JSON in benchmarks/results/.

Every number between the two markers in BENCHMARKS.md comes from a results file, with the commit, date,
machine and command recorded in that file's ``provenance`` block, so the text cannot disagree with the JSON.
Rerun a bench, then::

    python benchmarks/render.py           # rewrite the part between the markers
    python benchmarks/render.py --check   # exit 1 if BENCHMARKS.md is not what the JSON renders to

``tests/unit_tests/test_benchmarks_doc.py`` runs the check.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "BENCHMARKS.md"
BEGIN = "<!-- BEGIN CURRENT TABLES: written by benchmarks/render.py from benchmarks/results/*.json; do not edit -->"
END = "<!-- END CURRENT TABLES -->"
CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}

Results = dict[str, dict[str, Any]]


def pct(value: float) -> str:
    """A fraction as a percentage with one decimal, halves rounded up: ``0.7005`` -> ``"70.1"``.

    Rounded from the decimal the JSON holds, so a value stored to four places is not rounded down by binary
    floating point (``f"{100 * 0.7005:.1f}"`` gives ``"70.0"``).
    """
    return str((Decimal(repr(value)) * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def count(value: float) -> str:
    """A whole number with thousands separators: ``13370`` -> ``"13,370"``."""
    return f"{value:,.0f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def provenance(results: Results, names: tuple[str, ...]) -> str:
    """Which commit, date, machine and command each file comes from, and the notes the files carry."""
    rows, notes = [], []
    for name in names:
        block = results[name]["provenance"]
        machine = block["machine"]
        commit = block["commit"] if block["commit"] == "not recorded" else f"`{block['commit']}`"
        rows.append(
            [
                f"`{name}.json`",
                commit,
                block["date"][:10],
                f"{machine['cores']} cores, {machine['memory_gib']} GiB, {machine['platform']}",
                f"`{block['command']}`",
            ]
        )
        if block.get("note"):
            notes.append(f"- `{name}.json`: {block['note']}.")
    parts = [table(["results file", "commit", "date", "machine", "command"], rows)]
    return "\n\n".join(parts + (["\n".join(notes)] if notes else []))


def _by_recall(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    key = str(result["latency_budget"])
    return sorted(result["methods"].items(), key=lambda item: -item[1]["recall_all"][key])


def locomo(results: Results) -> str:
    """recall_all / recall_frac per method and budget, then per category at the latency budget."""
    result = results["locomo"]
    budgets = [str(b) for b in result["budgets"]]
    key = str(result["latency_budget"])
    rows = [
        [
            name,
            *(f"{pct(m['recall_all'][b])} / {pct(m['recall_frac'][b])}" for b in budgets),
            f"{m['latency_ms']['p50']:.0f} / {m['latency_ms']['p95']:.0f}",
        ]
        for name, m in _by_recall(result)
    ]
    main = table(["method", *(f"B={b}" for b in budgets), f"p50 / p95 ms at B={key}"], rows)
    counts = result["questions_per_category"]
    cats = [c for c in CATEGORIES if c in counts]
    by_cat = [
        [name, *(pct((m["per_category"].get(c) or m["category_5"])["recall_all"][key]) for c in cats)]
        for name, m in _by_recall(result)
    ]
    categories = table(["method", *(f"{c} {CATEGORIES[c]} ({counts[c]})" for c in cats)], by_cat)
    return "\n\n".join(
        [
            "## LoCoMo: evidence recall under a token budget",
            f"recall_all / recall_frac in %, categories 1-4 ({count(result['questions'])} questions of "
            f"{len(result['conversations'])} conversations); latency is one query's context at B={key}, the query's "
            "embedding included.",
            main,
            f"recall_all at B={key} by category, in % (category 5, adversarial, is not in the headline):",
            categories,
            f"The run took {count(result['runtime_seconds'])} s, memstrata's ingestion "
            f"{count(result['ingest_seconds'])} s, peak memory {count(result['peak_memory_mb'])} MB. "
            + _baselines_alone(results),
            *_stage_costs(result),
            provenance(results, ("locomo", "locomo_baselines")),
        ]
    )


def _stage_costs(result: dict[str, Any]) -> list[str]:
    """The ingestion seconds of memstrata per stage, against the embedding floor (dense's own ingestion)."""
    ours, dense = result["methods"].get("memstrata", {}), result["methods"].get("dense", {})
    stages = ours.get("stage_seconds")
    if not stages:
        return []
    total, floor = sum(stages.values()), dense.get("prepare_seconds")
    rows = [[stage, f"{seconds:.1f}", pct(seconds / total)] for stage, seconds in stages.items()]
    against = (
        f"; memstrata's whole ingestion was {ours['prepare_seconds'] / floor:.1f}x the embedding floor (dense's "
        f"ingestion, each turn embedded once: {floor:.1f} s) in the same run"
        if floor
        else ""
    )
    return [
        f"Where memstrata's ingestion went, per stage (seconds summed over the conversations){against}:",
        table(["stage", "seconds", "share in %"], rows),
    ]


def _baselines_alone(results: Results) -> str:
    """Whether the baselines-only run gives the baselines the same recall as the headline run."""
    alone, headline = results["locomo_baselines"], results["locomo"]
    fields = ("recall_all", "recall_frac", "per_category", "category_5")
    same = all(headline["methods"].get(name, {}).get(f) == m[f] for name, m in alone["methods"].items() for f in fields)
    verdict = (
        "the same recall_all and recall_frac, at every budget and in every category, as in the run above"
        if same
        else "a different recall from the run above (see that file)"
    )
    return f"The baselines alone (`locomo_baselines.json`: {', '.join(alone['methods'])}) gave {verdict}."


def scale(results: Results) -> str:
    """Latency, planted recall and memory per store size and search path, and the chat pattern."""
    result = results["scale"]
    rows = []
    for size in result["sizes"]:
        for path, m in size["paths"].items():
            default = " (default)" if path == size["default_path"] else ""
            recall = next(v for k, v in m.items() if k.startswith("planted_recall_all@"))
            first = path == next(iter(size["paths"]))
            latency = f"{count(m['query_p50_ms'])} / {count(m['query_p95_ms'])}"
            tiered = any(k.startswith("answered_from_tier_") for k in m)
            shares = [f"{m.get(f'answered_from_tier_{t}', 0):.0f}" for t in (1, 2, 3)] if tiered else []
            rows.append(
                [
                    count(size["turns"]),
                    path + default,
                    latency,
                    f"{recall:.1f}",
                    " / ".join(shares) if shares else "",
                    count(m["query_process_peak_mb"]),
                    count(size["disk_mb"]),
                    f"{size['copy_turns_per_second']:.1f}" if first else "",
                ]
            )
    first_path = next(iter(result["sizes"][0]["paths"].values()))
    budget = next(k for k in first_path if k.startswith("planted_recall_all@"))
    chat = result["chat"]
    return "\n\n".join(
        [
            "## Scale: one user with many turns",
            "LoCoMo's ten conversations ingested through the graph, then perturbed copies of their stored units until "
            "the user holds the given number of turns; planted questions asked by a separate query process.",
            table(
                [
                    "turns of one user",
                    "search path",
                    "query p50 / p95 ms",
                    f"planted {budget.replace('planted_', '')}",
                    "answered from tier 1 / 2 / 3, %",
                    "query-process peak MB",
                    "disk MB",
                    "copy writes, turns/s",
                ],
                rows,
            ),
            f"The chat pattern ({count(chat['turns'])} turns, {chat['rounds']} rounds of a one-message write then a "
            f"query): query p50 / p95 {chat['read_only_p50_ms']} / {chat['read_only_p95_ms']} ms read-only, "
            f"{chat['after_write_p50_ms']} / {chat['after_write_p95_ms']} ms after a write (p50 ratio "
            f"{chat['ratio_p50']}); a write's p50 {count(chat['write_p50_ms'])} ms.",
            provenance(results, ("scale",)),
        ]
    )


def tiers(results: Results) -> str:
    """HMO's tiers against the archive alone, per store size (and through a ``chroma run`` server, when measured)."""
    rows = []
    names = tuple(name for name in ("scale_tiers", "scale_10k", "scale_1m", "scale_server") if name in results)

    def recall(m: dict) -> float:
        return next(v for k, v in m.items() if k.startswith("planted_recall_all@"))

    def shares(m: dict) -> str:
        tiered = any(k.startswith("answered_from_tier_") for k in m)
        share = (f"{m.get(f'answered_from_tier_{t}', 0):.1f}".removesuffix(".0") for t in (1, 2, 3))
        return " / ".join(share) if tiered else ""

    for name in names:
        for size in results[name]["sizes"]:
            store = size.get("store", "embedded") + (", grown over several runs" if size.get("grown_over_runs") else "")
            for path, m in size["paths"].items():
                again = m.get("revisit")
                rows.append(
                    [
                        count(size["turns"]),
                        f"`{results[name]['provenance']['commit']}`",
                        store,
                        path,
                        f"{count(m['query_p50_ms'])} / {count(m['query_p95_ms'])}",
                        f"{recall(m):.1f}",
                        shares(m),
                        f"{again['questions']}: {count(again['query_p50_ms'])} ms, {recall(again):.1f}"
                        + (f", {shares(again)}" if shares(again) else "")
                        if again
                        else "",
                        count(m["query_process_peak_mb"]),
                        count(m["server_peak_mb"]) if "server_peak_mb" in m else "",
                    ]
                )
    budget = next(
        k for k in next(iter(results["scale_tiers"]["sizes"][0]["paths"].values())) if k.startswith("planted_")
    )
    return "\n\n".join(
        [
            "## Scale: HMO's tiers against the archive alone",
            "The same grown user as above; 'bounded' searches the archive alone, 'tiered' the cache, then the cache "
            "and buffer, then the archive, going deeper when the gate says so (offline: the retrieval confidence, and "
            "the tier must hold the archive's nearest summaries). 'Asked again': the first questions asked a second "
            "time after the first pass (`--revisits`), once the tiers took that pass's promotions. The results "
            "files were run on different commits (the tables give each row's), so a ratio between sizes holds only "
            "within one commit.",
            table(
                [
                    "turns of one user",
                    "commit",
                    "store",
                    "search path",
                    "query p50 / p95 ms",
                    f"planted {budget.replace('planted_', '')}",
                    "answered from tier 1 / 2 / 3, %",
                    "asked again: questions: p50, recall, tier 1 / 2 / 3 %",
                    "query-process peak MB",
                    "server peak MB",
                ],
                rows,
            ),
            provenance(results, names),
        ]
    )


def chat(results: Results) -> str:
    """A conversation written a message at a time against the same messages in one call."""
    rows = []
    for name in ("chat_counting", "chat_conv26"):
        result = results[name]
        budgets = list(result["recall"]["stream"]["recall_all"])
        offline, llm = result["offline"], result.get("llm", {})
        for mode, label in (("stream", "a message at a time"), ("batch", "one call")):
            seconds = (
                f"{offline['seconds_per_message']['total']:.1f} (p50 {offline['seconds_per_message']['p50']:.2f}"
                f" / p95 {offline['seconds_per_message']['p95']:.2f} a message)"
                if mode == "stream"
                else f"{offline['batch_seconds']:.1f}"
            )
            calls = f"{llm[mode]['calls']} / {count(llm[mode]['prompt_tokens'])}" if llm else "-"
            recall = result["recall"][mode]
            rows.append(
                [
                    f"`{name}`",
                    str(result["messages"]),
                    result["model"],
                    label,
                    seconds,
                    calls,
                    str(recall["questions"]),
                    " / ".join(pct(recall["recall_all"][b]) for b in budgets),
                ]
            )
    return "\n\n".join(
        [
            "## Chat: a message at a time against one call",
            f"One LoCoMo conversation ({results['chat_conv26']['conversation']}) written one `ingest` call per "
            "message, and the same messages in one call. The counting model answers every structured call with a valid "
            "reply, so it counts what memstrata asks of a model, not answer quality; recall is scored on the "
            "questions whose evidence was written.",
            table(
                [
                    "file",
                    "messages",
                    "model",
                    "written",
                    "seconds",
                    "model calls / prompt tokens",
                    "questions",
                    f"recall_all % at B={' / '.join(budgets)}",
                ],
                rows,
            ),
            provenance(results, ("chat_counting", "chat_conv26")),
        ]
    )


def llm_mode(results: Results) -> str:
    """What LLM mode costs per query: the oracle reader (perfect decisions) and a small real model."""
    rows = []
    for name, label in (("locomo_reader_oracle", "oracle"), ("locomo_reader_oracle-deep", "oracle, forced deep")):
        stats = results[name]["methods"]["memstrata"]
        llm = stats["llm"]
        row = llm["per_category"]["1-4"]
        rows.append(
            [
                label,
                f"`{name}`",
                count(row["questions"]),
                pct(row["light_share"]),
                f"{row['calls']:.1f}",
                count(row["prompt_tokens"]),
                count(row["completion_tokens"]),
                pct(row["fallback_rate"]),
                pct(stats["recall_all"][str(llm["budget"])]),
            ]
        )
    small = results["llm_mode"]
    queries = small["queries"]
    rows.append(
        [
            f"{small['model']} (a real model)",
            "`llm_mode`",
            str(queries["n"]),
            pct(1.0 - queries["deep_share"]),
            f"{queries['calls_per_query']:.1f}",
            count(queries["prompt_tokens_per_query"]),
            count(queries["completion_tokens_per_query"]),
            pct(queries["fallback_rate"]),
            "not measured",
        ]
    )
    budget = results["locomo_reader_oracle"]["methods"]["memstrata"]["llm"]["budget"]
    return "\n\n".join(
        [
            "## LLM mode: what a query costs",
            "Per query. The oracle reader is a scripted model that knows each question's gold evidence: it measures "
            "the pipeline's cost with perfect decisions (never answer quality), on LoCoMo's categories 1-4 with "
            f"offline ingestion, at B={budget}; forced deep, its self-check always fails. The real model ran on "
            f"{small['conversation']}'s first {small['sessions']} sessions, ingested with the model "
            f"({small['ingest']['llm_calls']} calls, {count(small['ingest']['prompt_tokens'])} prompt tokens).",
            table(
                [
                    "reader",
                    "file",
                    "questions",
                    "light path %",
                    "LLM calls",
                    "prompt tokens",
                    "completion tokens",
                    "fallbacks % of calls",
                    f"recall_all % at B={budget}",
                ],
                rows,
            ),
            provenance(results, ("locomo_reader_oracle", "locomo_reader_oracle-deep", "llm_mode")),
        ]
    )


LME_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)

LME_BASELINES = ("bm25", "dense", "hybrid_rrf", "random")


def longmemeval(results: Results) -> str:
    """LongMemEval-S: budget recall, the paper's ranked metrics at three levels, per type, and cost.

    Reads ``results["longmemeval"]`` (the JSON of ``memstrata bench longmemeval``). Not in :data:`SECTIONS` until
    a run's results file is committed; ``python benchmarks/render.py --longmemeval FILE`` prints it from any file.
    """
    result = results["longmemeval"]
    budgets = [str(b) for b in result["budgets"]]
    key = str(result["latency_budget"])
    ranked = sorted(result["methods"].items(), key=lambda item: -item[1]["recall_all"][key])
    main = table(
        ["method", *(f"B={b}" for b in budgets), f"p50 / p95 ms at B={key}"],
        [
            [
                name,
                *(f"{pct(m['recall_all'][b])} / {pct(m['recall_frac'][b])}" for b in budgets),
                f"{m['latency_ms']['p50']:.0f} / {m['latency_ms']['p95']:.0f}",
            ]
            for name, m in ranked
        ],
    )
    levels = (("session", "session"), ("turn", "turn"), ("turn_user", "user turn"))
    metrics = ("recall_any@5", "recall_any@10", "recall_all@10", "ndcg@10")
    paper = table(
        ["method", *(f"{label} {metric.replace('recall_', '')}" for _, label in levels for metric in metrics)],
        [
            [name, *(_lme_metric(m["retrieval"][level], x) for level, _ in levels for x in metrics)]
            for name, m in ranked
        ],
    )
    counts = result["questions_per_type"]
    types = [t for t in LME_TYPES if counts.get(t)]
    by_type = table(
        ["method", *(f"{t} ({counts[t]})" for t in types), f"abstention ({counts.get('abstention', 0)})"],
        [
            [name, *(_lme_type(m["per_type"][t], key) for t in types), _lme_type(m["abstention"], key)]
            for name, m in ranked
        ],
    )
    questions = ranked[0][1]["retrieval"]
    return "\n\n".join(
        [
            "## LongMemEval-S: evidence recall under a token budget, and the paper's retrieval metrics",
            f"recall_all / recall_frac in %, {count(result['questions'])} questions with evidence (abstention apart); "
            f"latency is one query's context at B={key}. A turn counts when its text is in the context verbatim "
            "(`docs/benchmarks/longmemeval.md` says how this differs from the published figures).",
            main,
            f"The paper's recall_any, recall_all and NDCG in %, on each method's ranked turns (memstrata's: the turns "
            f"it cites at B={result['rank_budget']}, in rank order); sessions ranked by their first turn "
            f"({questions['session']['questions']} questions), every turn ({questions['turn']['questions']}), user "
            f"turns only as the official scoring ({questions['turn_user']['questions']}: the questions whose evidence "
            "the user said):",
            paper,
            f"By type: recall_all at B={key} / session recall_any@5, in %:",
            by_type,
            _lme_cost(result),
            provenance(results, ("longmemeval",)),
        ]
    )


def _lme_metric(level: dict[str, Any], metric: str) -> str:
    return pct(level[metric]) if level["questions"] else "-"


def _lme_type(part: dict[str, Any], key: str) -> str:
    recall = pct(part["recall_all"][key]) if part["recall_questions"] else "-"
    session = part["retrieval"]["session"]
    return f"{recall} / {pct(session['recall_any@5']) if session['questions'] else '-'}"


def _lme_cost(result: dict[str, Any]) -> str:
    """Ingestion seconds per question of each method, against dense's (the embedding floor)."""
    floor = result.get("embedding_floor_seconds")
    parts = [
        f"{name} {m['prepare_seconds_per_question']:.1f} s"
        + (f" ({m['prepare_seconds'] / floor:.1f}x)" if floor and name not in LME_BASELINES else "")
        for name, m in result["methods"].items()
    ]
    if {"dense", "hybrid_rrf"} <= set(result["methods"]):
        parts.append("hybrid_rrf reads dense's encoding of the turns, so its time is its BM25 index")
    firsts = [f"{name} {m['first_query_ms']['p50']:.0f} ms" for name, m in result["methods"].items()]
    runs = len(result.get("runs", [])) or 1
    haystack = count(result["token_stats"]["haystack_tokens_mean"])
    return (
        f"Ingestion per question ({'x dense, the embedding floor' if floor else 'no dense in the run'}): "
        f"{'; '.join(parts)}. The latency above is of the question asked after one other query; a fresh store's "
        f"first query (memstrata loads its search snapshot then) took, p50: {'; '.join(firsts)}. The questions took "
        f"{count(result['question_seconds'])} s in {runs} run(s); a haystack held {haystack} tokens on average."
    )


def tenants(results: Results) -> str:
    """Many users in one store: a user's query among them against the same user alone, and the serving peak."""
    names = tuple(name for name in ("tenants", "tenants_server") if name in results)
    rows = []
    for name in names:
        result = results[name]
        for where, label in (("alone", "alone"), ("shared", f"among {count(result['users'])} users")):
            m = result[where]
            server = m.get("server_peak_mb")
            rows.append(
                [
                    result["deployment"],
                    label,
                    f"{m['warm_p50_ms']:.0f} / {m['warm_p95_ms']:.0f}",
                    f"{m['cold_p50_ms']:.0f} / {m['cold_p95_ms']:.0f}",
                    f"{count(m['warm_queries'])} / {count(m['cold_queries'])}",
                    pct(m["recall_all"]),
                    str(m["foreign_citations"]),
                    count(m["query_process_peak_mb"]) + (f" (server {count(server)})" if server else ""),
                ]
            )
    first = results[names[0]]
    ratios = "; ".join(
        f"{results[n]['deployment']}: warm among users / alone "
        f"{results[n]['shared']['warm_p50_ms'] / results[n]['alone']['warm_p50_ms']:.2f}, cold / warm among users "
        f"{results[n]['shared']['cold_p50_ms'] / results[n]['shared']['warm_p50_ms']:.2f}, growth "
        f"{count(results[n]['copy_s'])} s, the first user's citations the same as alone: "
        f"{'yes' if results[n]['source_same_citations'] else 'no'}"
        for n in names
    )
    return "\n\n".join(
        [
            "## Tenants: one user among many in one store",
            f"Each user holds the first {first['sessions']} sessions of LoCoMo's {first['conversation']} "
            f"({first['turns_per_user']} turns, {first['questions']} questions, B={first['budget']}); a fresh query "
            "process asks the warm users every question and serves every other user one (a cold query each).",
            table(
                [
                    "deployment",
                    "the user",
                    "warm p50 / p95 ms",
                    "cold p50 / p95 ms",
                    "warm / cold queries",
                    "recall_all %",
                    "cited turns of another user",
                    "query-process peak MB",
                ],
                rows,
            ),
            f"p50 ratios: {ratios}.",
            provenance(results, names),
        ]
    )


FRAC = ("all (recall_frac)", "recall_frac")
MECHANISM_PARTS = {
    "variants_locomo": ("LoCoMo", (FRAC, ("1", "multi-hop"), ("3", "open-domain"))),
    "variants_longmemeval": (
        "LongMemEval",
        (FRAC, ("multi-session", "multi-session"), ("knowledge-update", "knowledge-update")),
    ),
}


def mechanisms(results: Results) -> str:
    """Each paper's mechanism on and off (``benchmarks/variants.py``): recall_all per budget on one ingest, on both
    benchmarks, with the categories the papers' retrieval is meant for.
    """
    names = tuple(name for name in MECHANISM_PARTS if name in results)
    if not names:
        return ""
    parts = [
        "## Mechanisms: each one on and off",
        "Each results file below is one ingest per conversation (or LongMemEval question), then the same questions "
        "under named variants of the retrieval settings (`benchmarks/variants.py`; the first row is the default, "
        "each other row names what it changes). The headline numbers always come from the benchmarks themselves.",
    ]
    for name in names:
        result = results[name]
        label, categories = MECHANISM_PARTS[name]
        budgets = [str(b) for b in result["budgets"]]
        mid = budgets[len(budgets) // 2]
        rows = []
        for variant, scores in result["variants"].items():
            cells = [scores["all"].get(b) for b in budgets]
            extra = [scores.get(key, {}).get(mid) for key, _ in categories]
            rows.append([variant, *(f"{c:.1f}" if c is not None else "-" for c in [*cells, *extra])])
        header = ["variant", *(f"B={b}" for b in budgets), *(f"{title} at B={mid}" for _, title in categories)]
        parts += [
            f"**{label}**, {result['questions']} questions ({', '.join(result['histories'][:6])}"
            f"{', ...' if len(result['histories']) > 6 else ''}): recall_all %, and at the middle budget the share "
            "of gold turns present (recall_frac) and recall_all of the categories the papers' retrieval is for.",
            table(header, rows),
        ]
    parts.append(provenance(results, names))
    return "\n\n".join(parts)


SECTIONS: tuple[Callable[[Results], str], ...] = (locomo, scale, tiers, tenants, chat, llm_mode, mechanisms)
FILES = (
    "locomo",
    "locomo_baselines",
    "scale",
    "scale_tiers",
    "scale_10k",
    "scale_1m",
    "scale_server",
    "tenants",
    "chat_counting",
    "chat_conv26",
    "locomo_reader_oracle",
    "locomo_reader_oracle-deep",
    "llm_mode",
)

OPTIONAL = (
    "tenants_server",
    "variants_locomo",
    "variants_longmemeval",
)  # rendered when present: a run not every machine can make in one sitting


def load(folder: Path = RESULTS) -> Results:
    """The results files the tables read, by name."""
    found = {name: json.loads((folder / f"{name}.json").read_text(encoding="utf-8")) for name in FILES}
    for name in OPTIONAL:
        if (folder / f"{name}.json").exists():
            found[name] = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    return found


def render(results: Results) -> str:
    """The part of BENCHMARKS.md between the markers, markers included."""
    return "\n\n".join([BEGIN, *(text for section in SECTIONS if (text := section(results))), END])


def replace(doc: str, block: str) -> str:
    """``doc`` with the part between the markers replaced by ``block``."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        msg = f"BENCHMARKS.md: the markers {BEGIN!r} and {END!r} are missing or out of order; put them back"
        raise ValueError(msg)
    return doc[:start] + block + doc[end + len(END) :]


def main() -> int:
    """Rewrite BENCHMARKS.md's current tables, or with ``--check`` report whether they are stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if BENCHMARKS.md differs from the JSON")
    parser.add_argument("--doc", type=Path, default=DOC)
    parser.add_argument("--longmemeval", type=Path, help="print the LongMemEval section of this results JSON and exit")
    args = parser.parse_args()
    if args.longmemeval:
        print(longmemeval({"longmemeval": json.loads(args.longmemeval.read_text(encoding="utf-8"))}))
        return 0
    doc = args.doc.read_text(encoding="utf-8")
    new = replace(doc, render(load()))
    if args.check:
        if new != doc:
            sys.stderr.write(f"{args.doc} is stale: run python benchmarks/render.py\n")
            return 1
        return 0
    args.doc.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
