"""``memstrata bench tenants``: one user's query in a store shared by many users, against the same user alone.

A chat backend keeps every user in one store. This bench asks what that costs a user's query, and what the serving
process holds after serving them all:

1. **The source user.** The first ``sessions`` sessions of one LoCoMo conversation are ingested for
   ``tenant-0000`` through the ingestion graph (offline).
2. **Alone.** A fresh query process opens that store and asks ``tenant-0000`` the conversation's questions whose
   evidence lies in those sessions: its first query (cold: the user's search state is read from the store) and the
   rest (warm).
3. **Growth.** Every stored unit, edge and counter of the source user is copied to ``tenant-0001`` ...: each copy's
   speakers carry the tenant's number in their names (``Caroline`` becomes ``Caroline0007``) and each vector is moved
   by the tenant's own Gaussian noise and normalized again (``vector_noise`` 0.5 keeps a cosine of about 0.9 to the
   original), so no two users hold the same text or vector. Copies are not re-embedded or re-derived.
4. **Among tenants.** A fresh query process opens the grown store. It asks ``warm_users`` users (``tenant-0000``
   first) the same questions, each user's first query timed apart as a cold one. It then serves every other user
   one question (each a cold query), as a server would. Every cited turn is checked to belong to the asking user
   (its speakers are that user's), ``tenant-0000``'s cited turns are compared with the alone run's, and the
   process's peak memory is read at the end.

The query processes warm up on a user with no memory first, so the model's load is in no query's time.

Example:
    $ memstrata bench tenants ../shared/data/locomo/locomo10.json --users 1000
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memstrata_bench.locomo import HEADLINE_CATEGORIES, LocomoConversation, LocomoQuestion, load_locomo
from memstrata_bench.scale_copies import copied_edges, renamer
from memstrata_bench.scale_queries import own_peak_mb, run_child
from memstrata_bench.tuning import TUNED

SOURCE = "tenant-0000"
NOBODY = "tenants-bench-nobody"  # the warm-up query's user: it holds nothing, so the query loads only the model
NOTE = (
    "tenant-0000 is ingested through the ingestion graph; every other tenant is a copy of its stored units, edges "
    "and counters with the tenant's number in the speakers' names and the vectors moved by the tenant's own noise "
    "(not re-embedded, not re-derived); queries run in a fresh process that first warms up on an empty user; a "
    "user's first query is cold (its search state is read from the store), its later ones are warm"
)


def tenant(i: int) -> str:
    """The user id of tenant ``i``."""
    return f"tenant-{i:04d}"


def first_sessions(conv: LocomoConversation, sessions: int) -> dict[str, Any]:
    """The conversation's LoCoMo item cut to its first ``sessions`` sessions (their dates kept)."""
    item = copy.deepcopy(conv.raw)
    body = item["conversation"]
    for key in list(body):
        number = re.fullmatch(r"session_(\d+)(?:_date_time)?", key)
        if number and int(number.group(1)) > sessions:
            del body[key]
    return item


def questions_within(conv: LocomoConversation, sessions: int) -> list[LocomoQuestion]:
    """The headline questions whose every evidence turn lies in the first ``sessions`` sessions."""
    return [
        q
        for q in conv.questions
        if q.category in HEADLINE_CATEGORIES and all(int(e[1:].split(":")[0]) <= sessions for e in q.evidence)
    ]


def speaker_names(conv: LocomoConversation, i: int) -> dict[str, str]:
    """Tenant ``i``'s name for each speaker (tenant 0 keeps the originals)."""
    return {s: s if i == 0 else f"{s}{i:04d}" for s in sorted({t.speaker for t in conv.turns})}


