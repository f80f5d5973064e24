"""``memstrata bench chat``: one conversation written a message at a time, against the same messages in one call.

A chat app writes each message as it is sent. This bench replays the first ``messages`` turns
of a LoCoMo conversation that way (each ``ingest`` call holds one message, and the replay's
present, ``Context.now``, is that message's time), and writes the same messages into a second
store in one call. It reports:

- offline: seconds per message, whether the two stores hold the same turns, and evidence recall
  (``recall_all``, ../shared/docs/EVAL.md) on the conversation's questions whose gold turns were written;
- with a model (the deterministic :class:`~memstrata.testing.CountingChatModel`, or an
  OpenAI-compatible ``--reader`` URL): model calls and prompt tokens per message, per call site,
  against the message's position, and the totals of both ways.

``one_session`` stamps the messages one minute apart in one live session (the chat case the cost
targets speak of); otherwise each message keeps its LoCoMo session's time, so sessions start as
the conversation's did.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from memstrata.memory.timeparse import parse_timestamp
from memstrata_bench.locomo import LocomoConversation, load_locomo
from memstrata_bench.metric import score_context
from memstrata_bench.tuning import TUNED

USER = "bench-chat"
# the model's call sites in the order a write reaches them
SITES = ("segment", "facts", "summarize", "supersede", "themes", "persona", "importance", "consolidate_tree")


def _sites(per: list[dict[str, Any]]) -> list[str]:
    """The call sites the writes metered: :data:`SITES` in write order, then any other, by name."""
    seen = {s for p in per for s in p["llm"]}
    return [s for s in SITES if s in seen] + sorted(seen - set(SITES))


def chat_messages(conv: LocomoConversation, n: int, *, one_session: bool, ids: bool) -> list[dict[str, Any]]:
    """The first ``n`` turns as chat messages, with their times (and their dia_ids as ids, if ``ids``)."""
    body = conv.raw["conversation"]
    start = parse_timestamp(body.get("session_1_date_time")) or datetime(2023, 1, 1, 9, 0)
    out = []
    for i, turn in enumerate(conv.turns[:n]):
        when = (
            start + timedelta(minutes=i)
            if one_session
            else (parse_timestamp(body.get(f"session_{turn.session}_date_time")) or start)
        )
        message: dict[str, Any] = {"speaker": turn.speaker, "text": turn.text, "timestamp": when.isoformat()}
        if turn.caption:
            message["blip_caption"] = turn.caption
        if ids:
            message["id"] = turn.dia_id
        out.append(message)
    return out


def _model(model: str, reader_model: str) -> Any:
    if model == "none":
        return None
    if model == "counting":
        from memstrata.testing import CountingChatModel

        return CountingChatModel()
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=reader_model,
        base_url=model.rstrip("/") + ("" if model.rstrip("/").endswith("/v1") else "/v1"),
        api_key="not-needed",
        max_retries=0,
        timeout=120,
        temperature=0,
    )


def _llm(stats: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Calls and prompt tokens per call site of one ingest."""
    return {
        site: {"calls": int(v.get("calls", 0)), "prompt_tokens": int(v.get("prompt_tokens", 0))}
        for site, v in (stats.get("llm") or {}).items()
    }


def _turns(mem: Any, conv_id: str) -> list[tuple[str, int, str]]:
    recs = mem.store.get("turn", user_id=USER, conversation_id=conv_id)
    return sorted((r.payload["session_id"], r.payload["position"], r.payload["text"]) for r in recs)


def _recall(mem: Any, conv: LocomoConversation, written: set[str], budgets: tuple[int, ...]) -> dict[str, Any]:
    texts = {t.dia_id: t.text for t in conv.turns}
    questions = [q for q in conv.questions if set(q.evidence) <= written]
    hits = dict.fromkeys(budgets, 0)
    for q in questions:
        for b in budgets:
            context = mem.retrieve(q.question, user_id=USER, conversation_id=conv.sample_id, context_budget=b).context
            hits[b] += score_context(str(context), [texts[e] for e in q.evidence])[0]
    return {
        "questions": len(questions),
        "recall_all": {str(b): round(hits[b] / len(questions), 4) if questions else None for b in budgets},
    }


def _seconds(values: list[float]) -> dict[str, Any]:
    """How many writes, and their p50 and p95 seconds."""
    if not values:
        return {"writes": 0, "p50": None, "p95": None}
    ordered = sorted(values)
    return {
        "writes": len(values),
        "p50": round(statistics.median(values), 4),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 4),
    }


def _window_ratio(values: list[int], size: int) -> float | None:
    first, last = sum(values[:size]), sum(values[-size:])
    return round(last / first, 3) if first else None


