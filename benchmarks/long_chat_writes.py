"""What a chat message costs at the end of a long conversation, offline: appends and closes, by stage.

Builds one conversation of ``--messages`` turns from LoCoMo's sessions (one day apart, a minute between turns) in
one call, unless ``--store`` already holds it, then writes ``--chat`` short messages one call each, a minute apart,
and prints the mean seconds of the messages that only appended and of those that closed an episode, with the mean
seconds of each ingestion stage. ``--store`` keeps the built conversation for the next run (a run writes its chat
messages into a copy, so each run starts from the same store).

    python benchmarks/long_chat_writes.py ../shared/data/locomo/locomo10.json --messages 3000 --store /tmp/long3000
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

from memstrata import Memstrata


def conversation(path: str, n: int) -> list[dict[str, str]]:
    """``n`` turns of LoCoMo's sessions in order, each session a day after the last."""
    start, out, day = datetime(2023, 1, 1, 9, 0), [], 0
    for conv in json.loads(Path(path).read_text()):
        body, k = conv["conversation"], 1
        while f"session_{k}" in body and len(out) < n:
            for i, t in enumerate(body[f"session_{k}"]):
                when = start + timedelta(days=day, minutes=i)
                out.append({"speaker": t["speaker"], "text": t["text"], "timestamp": when.isoformat()})
            day, k = day + 1, k + 1
    return out[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("locomo")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--chat", type=int, default=30)
    parser.add_argument("--store", help="folder that keeps the built conversation between runs")
    args = parser.parse_args()
    built = Path(args.store) if args.store else Path(tempfile.mkdtemp())
    if not (built / "chroma.sqlite3").exists():
        started = time.perf_counter()
        mem = Memstrata(path=str(built))
        mem.ingest(conversation(args.locomo, args.messages), user_id="u", conversation_id="c")
        mem.close()
        print(f"built {args.messages} messages in {time.perf_counter() - started:.0f} s")
    work = Path(tempfile.mkdtemp()) / "store"
    shutil.copytree(built, work)
    mem = Memstrata(path=str(work))
    start = datetime(2024, 1, 1, 9, 0)
    seconds: dict[str, list[float]] = defaultdict(list)
    stages: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for i in range(args.chat):
        when = start + timedelta(minutes=i)
        text = f"Chat line {i} about the garden and the new bike."
        message = {"speaker": "Ann" if i % 2 else "Bo", "text": text, "timestamp": when.isoformat()}
        began = time.perf_counter()
        out = mem.ingest([message], user_id="u", conversation_id="c", now=when)
        spent = time.perf_counter() - began
        if i == 0:
            continue  # the first message starts a new session after the built ones
        kind = "append" if out["turns_waiting"] else "close"
        seconds[kind].append(spent)
        for stage, s in out["stage_seconds"].items():
            stages[kind][stage].append(s)
    mem.close()
    for kind, values in seconds.items():
        by_stage = ", ".join(f"{k} {1000 * statistics.mean(v):.0f}" for k, v in stages[kind].items())
        mean = 1000 * statistics.mean(values)
        print(f"{kind}: {len(values)} messages, mean {mean:.0f} ms; by stage (ms): {by_stage}")


if __name__ == "__main__":
    main()