def moved(vectors: np.ndarray, noise: float, seed: int) -> np.ndarray:
    """Each row plus Gaussian noise of norm about ``noise``, normalized again (cosine about 1/sqrt(1+noise^2))."""
    if noise <= 0:
        return vectors
    rng = np.random.default_rng(seed)
    out = vectors + rng.normal(scale=noise / np.sqrt(vectors.shape[1]), size=vectors.shape)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def copy_tenants(store: Any, conv: LocomoConversation, targets: Sequence[int], *, noise: float) -> int:
    """Copy the source user's every stored unit, edge and counter to each tenant in ``targets``; returns the turns."""
    from memstrata.memory import levels

    quoted = json.dumps(SOURCE)
    sources = {level.kind: store.get(level.kind, user_id=SOURCE, with_vectors=True) for level in levels.levels()}
    edges = store.edges.get(SOURCE)
    counters = store.counters.all(SOURCE)
    turns = 0
    batch: dict[str, tuple[list[Any], list[str], list[list[float]]]] = {
        level.kind: ([], [], []) for level in levels.levels()
    }
    for i in targets:
        rename = renamer(speaker_names(conv, i))

        def sub(text: str, i: int = i, rename: Callable[[str], str] = rename) -> str:
            return rename(text.replace(quoted, json.dumps(tenant(i))))

        for level in levels.levels():
            records = sources[level.kind]
            if not records:
                continue
            units, documents, vectors = batch[level.kind]
            units += [level.unit.model_validate_json(sub(r.metadata["payload"])) for r in records]
            documents += [sub(r.document) for r in records]
            vectors += moved(np.asarray([r.metadata["_vector"] for r in records]), noise, seed=i).tolist()
            turns += len(records) if level.role == "raw" else 0
        store.edges.add(tenant(i), copied_edges(edges, sub))
        store.counters.put(tenant(i), [dataclasses.replace(c, unit_id=sub(c.unit_id)) for c in counters])
    for kind, (units, documents, vectors) in batch.items():
        if units:
            store.upsert(kind, units, documents=documents, vectors=vectors, extra=[u.metadata() for u in units])
    for i in targets:
        store.versions.bump(tenant(i))
    return turns


def _ask(mem: Any, conv: LocomoConversation, i: int, q: LocomoQuestion, budget: int) -> dict[str, Any]:
    """One question asked of tenant ``i`` (in its names): its ms, whether every gold turn was cited, its cited
    turns, and the cited turns whose speaker is none of the tenant's.
    """
    names = speaker_names(conv, i)
    start = time.perf_counter()
    result = mem.retrieve(renamer(names)(q.question), user_id=tenant(i), context_budget=budget)
    ms = (time.perf_counter() - start) * 1000
    cited = [e.turn_id for e in result.evidence if e.conversation_id == conv.sample_id]
    foreign = [e.turn_id for e in result.evidence if e.speaker not in names.values()]
    return {"ms": ms, "found": all(g in cited for g in q.evidence), "cited": cited, "foreign": foreign}


def child_main() -> None:
    """The query process: reads a job on stdin, prints one JSON line of results.

    The job names the store (``folder`` or ``url``), the LoCoMo file and conversation, the sessions, the budget, the
    warm users (asked every question) and the served users (asked one question each).
    """
    from memstrata import Memstrata

    job = json.loads(sys.stdin.read())
    conv = load_locomo(Path(job["path"]), conversations=[job["conversation"]])[0]
    questions = questions_within(conv, job["sessions"])
    mem = Memstrata(url=job["url"], **TUNED) if job.get("url") else Memstrata(path=job["folder"], **TUNED)
    start = time.perf_counter()
    empty = mem.retrieve("what did we talk about?", user_id=NOBODY)
    warm_up_ms = (time.perf_counter() - start) * 1000
    assert not empty.evidence, "a user with no memory was given evidence"
    cold: list[float] = []
    warm: list[float] = []
    found: list[bool] = []
    foreign: list[str] = []
    source_cited: list[list[str]] = []
    for i in job["warm_users"]:
        for n, q in enumerate(questions):
            asked = _ask(mem, conv, i, q, job["budget"])
            (cold if n == 0 else warm).append(asked["ms"])
            found.append(asked["found"])
            foreign += asked["foreign"]
            if i == 0:
                source_cited.append(asked["cited"])
    for k, i in enumerate(job["served_users"]):
        asked = _ask(mem, conv, i, questions[k % len(questions)], job["budget"])
        cold.append(asked["ms"])
        foreign += asked["foreign"]
    mem.close()
    line = {
        "warm_up_ms": warm_up_ms,
        "cold_ms": cold,
        "warm_ms": warm,
        "recall_all": sum(found) / len(found) if found else None,
        "foreign_citations": len(foreign),
        "source_cited": source_cited,
        "peak_mb": own_peak_mb(),
    }
    print(json.dumps(line))  # noqa: T201 (stdout is the result channel: run_child parses this last line)


