"""``memstrata bench scale``: one user with many turns, and the chat-app pattern of write-then-read.

Stores are grown from LoCoMo. The ten original conversations are ingested
through the ingestion graph (MiniLM, offline). Then perturbed copies are
written until the user holds the requested number of turns: copy ``k`` of a
conversation is every stored unit of it (turns, views, episodes, summaries,
facts, entities, tree nodes), its edges and its counters, with the speakers
renamed everywhere, every date moved ``2k`` years into the past and a new
conversation id. A copy reuses the vectors of the units it copies and is not
re-derived, so the copies' write throughput measures Chroma's storage and
indexing, not embedding or ingestion. Copies go back in time so that the
originals stay the newest memory: the planted questions measure search among
many similar scenes, not H-Mem's time decay of old memories.

The original questions are then asked of the whole user, not of one
conversation, by a separate query process (so its peak memory is that of
querying alone); a gold turn counts only when the evidence cites it in its
original conversation. Each size is queried on the bounded path alone (the
archive) and with HMO's tiers (cache, then buffer, then the bounded path), and
sizes under ``scale.max_turns`` also on the whole-memory snapshot. The
originals are the newest memory, so they are the recent sessions HMO's cache
holds; each copy's records keep the originals' scores but start in the archive.

With ``server=True`` the store lives in a ``chroma run`` server started here over the store's folder (loopback, a free
port, stopped at the end): every write and query goes through HTTP, the query process holds no HNSW index, and the
server's own peak memory is reported beside the query process's.

The chat pattern alternates, on one store, a read-only query with "write one
new message to a growing session, then query", and compares the two latencies.

The copies are written by :mod:`memstrata_bench.scale_copies`, and the questions asked by the query process of
:mod:`memstrata_bench.scale_queries`.

Example:
    $ memstrata bench scale ../shared/data/locomo/locomo10.json --sizes 10000,100000 --chat-rounds 200
"""

from __future__ import annotations

import contextlib
import gc
import json
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.embeddings import Embeddings

from memstrata.context import Context
from memstrata_bench.chroma_run import start_chroma
from memstrata_bench.locomo import load_locomo
from memstrata_bench.scale_copies import USER, copy_conversation
from memstrata_bench.scale_queries import query_in_child
from memstrata_bench.tuning import TUNED

if TYPE_CHECKING:
    from memstrata.client import Memstrata

NOTE = (
    "the originals are ingested through the ingestion graph; each copy is a perturbed copy of the originals' "
    "stored units, edges and counters, reusing their vectors (not re-embedded, not re-derived), so the copies' "
    "write throughput measures storage and indexing only; copies are moved back in time so the originals stay "
    "the newest memory, the recent sessions of HMO's cache; a copy's HMO scores are copied and its records start "
    "in the archive; 'bounded' is archive-only search, 'tiered' searches the cache, then the buffer, then the "
    "archive; queries run in a separate process"
)


def _disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


class GrowthStoppedError(RuntimeError):
    """A signal stopped :meth:`GrowingStore.grow` between two conversations; the same command grows on."""


@contextlib.contextmanager
def _stop_requests() -> Iterator[list[str]]:
    """While inside, SIGTERM and SIGINT only note their name in the list it yields (main thread only; elsewhere
    the list stays empty and signals act as before). The previous handlers come back on the way out.
    """
    noted: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    names: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}  # a handler is given the number
    before = {sig: signal.signal(sig, lambda sig, _frame: noted.append(names[sig])) for sig in names}
    try:
        yield noted
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


PROGRESS = "scale-progress.json"
_GROWTH = ("turns", "copy", "next_conv", "ingest_s", "copy_s", "original_turns", "copied_turns")


