"""``memstrata bench scale``: one user with many turns, and the chat-app pattern of write-then-read.

Stores are grown from LoCoMo: the ten original conversations, then perturbed
copies of them (speakers renamed in the speaker field and in the text, every
date moved by two years per copy, a new conversation id), until the user holds
the requested number of turns. The original questions are asked against the
whole user, so recall shows whether the planted evidence is still found among
the copies; a gold turn counts only when the evidence cites it in its original
conversation. A copy's text reuses the vector of its source text (the names
and years mapped back), so the model is run once per distinct text: these
numbers measure storage and search, not embedding.

The chat pattern alternates, on one store, a read-only query with "write one
new message to a growing session, then query", and compares the two latencies.

Example:
    $ memstrata bench scale ../shared/data/locomo/locomo10.json --sizes 10000 --chat-rounds 200
"""

from __future__ import annotations

import copy
import random
import re
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from memstrata.bench.locomo import HEADLINE_CATEGORIES, LocomoConversation, load_locomo
from memstrata.bench.metric import RecallTally

USER = "scale"
NAMES = ["Avery", "Bruno", "Chiara", "Dmitri", "Esme", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kalani", "Lior",
         "Mateus", "Nadia", "Oskar", "Priyanka", "Quentin", "Rosa", "Soren", "Talia", "Umar", "Vera", "Wren", "Ximena"]
YEARS_PER_COPY = 2
_YEAR = re.compile(r"\b(19\d\d|20\d\d|21\d\d)\b")


class ReusingEmbeddings(Embeddings):
    """Embeds each distinct source text once: a copy's text is mapped back to its source first."""

    name = "sentence-transformers/all-MiniLM-L6-v2"  # the vectors are MiniLM's, reused
    dimension = 384

    def __init__(self, base: Embeddings) -> None:
        self.base = base
        self.cache: dict[str, list[float]] = {}
        self.inverse: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = []
        self.model_texts = 0

    def source_text(self, text: str) -> str:
        for pattern, back in self.inverse:
            text = pattern.sub(back, text)
        return text

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        keys = [self.source_text(t) for t in texts]
        missing = list(dict.fromkeys(k for k in keys if k not in self.cache))
        if missing:
            self.model_texts += len(missing)
            for key, vec in zip(missing, self.base.embed_documents(missing), strict=True):
                self.cache[key] = vec
        return [self.cache[k] for k in keys]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def perturbed_copy(conv: LocomoConversation, k: int, names: dict[str, str]) -> dict[str, Any]:
    """Copy ``k`` of a LoCoMo item: speakers renamed everywhere, dates moved by ``2k`` years, a new id."""
    raw = copy.deepcopy(conv.raw)
    raw["sample_id"] = f"{conv.sample_id}-copy{k}"
    body = raw["conversation"]
    rename = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    for key, value in list(body.items()):
        if key.startswith("speaker_"):
            body[key] = names.get(value, value)
        elif key.endswith("date_time") and isinstance(value, str):
            body[key] = _YEAR.sub(lambda m: str(int(m.group(0)) + YEARS_PER_COPY * k), value)
        elif isinstance(value, list):
            for turn in value:
                turn["speaker"] = names.get(turn["speaker"], turn["speaker"])
                turn["text"] = rename.sub(lambda m: names[m.group(0)], turn["text"])
    raw.pop("qa", None)
    return raw


def _inverse(names: dict[str, str], k: int) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]:
    back = {v: key for key, v in names.items()}
    years = re.compile(r"\b(19\d\d|20\d\d|21\d\d)\b")
    return [(re.compile(r"\b(" + "|".join(map(re.escape, back)) + r")\b"), lambda m: back[m.group(0)]),
            (years, lambda m: str(int(m.group(0)) - YEARS_PER_COPY * k))]


def grow(convs: Sequence[LocomoConversation], target: int) -> list[tuple[int, dict[str, Any], dict[str, str]]]:
    """(copy number, LoCoMo item, renaming) for the originals and then copies, until ``target`` turns."""
    out: list[tuple[int, dict[str, Any], dict[str, str]]] = []
    total, k = 0, 0
    while total < target:
        for conv in convs:
            if total >= target:
                break
            speakers = sorted({t.speaker for t in conv.turns})
            names = {} if k == 0 else {s: f"{NAMES[(k * 7 + i) % len(NAMES)]}{k}" for i, s in enumerate(speakers)}
            out.append((k, conv.raw if k == 0 else perturbed_copy(conv, k, names), names))
            total += len(conv.turns)
        k += 1
    return out


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def planted_recall(mem: Any, convs: Sequence[LocomoConversation], *, questions: int, budget: int,
                   seed: int = 0) -> tuple[float, list[float]]:
    """recall_all of a sample of the original questions asked of the whole user, and each query's ms."""
    pool = [(c, q) for c in convs for q in c.questions if q.category in HEADLINE_CATEGORIES]
    sample = random.Random(seed).sample(pool, min(questions, len(pool)))
    tally, latencies = RecallTally(budgets=(budget,)), []
    for conv, q in sample:
        start = time.perf_counter()
        result = mem.retrieve(q.question, user_id=USER, context_budget=budget)
        latencies.append((time.perf_counter() - start) * 1000)
        cited = {(e.conversation_id, e.turn_id) for e in result.evidence}
        found = [(conv.sample_id, gold) in cited for gold in q.evidence]
        tally.add({budget: (all(found), sum(found) / len(found))})
    return tally.summary()["recall_all"][str(budget)], latencies


