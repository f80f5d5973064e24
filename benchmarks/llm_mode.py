"""Meter memstrata in LLM mode on one LoCoMo conversation: calls, tokens, fallbacks, deep-path share.

This measures cost and robustness, not answer quality. Point it at any OpenAI-compatible server:

    python -m llama_cpp.server --model SmolLM2-135M-Instruct.Q4_1.gguf --host 127.0.0.1 --port 8011 --n_ctx 8192
    python benchmarks/llm_mode.py ../shared/data/locomo/locomo10.json --base-url http://127.0.0.1:8011/v1 \
        --conversation conv-26 --questions 20 --out benchmarks/results/llm_mode.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from langchain_openai import ChatOpenAI
from memstrata_bench.locomo import load_locomo
from memstrata_bench.provenance import provenance

from memstrata import Memstrata


def _session_no(key: str) -> int | None:
    parts = key.split("_")
    return int(parts[1]) if len(parts) >= 2 and parts[0] == "session" and parts[1].isdigit() else None


def _model(base_url: str, name: str, max_tokens: int) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=base_url,
        api_key="sk-local",
        model=name,
        temperature=0,
        timeout=120,
        max_retries=0,
        stream_usage=True,
        max_tokens=max_tokens,
        extra_body={"max_tokens": max_tokens},
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    conv = next(c for c in load_locomo(args.path) if c.sample_id == args.conversation)
    raw = conv.raw
    if args.sessions:
        # A prefix of the sessions, and only the questions whose evidence lies inside it.
        body = {k: v for k, v in raw["conversation"].items() if not _session_no(k) or _session_no(k) <= args.sessions}
        raw = {**raw, "conversation": body}
        conv.questions = [
            q for q in conv.questions if all(int(e[1:].split(":")[0]) <= args.sessions for e in q.evidence)
        ]
    mem = Memstrata(
        path=tempfile.mkdtemp(prefix="memstrata-llm-"), model=_model(args.base_url, args.model, 256), llm_timeout_s=120
    )
    started = time.perf_counter()
    ingest = await mem.aingest(raw, user_id="llm")
    ingest_seconds = time.perf_counter() - started
    queries: list[dict[str, Any]] = []
    _save(args, _summary(args, ingest, ingest_seconds, queries))  # partial results survive an interruption
    for q in conv.questions[: args.questions]:
        t0 = time.perf_counter()
        result = await mem.aask(q.question, user_id="llm", conversation_id=conv.sample_id)
        llm = result.trace["llm"]
        queries.append(
            {
                "question": q.question,
                "path": result.trace["path"],
                "calls": llm["calls"],
                "prompt_tokens": llm["prompt_tokens"],
                "completion_tokens": llm["completion_tokens"],
                "fallbacks": llm["fallbacks"],
                "outcomes": llm.get("outcomes", {}),
                "usage_sources": llm["usage_sources"],
                "seconds": round(time.perf_counter() - t0, 2),
                "answered": result.answer is not None,
            }
        )
        _save(args, _summary(args, ingest, ingest_seconds, queries))
    return _summary(args, ingest, ingest_seconds, queries)


def _save(args: argparse.Namespace, report: dict[str, Any]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))


def _summary(
    args: argparse.Namespace, ingest: dict[str, Any], seconds: float, queries: list[dict[str, Any]]
) -> dict[str, Any]:
    n = max(1, len(queries))
    outcomes: Counter[str] = Counter()
    for q in queries:
        outcomes.update(q["outcomes"])
    ingest_llm = ingest.get("llm", {})
    ingest_calls = sum(v.get("calls", 0) for v in ingest_llm.values())
    ingest_fallbacks = sum(v.get("fallbacks", 0) for v in ingest_llm.values())
    return {
        "provenance": provenance(shlex.join(["python", *sys.argv])),
        "conversation": args.conversation,
        "sessions": args.sessions or "all",
        "model": args.model,
        "base_url": args.base_url,
        "ingest": {
            "turns": ingest.get("turns_seen"),
            "episodes": ingest.get("episodes_written"),
            "seconds": round(seconds, 1),
            "llm_calls": ingest_calls,
            "prompt_tokens": sum(v.get("prompt_tokens", 0) for v in ingest_llm.values()),
            "completion_tokens": sum(v.get("completion_tokens", 0) for v in ingest_llm.values()),
            "fallback_rate": round(ingest_fallbacks / max(1, ingest_calls), 3),
            "per_node": {
                k: {kk: v.get(kk) for kk in ("calls", "prompt_tokens", "completion_tokens", "fallbacks")}
                for k, v in ingest_llm.items()
            },
        },
        "queries": {
            "n": len(queries),
            "deep_share": round(sum(q["path"] == "deep" for q in queries) / n, 3),
            "calls_per_query": round(sum(q["calls"] for q in queries) / n, 2),
            "prompt_tokens_per_query": round(sum(q["prompt_tokens"] for q in queries) / n, 1),
            "completion_tokens_per_query": round(sum(q["completion_tokens"] for q in queries) / n, 1),
            "fallback_rate": round(sum(q["fallbacks"] for q in queries) / max(1, sum(q["calls"] for q in queries)), 3),
            "outcomes": dict(outcomes),
            "seconds_per_query": round(sum(q["seconds"] for q in queries) / n, 2),
            "answered": sum(q["answered"] for q in queries),
        },
        "per_query": queries,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--conversation", default="conv-26")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=0, help="only the first N sessions (0 = all)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/llm_mode.json"))
    args = parser.parse_args()
    report = asyncio.run(run(args))
    _save(args, report)
    print(json.dumps({k: v for k, v in report.items() if k != "per_query"}, indent=1))


if __name__ == "__main__":
    main()