class GrowingStore:
    """One user's store, grown in steps: the originals through the graph once, then perturbed copies.

    ``server``: the store is served by a ``chroma run`` over its folder, not embedded
    (:func:`~memstrata_bench.chroma_run.start_chroma`).
    ``folder``: grow the store there and keep it (default: a new temporary folder under ``workdir``). Its growth is
    recorded in :data:`PROGRESS` after each conversation, so a run stopped midway (a 1M-turn user takes hours to grow)
    is grown on from the last whole conversation (:meth:`_resume`).
    """

    def __init__(
        self,
        path: Path,
        *,
        embeddings: Embeddings | None,
        workdir: Path,
        prefix: str,
        originals: int | None = None,
        server: bool = False,
        folder: Path | None = None,
    ) -> None:
        self.convs = load_locomo(path)[:originals]
        if folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix=prefix, dir=workdir))
        else:
            self.folder = folder
            self.folder.mkdir(parents=True, exist_ok=True)
        self.server = start_chroma(self.folder / "chroma") if server else None
        self.url = self.server.url if self.server else None
        self.embeddings = embeddings
        self._mem: Memstrata | None = None
        self.turns, self.copy, self.next_conv = 0, 0, 0
        self.ingest_s = self.copy_s = 0.0
        self.original_turns = self.copied_turns = 0
        self.resumed = self._resume() if folder is not None else False

    def _resume(self) -> bool:
        """Take the growth recorded in the folder. The conversation it was writing when it stopped is written again: an
        original's ingestion resumes where it stopped, and a copy's records, edges and counters have ids derived from
        the tenant and the copy, so a copy written twice over a partial one is one whole copy.
        """
        progress = self.folder / PROGRESS
        if not progress.exists():
            return False
        state = json.loads(progress.read_text())
        if state.get("originals") != len(self.convs):
            msg = f"{self.folder} was grown from {state.get('originals')} original conversations, not {len(self.convs)}"
            raise ValueError(msg)
        for name in _GROWTH:
            setattr(self, name, state[name])
        return True

    def grow(self, target: int) -> None:
        """Add conversations until the user holds at least ``target`` turns (whole conversations).

        A SIGTERM or SIGINT while it grows stops it after the conversation being written, which is recorded, and
        raises :class:`GrowthStoppedError`: killing Chroma's embedded writer mid-write can leave an HNSW segment that no
        later write can apply its log to (a kill left the 1M-turn store's theme collection so).
        """
        with _stop_requests() as stop:
            while self.turns < target:
                conv = self.convs[self.next_conv]
                start = time.perf_counter()
                if self.copy == 0:
                    added = self.mem.ingest(conv.raw, user_id=USER, tiers=True)["turns_seen"]  # the tiered case
                    self.ingest_s += time.perf_counter() - start
                    self.original_turns += added
                else:
                    added = copy_conversation(self.mem.store, conv, self.copy)
                    self.copy_s += time.perf_counter() - start
                    self.copied_turns += added
                self.turns += added
                self.next_conv += 1
                if self.next_conv == len(self.convs):
                    self.next_conv, self.copy = 0, self.copy + 1
                self._record()
                if stop:
                    msg = f"stopped by {stop[0]} at {self.turns:,} turns, recorded in {self.folder / PROGRESS}"
                    raise GrowthStoppedError(msg)

    def _record(self) -> None:
        state = {name: getattr(self, name) for name in _GROWTH} | {"originals": len(self.convs)}
        part = self.folder / f"{PROGRESS}.part"
        part.write_text(json.dumps(state))
        part.replace(self.folder / PROGRESS)  # whole or not at all

    @property
    def mem(self) -> Memstrata:
        """The grown store's Memstrata instance, opened again after :meth:`release`."""
        if self._mem is None:
            from memstrata import Memstrata

            self._mem = (
                Memstrata(url=self.url, embeddings=self.embeddings, **TUNED)
                if self.url
                else Memstrata(path=self.folder, embeddings=self.embeddings, **TUNED)
            )
        return self._mem

    def release(self) -> None:
        """Close the grower's store before a size is measured, so its query processes have the memory: embedded
        Chroma keeps every collection it wrote to loaded (10.5 GB at 1M turns, which starved the query process).
        :meth:`grow` opens it again.
        """
        if self._mem is not None:
            self._mem.close()  # the last instance on the folder: its store is closed
            self._mem = None
            gc.collect()

    def close(self) -> None:
        """Close the grown store, and stop its server."""
        self.release()
        if self.server is not None:
            self.server.stop()


def _pass(got: dict[str, Any], budget: int) -> dict[str, Any]:
    lat = got["latencies"]
    tiers = {f"answered_from_tier_{t}": round(100 * n / len(lat), 1) for t, n in sorted(got["answered"].items())}
    return {
        **tiers,
        "query_p50_ms": round(float(np.percentile(lat, 50)), 1),
        "query_p95_ms": round(float(np.percentile(lat, 95)), 1),
        f"planted_recall_all@{budget}": round(100 * got["recall"], 1),
        "questions": len(lat),
    }


def measure(
    store: GrowingStore, path: Path, *, questions: int, budget: int, search: str, revisits: int = 0
) -> dict[str, Any]:
    """One size on one search path (a key of :data:`~memstrata_bench.scale_queries.SEARCH_PATHS`); ``revisits``: see
    :func:`~memstrata_bench.scale_queries.child_main`.
    """
    got = query_in_child(
        store.folder,
        path,
        questions=questions,
        budget=budget,
        search=search,
        originals=len(store.convs),
        url=store.url,
        revisits=revisits if search != "snapshot" else 0,
    )
    return {
        **_pass(got, budget),
        **({"revisit": _pass(got["revisit"], budget)} if "revisit" in got else {}),
        "first_query_ms": round(got["warm_ms"], 0),
        "query_process_peak_mb": round(got["peak_mb"], 0),
        **({"server_peak_mb": round(peak, 0)} if store.server and (peak := store.server.peak_mb()) else {}),
    }