def build_store(path: Path, target: int, *, embeddings: Embeddings, workdir: Path,
                prefix: str) -> tuple[Any, list[LocomoConversation], int, float, ReusingEmbeddings, Path]:
    """A store where one user holds about ``target`` turns; returns it with the originals, turns and seconds."""
    from memstrata import Memstrata

    convs = load_locomo(path)
    # One cache for every store of a run: the model sees each distinct source text once.
    reuse = embeddings if isinstance(embeddings, ReusingEmbeddings) else ReusingEmbeddings(embeddings)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
    mem = Memstrata(path=folder, embeddings=reuse)
    turns, started = 0, time.perf_counter()
    for k, raw, names in grow(convs, target):
        reuse.inverse = _inverse(names, k) if k else []
        turns += mem.ingest(raw, user_id=USER)["turns_seen"]
    reuse.inverse = []
    return mem, convs, turns, time.perf_counter() - started, reuse, folder


def run_size(path: Path, target: int, *, embeddings: Embeddings, questions: int, budget: int,
             workdir: Path) -> dict[str, Any]:
    """Build one store of about ``target`` turns and measure it."""
    seen = embeddings.model_texts if isinstance(embeddings, ReusingEmbeddings) else 0
    mem, convs, turns, ingest_s, reuse, folder = build_store(path, target, embeddings=embeddings, workdir=workdir,
                                                             prefix=f"scale-{target}-")
    mem.retrieve("warm up", user_id=USER)  # builds the snapshot once
    recall, latencies = planted_recall(mem, convs, questions=questions, budget=budget)
    out = {"turns": turns, "ingest_seconds": round(ingest_s, 1), "turns_per_second": round(turns / ingest_s, 1),
           "model_texts": reuse.model_texts - seen, "query_p50_ms": round(float(np.percentile(latencies, 50)), 1),
           "query_p95_ms": round(float(np.percentile(latencies, 95)), 1),
           f"planted_recall_all@{budget}": round(100 * recall, 1), "questions": len(latencies),
           "peak_memory_mb": round(_peak_mb(), 0), "disk_mb": round(_disk_mb(folder), 1)}
    mem.close()
    return out


def chat_pattern(path: Path, *, embeddings: Embeddings, turns: int, rounds: int, workdir: Path,
                 seed: int = 0) -> dict[str, Any]:
    """Read-only queries against write-one-message-then-query, on a user holding about ``turns`` turns.

    Each write adds one message to a session that grows by one message per round,
    as a chat app does; the query after it sees the new message.
    """
    mem, convs, held, _, _, _ = build_store(path, turns, embeddings=embeddings, workdir=workdir, prefix="scale-chat-")
    pool = [q.question for c in convs for q in c.questions]
    rng = random.Random(seed)
    target = convs[0]
    speakers = target.raw["conversation"]
    session: list[dict[str, Any]] = []
    read_ms, after_write_ms, write_ms = [], [], []
    mem.retrieve("warm up", user_id=USER)
    for i in range(rounds):
        read_ms.append(_timed(lambda: mem.retrieve(rng.choice(pool), user_id=USER)))
        turn = rng.choice(target.turns)
        session.append({"speaker": turn.speaker, "dia_id": f"D900:{i + 1}", "text": f"{turn.text} (again, {i})"})
        item = {"sample_id": target.sample_id, "conversation": {
            "speaker_a": speakers["speaker_a"], "speaker_b": speakers["speaker_b"],
            "session_900_date_time": "1:00 pm on 1 January, 2024", "session_900": list(session)}}
        write_ms.append(_timed(lambda: mem.ingest(item, user_id=USER)))
        after_write_ms.append(_timed(lambda: mem.retrieve(rng.choice(pool), user_id=USER)))
    mem.close()
    p50_read, p50_after = float(np.percentile(read_ms, 50)), float(np.percentile(after_write_ms, 50))
    return {"turns": held, "rounds": rounds,
            "read_only_p50_ms": round(p50_read, 1), "read_only_p95_ms": round(float(np.percentile(read_ms, 95)), 1),
            "after_write_p50_ms": round(p50_after, 1),
            "after_write_p95_ms": round(float(np.percentile(after_write_ms, 95)), 1),
            "ratio_p50": round(p50_after / p50_read, 2), "write_p50_ms": round(float(np.percentile(write_ms, 50)), 1)}


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def plot_scale(result: dict[str, Any], path: Path) -> Path:
    """Query latency (p50, p95) against store size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = result["sizes"]
    fig, axes = plt.subplots(figsize=(6, 4))
    xs = [s["turns"] for s in sizes]
    axes.plot(xs, [s["query_p50_ms"] for s in sizes], marker="o", label="p50")
    axes.plot(xs, [s["query_p95_ms"] for s in sizes], marker="o", label="p95")
    axes.set_xscale("log")
    axes.set_xlabel("turns held by one user")
    axes.set_ylabel("query latency, ms")
    axes.set_title("memstrata query latency against store size")
    axes.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