def run_chat(
    path: str | Path,
    *,
    embeddings: Embeddings,
    conversation: str | None = None,
    messages: int = 60,
    one_session: bool = True,
    ids: bool = True,
    model: str = "none",
    reader_model: str = "smollm2",
    budgets: tuple[int, ...] = (500, 1000, 1500, 2000, 4000),
    recall: bool = True,
    progress: Any = None,
) -> dict[str, Any]:
    """Write one conversation a message at a time and in one call; the measurements as a JSON-ready dict."""
    from memstrata import Memstrata

    conv = load_locomo(path, conversations=[conversation] if conversation else None)[0]
    rows = chat_messages(conv, messages, one_session=one_session, ids=ids)
    times = [parse_timestamp(r["timestamp"]) for r in rows]
    folders = [tempfile.mkdtemp(prefix="memstrata-chat-stream-"), tempfile.mkdtemp(prefix="memstrata-chat-batch-")]
    stream = Memstrata(path=folders[0], embeddings=embeddings, model=_model(model, reader_model), **TUNED)
    batch = Memstrata(path=folders[1], embeddings=embeddings, model=_model(model, reader_model), **TUNED)
    per: list[dict[str, Any]] = []
    for i, (row, now) in enumerate(zip(rows, times, strict=True)):
        started = time.perf_counter()
        stats = stream.ingest([row], user_id=USER, conversation_id=conv.sample_id, now=now)
        per.append(
            {
                "position": i,
                "seconds": round(time.perf_counter() - started, 4),
                "llm": _llm(stats),
                "turns_added": stats["turns_added"],
                # closed nothing: only appended to the open tail (its embedding and its append, nothing derived)
                "appended_only": bool(stats.get("turns_waiting")) and not stats.get("episodes_written"),
            }
        )
        if progress:
            progress(i + 1, len(rows))
    started = time.perf_counter()
    batch_stats = batch.ingest(rows, user_id=USER, conversation_id=conv.sample_id, now=times[-1])
    batch_seconds = time.perf_counter() - started
    calls = [sum(v["calls"] for v in p["llm"].values()) for p in per]
    tokens = [sum(v["prompt_tokens"] for v in p["llm"].values()) for p in per]
    batch_llm = _llm(batch_stats)
    batch_tokens = sum(v["prompt_tokens"] for v in batch_llm.values())
    seconds = [p["seconds"] for p in per]
    same = _turns(stream, conv.sample_id) == _turns(batch, conv.sample_id)
    result: dict[str, Any] = {
        "conversation": conv.sample_id,
        "messages": len(rows),
        "one_session": one_session,
        "ids": ids,
        "model": model if model in ("none", "counting") else f"{model} ({reader_model})",
        "offline": {
            "seconds_per_message": {
                "p50": round(statistics.median(seconds), 4),
                "p95": round(sorted(seconds)[int(0.95 * (len(seconds) - 1))], 4),
                "total": round(sum(seconds), 3),
            },
            "appended_only": _seconds([p["seconds"] for p in per if p["appended_only"]]),
            "other_writes": _seconds([p["seconds"] for p in per if not p["appended_only"]]),
            "batch_seconds": round(batch_seconds, 3),
            "stream_over_batch": round(sum(seconds) / batch_seconds, 2) if batch_seconds else None,
            "turns_stored": {
                "stream": len(_turns(stream, conv.sample_id)),
                "batch": len(_turns(batch, conv.sample_id)),
            },
            "same_turns": same,
        },
        "per_message": per,
    }
    if model != "none":
        streamed = sum(tokens)
        result["llm"] = {
            "stream": {
                "calls": sum(calls),
                "prompt_tokens": streamed,
                "per_site": {
                    s: {k: sum(p["llm"].get(s, {}).get(k, 0) for p in per) for k in ("calls", "prompt_tokens")}
                    for s in _sites(per)
                },
            },
            "batch": {
                "calls": sum(v["calls"] for v in batch_llm.values()),
                "prompt_tokens": batch_tokens,
                "per_site": batch_llm,
            },
            "calls_per_message": round(sum(calls) / len(rows), 3),
            "last10_over_first10": _window_ratio(tokens, 10),
            "second_half_over_first_half": _window_ratio(tokens, len(tokens) // 2),
            "stream_over_batch": round(streamed / batch_tokens, 3) if batch_tokens else None,
        }
    if recall:
        written = {t.dia_id for t in conv.turns[: len(rows)]}
        result["recall"] = {
            "stream": _recall(stream, conv, written, budgets),
            "batch": _recall(batch, conv, written, budgets),
        }
    for mem in (stream, batch):
        mem.close()
    return result


def plot_chat(result: dict[str, Any], path: str | Path) -> None:
    """Prompt tokens (with a model) and seconds per message against the message's position."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = result["per_message"]
    x = [p["position"] for p in per]
    panels = 2 if "llm" in result else 1
    fig, axes = plt.subplots(panels, 1, figsize=(9, 3.2 * panels), sharex=True, squeeze=False)
    if "llm" in result:
        ax = axes[0][0]
        bottom = [0] * len(per)
        for site in _sites(per):
            values = [p["llm"].get(site, {}).get("prompt_tokens", 0) for p in per]
            if any(values):
                ax.bar(x, values, bottom=bottom, label=site)
                bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_ylabel("prompt tokens")
        llm = result["llm"]
        ax.set_title(
            f"{result['conversation']}, {result['messages']} messages written one at a time "
            f"({result['model']}): {llm['stream']['prompt_tokens']} prompt tokens, "
            f"{llm['batch']['prompt_tokens']} in one call",
            fontsize=9,
        )
        ax.legend(fontsize=8)
    ax = axes[-1][0]
    ax.plot(x, [p["seconds"] for p in per], marker=".")
    ax.set_ylabel("seconds")
    ax.set_xlabel("message position")
    if "llm" not in result:
        ax.set_title(f"{result['conversation']}: seconds per message written one at a time (offline)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