def run_sizes(
    path: Path,
    targets: Sequence[int],
    *,
    questions: int,
    budget: int,
    workdir: Path,
    threshold: int,
    originals: int | None = None,
    server: bool = False,
    revisits: int = 0,
    report: Callable[[dict[str, Any]], None] = lambda _: None,
    keep: Path | None = None,
) -> list[dict[str, Any]]:
    """Grow one store through the sizes (ascending) and measure each (``server``: through a ``chroma run``;
    ``revisits``: the first ``revisits`` questions asked again on the archive-only and tiered paths).

    ``report`` is called with a size's row each time one of its paths is measured (the same row object, with one
    more path each time). ``keep``: the store's folder, kept, and grown on if a stopped run left it
    (:class:`GrowingStore`); the rows' growth times are then those of every run that grew it.
    """
    store = GrowingStore(
        path, embeddings=None, workdir=workdir, prefix="scale-", originals=originals, server=server, folder=keep
    )
    rows = []
    try:
        for target in sorted(targets):
            store.grow(target)
            store.release()
            row: dict[str, Any] = {
                "turns": store.turns,
                **({"grown_over_runs": True} if store.resumed else {}),
                "original_turns": store.original_turns,
                "ingest_turns_per_second": round(store.original_turns / store.ingest_s, 1) if store.ingest_s else None,
                "copied_turns": store.copied_turns,
                "copy_turns_per_second": round(store.copied_turns / store.copy_s, 1) if store.copy_s else None,
                "disk_mb": round(_disk_mb(store.folder), 1),
                "store": "chroma run server" if server else "embedded",
                "paths": {},
            }
            large = store.turns > threshold
            searches = ["bounded", "tiered"] if large else ["snapshot", "bounded", "tiered"]
            row["default_path"] = ("tiered" if Context(user_id="-").tiers else "bounded") if large else "snapshot"
            rows.append(row)
            for search in searches:  # archive-only before tiered: only a tiered query moves records between tiers
                row["paths"][search] = measure(
                    store, path, questions=questions, budget=budget, search=search, revisits=revisits
                )
                report(row)  # as each path is measured: a long run stopped midway keeps what it measured
    finally:
        store.close()
    return rows


def chat_pattern(
    path: Path, *, turns: int, rounds: int, workdir: Path, seed: int = 0, originals: int | None = None
) -> dict[str, Any]:
    """Read-only queries against write-one-message-then-query, on a user holding about ``turns`` turns.

    Each write adds one message to a session that grows by one message per round,
    as a chat app does; the query after it sees the new message.
    """
    store = GrowingStore(path, embeddings=None, workdir=workdir, prefix="scale-chat-", originals=originals)
    store.grow(turns)
    mem, convs, held = store.mem, store.convs, store.turns
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
        item = {
            "sample_id": target.sample_id,
            "conversation": {
                "speaker_a": speakers["speaker_a"],
                "speaker_b": speakers["speaker_b"],
                "session_900_date_time": "1:00 pm on 1 January, 2024",
                "session_900": list(session),
            },
        }

        def write(item: dict[str, Any] = item) -> Any:
            return mem.ingest(item, user_id=USER, tiers=True)

        write_ms.append(_timed(write))
        after_write_ms.append(_timed(lambda: mem.retrieve(rng.choice(pool), user_id=USER)))
    mem.close()
    p50_read, p50_after = float(np.percentile(read_ms, 50)), float(np.percentile(after_write_ms, 50))
    return {
        "turns": held,
        "rounds": rounds,
        "read_only_p50_ms": round(p50_read, 1),
        "read_only_p95_ms": round(float(np.percentile(read_ms, 95)), 1),
        "after_write_p50_ms": round(p50_after, 1),
        "after_write_p95_ms": round(float(np.percentile(after_write_ms, 95)), 1),
        "ratio_p50": round(p50_after / p50_read, 2),
        "write_p50_ms": round(float(np.percentile(write_ms, 50)), 1),
    }


def _timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def plot_scale(result: dict[str, Any], path: Path) -> Path:
    """Query latency (p50, p95) against store size, per search path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = result["sizes"]
    fig, axes = plt.subplots(figsize=(6, 4))
    for name, marker in (("snapshot", "o"), ("bounded", "s"), ("tiered", "^")):
        rows = [s for s in sizes if name in s["paths"]]
        if rows:
            xs = [s["turns"] for s in rows]
            axes.plot(xs, [s["paths"][name]["query_p50_ms"] for s in rows], marker=marker, label=f"{name} p50")
            axes.plot(
                xs, [s["paths"][name]["query_p95_ms"] for s in rows], marker=marker, linestyle="--", label=f"{name} p95"
            )
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
