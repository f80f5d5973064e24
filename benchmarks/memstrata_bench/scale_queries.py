"""The query process of ``memstrata bench scale``: a fresh process that only opens the grown store and asks it the
planted questions, so its peak memory is that of querying alone.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memstrata_bench.locomo import HEADLINE_CATEGORIES, LocomoConversation, load_locomo
from memstrata_bench.metric import RecallTally
from memstrata_bench.scale_copies import USER
from memstrata_bench.tuning import TUNED


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def planted_sample(convs: Sequence[LocomoConversation], questions: int, seed: int = 0) -> list[tuple[Any, Any]]:
    """A fixed sample of the original conversations' headline questions: ``(conversation, question)`` pairs."""
    pool = [(c, q) for c in convs for q in c.questions if q.category in HEADLINE_CATEGORIES]
    return random.Random(seed).sample(pool, min(questions, len(pool)))


def ask_sample(
    mem: Any,
    sample: Sequence[tuple[Any, Any]],
    *,
    budget: int,
    answered: dict[str, int] | None = None,
    **settings: Any,
) -> tuple[float, list[float]]:
    """recall_all of the sample's questions asked of the whole user, and each query's ms.

    With ``answered``, how many questions each HMO tier answered is counted into it.
    """
    tally, latencies = RecallTally(budgets=(budget,)), []
    for conv, q in sample:
        start = time.perf_counter()
        result = mem.retrieve(q.question, user_id=USER, context_budget=budget, **settings)
        latencies.append((time.perf_counter() - start) * 1000)
        if answered is not None and result.trace.get("tiers"):
            tier = str(result.trace["tiers"]["answered"])
            answered[tier] = answered.get(tier, 0) + 1
        cited = {(e.conversation_id, e.turn_id) for e in result.evidence}
        found = [(conv.sample_id, gold) in cited for gold in q.evidence]
        tally.add({budget: (all(found), sum(found) / len(found))})
    return tally.summary()["recall_all"][str(budget)], latencies


def query_in_child(
    folder: Path,
    path: Path,
    *,
    questions: int,
    budget: int,
    search: str,
    originals: int | None,
    url: str | None = None,
    revisits: int = 0,
) -> dict[str, Any]:
    """Planted questions asked by a fresh process that only opens the store (its folder or server) and queries it.

    ``revisits``: then the first ``revisits`` of them again, as a user returning to topics (see :func:`child_main`).
    """
    job = {
        "folder": str(folder),
        "url": url,
        "path": str(path),
        "questions": questions,
        "revisits": revisits,
        "budget": budget,
        "search": search,
        "originals": originals,
    }
    return run_child("memstrata_bench.scale_queries", job)


def run_child(module: str, job: dict[str, Any]) -> dict[str, Any]:
    """Run ``module``'s ``child_main`` in a fresh process with ``job`` on stdin; return the JSON line it prints last.

    A fresh process, so the peak memory it reports is that of its own work alone.
    """
    done = subprocess.run(
        [sys.executable, "-c", f"from {module} import child_main; child_main()"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )
    if done.returncode != 0:
        msg = f"the query process failed:\n{done.stderr[-3000:]}"
        raise RuntimeError(msg)
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_main() -> None:
    """The query process: reads a job on stdin, prints one JSON line of results.

    Revisits are asked after the first pass, once the active tiers have taken that pass's promotions (they are
    re-read every ``tier.refresh_s`` seconds; here at once, as after a pause): HMO's premise that what was recalled is
    asked for again. The archive-only path asks them too, with its session cache as warm as the first pass left it.
    """
    from memstrata import Memstrata
    from memstrata.memory.index.active import refresh_tiers

    job = json.loads(sys.stdin.read())
    mem = Memstrata(url=job["url"], **TUNED) if job.get("url") else Memstrata(path=job["folder"], **TUNED)
    settings = SEARCH_PATHS[job["search"]]
    start = time.perf_counter()
    mem.retrieve("warm up", user_id=USER, **settings)  # loads the model, and the snapshot on that path
    warm_ms = (time.perf_counter() - start) * 1000
    convs = load_locomo(Path(job["path"]))[: job["originals"]]
    sample = planted_sample(convs, job["questions"])
    answered: dict[str, int] = {}
    recall, latencies = ask_sample(mem, sample, budget=job["budget"], answered=answered, **settings)
    line: dict[str, Any] = {"recall": recall, "latencies": latencies, "warm_ms": warm_ms, "answered": answered}
    if revisits := job.get("revisits", 0):
        refresh_tiers(mem.store, USER)
        again: dict[str, int] = {}
        recall, latencies = ask_sample(mem, sample[:revisits], budget=job["budget"], answered=again, **settings)
        line["revisit"] = {"recall": recall, "latencies": latencies, "answered": again}
    mem.close()
    line["peak_mb"] = own_peak_mb()
    print(json.dumps(line))  # noqa: T201 (stdout is the result channel: run_child parses this last line)


def own_peak_mb() -> float:
    """This process's peak resident memory since it started its program.

    Not ``ru_maxrss``: Linux keeps that across ``exec``, so a child started by a large parent reports
    the parent's size. ``VmHWM`` belongs to the running program's memory map.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return _peak_mb()  # not Linux: the best there is


SEARCH_PATHS: dict[str, dict[str, Any]] = {
    "snapshot": {"tiers": False},  # the whole memory in the query process (the default up to snapshot_max_turns)
    "bounded": {"scale.max_turns": 0, "tiers": False},  # archive only: the bounded path for every question
    "tiered": {"scale.max_turns": 0, "tiers": True},  # HMO: cache, then buffer, then the bounded path
}