def _p(values: Sequence[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


def run_tenants(
    path: Path,
    *,
    folder: Path,
    conversation: str = "conv-26",
    sessions: int = 3,
    users: int = 1000,
    warm_users: int = 10,
    budget: int = 1500,
    noise: float = 0.5,
    seed: int = 0,
    url: str | None = None,
    server_peak: Callable[[], float | None] = lambda: None,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Grow the store in ``folder`` (or at ``url``) to ``users`` tenants and measure the alone and shared queries."""
    from memstrata import Memstrata

    if users < 2 or not 1 <= warm_users <= users:
        msg = f"need at least 2 users and 1 to {users} warm users, got {users} and {warm_users}"
        raise ValueError(msg)
    conv = load_locomo(path, conversations=[conversation])[0]
    questions = questions_within(conv, sessions)
    if not questions:
        msg = f"{conversation} has no headline question within its first {sessions} sessions"
        raise ValueError(msg)
    mem = Memstrata(url=url, **TUNED) if url else Memstrata(path=folder, **TUNED)
    start = time.perf_counter()
    source_turns = mem.ingest(first_sessions(conv, sessions), user_id=SOURCE)["turns_seen"]
    ingest_s = time.perf_counter() - start
    mem.close()
    job: dict[str, Any] = {"folder": str(folder), "url": url, "path": str(path), "conversation": conversation}
    job |= {"sessions": sessions, "budget": budget}
    progress(f"{SOURCE}: {source_turns} turns ingested in {ingest_s:.1f} s; asking it alone")
    alone = run_child(__name__, {**job, "warm_users": [0], "served_users": []})
    alone_server_peak = server_peak()
    mem = Memstrata(url=url, **TUNED) if url else Memstrata(path=folder, **TUNED)
    start, batch = time.perf_counter(), 50
    for first in range(1, users, batch):
        copy_tenants(mem.store, conv, range(first, min(first + batch, users)), noise=noise)
        progress(f"copied {min(first + batch, users) - 1:,} of {users - 1:,} tenants")
    copy_s = time.perf_counter() - start
    mem.close()
    order = np.random.default_rng(seed).permutation(np.arange(1, users)).tolist()
    warm = [0, *order[: warm_users - 1]]
    progress(f"asking {warm_users} warm users every question and serving {users - warm_users:,} more")
    shared = run_child(__name__, {**job, "warm_users": warm, "served_users": order[warm_users - 1 :]})
    return {
        "conversation": conversation,
        "sessions": sessions,
        "users": users,
        "turns_per_user": source_turns,
        "questions": len(questions),
        "budget": budget,
        "vector_noise": noise,
        "ingest_s": round(ingest_s, 1),
        "copy_s": round(copy_s, 1),
        "alone": _summary(alone) | {"server_peak_mb": alone_server_peak},
        "shared": _summary(shared) | {"server_peak_mb": server_peak()},
        "source_same_citations": shared["source_cited"] == alone["source_cited"],
        "latencies": {
            "alone_warm": alone["warm_ms"],
            "shared_warm": shared["warm_ms"],
            "shared_cold": shared["cold_ms"],
        },
    }


def _summary(line: dict[str, Any]) -> dict[str, Any]:
    return {
        "warm_p50_ms": _p(line["warm_ms"], 50),
        "warm_p95_ms": _p(line["warm_ms"], 95),
        "cold_p50_ms": _p(line["cold_ms"], 50),
        "cold_p95_ms": _p(line["cold_ms"], 95),
        "warm_queries": len(line["warm_ms"]),
        "cold_queries": len(line["cold_ms"]),
        "recall_all": line["recall_all"],
        "foreign_citations": line["foreign_citations"],
        "query_process_peak_mb": round(line["peak_mb"]),
        "warm_up_ms": round(line["warm_up_ms"]),
    }


def plot_tenants(result: dict[str, Any], path: Path) -> None:
    """The three latency distributions (alone warm, shared warm, shared cold) as cumulative curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = {"alone_warm": "alone, warm", "shared_warm": "among tenants, warm", "shared_cold": "among tenants, cold"}
    for key, label in labels.items():
        values = np.sort(result["latencies"][key])
        if len(values):
            ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=f"{label} ({len(values)})")
    ax.set_xscale("log")
    ax.set_xlabel("query ms (log)")
    ax.set_ylabel("share of queries")
    ax.set_title(f"{result['users']:,} users of {result['turns_per_user']} turns in one store")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
