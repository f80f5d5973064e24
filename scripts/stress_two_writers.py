"""Two writers appending to one conversation through one ``chroma run`` server, run after run.

Starts one Chroma server (or uses ``--url``) and two long-lived writer processes. Each run names a fresh user;
both writers are released at once and each appends ``--messages`` messages, one ingest per message, to the same
conversation. Then the store is checked: ``check_store`` finds nothing, and every message is stored exactly once,
at its own position, in the order its writer sent it. Prints one line per run with a problem and a summary line
``runs: N, problems: K``; exits 1 when K > 0.

Usage:
    python scripts/stress_two_writers.py --runs 50
    python scripts/stress_two_writers.py --runs 5 --embeddings minilm --url http://127.0.0.1:8000

``tests/unit_tests/test_two_writers_stress.py`` runs :func:`stress` for a few runs in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import select
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

REPO = Path(__file__).resolve().parents[1]
WRITERS = ("Ann", "Bo")
CONVERSATION = "chat"
TEMPLATES = (
    "I adopted a grey cat called {name}cat last spring.",
    "My sister lives in {name}ville near the river.",
    "I started cello lessons with {name}teacher on Tuesdays.",
    "We ran the {name}ville half marathon in May.",
    "I work as a nurse at the {name} clinic.",
    "My favourite food is the {name} soup my father makes.",
    "I bought a red bike to ride to the {name} market.",
    "Next week I fly to Lisbon for the {name} conference.",
)
TIMEOUT_S = 600.0


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words vectors (as the test suite's): no model to load, similar texts stay similar.

    ``delay``: the most seconds a call takes (uniformly drawn), as a real model's would vary with its batch and
    the machine's load; the two writers then drift against each other as they do with MiniLM, where a batch of
    facts takes a tenth of a second or so to embed, instead of moving in step.
    """

    name = "test-hash-bow"
    dimension = 64

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self._rng = random.Random()

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dimension)
        for word in text.lower().split():
            v[int(hashlib.md5(word.strip(".,!?").encode()).hexdigest(), 16) % self.dimension] += 1.0
        return (v / (np.linalg.norm(v) or 1.0)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        time.sleep(self.delay * self._rng.random())
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The text's vector."""
        time.sleep(self.delay * self._rng.random())
        return self._vec(text)


def embeddings(kind: str) -> Embeddings:
    """``hash`` (no model), ``slowhash`` (``hash`` taking up to 0.2 s a call, the default) or ``minilm`` (the packaged
    model, as a user has it).
    """
    if kind == "minilm":
        from memstrata.memory.embeddings import MiniLMEmbeddings

        return MiniLMEmbeddings()
    return HashEmbeddings(delay=0.2 if kind == "slowhash" else 0.0)


def message(writer: str, i: int) -> str:
    """The ``i``-th message a writer sends: a statement the fact extractor turns into facts, naming its writer."""
    return f"({writer} {i}) " + TEMPLATES[i % len(TEMPLATES)].format(name=writer)


# ---- the writer process ---------------------------------------------------------------------------------


def writer_loop(url: str, name: str, kind: str) -> None:
    """Say ``ready``, then for each ``go USER N`` line append N messages one at a time and say ``done``."""
    from memstrata import Memstrata

    mem = Memstrata(url=url, embeddings=embeddings(kind))
    mem.store.collection("turn")  # connected before the first release
    print("ready", flush=True)
    for line in sys.stdin:
        _, user, n = line.split()
        for i in range(int(n)):
            mem.ingest([{"speaker": name, "text": message(name, i)}], user_id=user, conversation_id=CONVERSATION)
        print("done", flush=True)


@dataclass
class Writers:
    """The two writer processes, each blocked reading its stdin between runs."""

    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def release(self, user: str, n: int) -> float:
        """Start a run in both writers at once; the seconds until both are done."""
        started = time.perf_counter()
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(f"go {user} {n}\n")
            proc.stdin.flush()
        for proc in self.procs:
            self.expect(proc, "done")
        return time.perf_counter() - started

    @staticmethod
    def expect(proc: subprocess.Popen[str], word: str) -> None:
        """Wait (at most ``TIMEOUT_S``) for the writer's next line, which must be ``word``; else stop it and raise."""
        assert proc.stdout is not None
        waiting = select.poll()  # one line answers each command, so nothing waits in the pipe's buffer meanwhile
        waiting.register(proc.stdout, select.POLLIN)
        line = proc.stdout.readline() if waiting.poll(int(TIMEOUT_S * 1000)) else ""
        if line.strip() != word:
            proc.kill()
            _, err = proc.communicate()
            msg = f"a writer said {line!r}, not {word!r}:\n{err[-3000:]}"
            raise RuntimeError(msg)


@contextmanager
def writers(url: str, kind: str) -> Iterator[Writers]:
    """Start the two writers and wait until both are connected; stop them afterwards."""
    import memstrata

    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--url", url, "--embeddings", kind]
    # the writers run the memstrata this process imported (a checkout, or the installed one)
    path = os.pathsep.join([str(Path(memstrata.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "TOKENIZERS_PARALLELISM": "false", "ANONYMIZED_TELEMETRY": "False"}
    started = Writers(
        [
            subprocess.Popen(
                [*cmd, "--name", name],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in WRITERS
        ]
    )
    try:
        for proc in started.procs:
            started.expect(proc, "ready")
        yield started
    finally:
        for proc in started.procs:
            try:
                proc.communicate(timeout=30)  # closes the writer's input: its loop ends there
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


# ---- the checks -----------------------------------------------------------------------------------------


def run_problems(store: Any, user: str, n: int) -> list[str]:
    """What is wrong with one run's user: ``check_store``'s problems, and any message lost, doubled or misplaced."""
    from memstrata.memory.store.invariants import check_store

    problems = [str(p) for p in check_store(store, user)]
    turns = sorted(
        (r.payload["session_id"], r.payload["position"], r.payload["text"])
        for r in store.get("turn", user_id=user, conversation_id=CONVERSATION)
    )
    texts = [t for *_, t in turns]
    want = [message(w, i) for w in WRITERS for i in range(n)]
    if sorted(texts) != sorted(want):
        problems.append(f"messages: {len(texts)} stored, {len(set(texts))} distinct, {len(want)} sent")
    if len({(s, p) for s, p, _ in turns}) != len(turns):
        problems.append("positions: two turns share one")
    problems += [
        f"order: {w}'s messages are not stored in the order sent"
        for w in WRITERS
        if [t for t in texts if t.startswith(f"({w} ")] != [message(w, i) for i in range(n)]
    ]
    return problems


@dataclass
class Run:
    """One run's user, its seconds, and what was wrong."""

    user: str
    seconds: float
    problems: list[str]


def stress(url: str, runs: int, *, messages: int = 8, kind: str = "slowhash", prefix: str | None = None) -> list[Run]:
    """``runs`` runs of two writers appending ``messages`` each to a fresh user's conversation through ``url``."""
    from memstrata.memory.levels import levels
    from memstrata.memory.store import MemoryStore

    prefix = prefix or f"stress-{uuid.uuid4().hex[:8]}"
    store = MemoryStore(url=url, embeddings=embeddings(kind))
    # Every collection is made before the writers start, as on a server used before: two processes creating one
    # collection at once can disagree on its word-terms flag (a separate first-use race, not this script's subject).
    for level in levels():
        store.collection(level.kind)
    out = []
    with writers(url, kind) as pair:
        for i in range(runs):
            user = f"{prefix}-{i}"
            seconds = pair.release(user, messages)
            out.append(Run(user, seconds, run_problems(store, user, messages)))
    return out


@contextmanager
def server(url: str | None) -> Iterator[str]:
    """The given server's address, or a fresh ``chroma run`` over a temporary folder, stopped afterwards."""
    if url:
        yield url
        return
    from memstrata_bench.chroma_run import start_chroma

    shm = Path("/dev/shm")  # the server fsyncs every write: in memory when the machine allows
    with tempfile.TemporaryDirectory(prefix="memstrata-stress-", dir=shm if shm.is_dir() else None) as tmp:
        started = start_chroma(Path(tmp) / "data")
        try:
            yield started.url
        finally:
            started.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the stress test (or, with ``--worker``, be one of its writers); 1 when any run had a problem."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--messages", type=int, default=8, help="messages each writer appends per run")
    parser.add_argument("--embeddings", choices=("slowhash", "hash", "minilm"), default="slowhash")
    parser.add_argument("--url", help="an running Chroma server (default: start one)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--name", default=WRITERS[0], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        writer_loop(args.url, args.name, args.embeddings)
        return 0
    started = time.perf_counter()
    with server(args.url) as url:
        results = stress(url, args.runs, messages=args.messages, kind=args.embeddings)
    for run in results:
        for problem in run.problems:
            print(f"{run.user}: {problem}")
    bad = sum(bool(r.problems) for r in results)
    per_run, total = sum(r.seconds for r in results) / max(1, len(results)), time.perf_counter() - started
    print(f"runs: {len(results)}, problems: {bad} ({per_run:.1f} s a run, {total:.0f} s in all)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
