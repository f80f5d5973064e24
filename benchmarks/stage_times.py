"""Where one offline ingest's time goes, per stage: each named LoCoMo conversation into a fresh embedded store.

python benchmarks/stage_times.py ../shared/data/locomo/locomo10.json --conversations conv-26,conv-30
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from memstrata_bench.locomo import load_locomo

from memstrata import Memstrata


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--conversations", default="conv-26,conv-30")
    args = parser.parse_args()
    for conv in load_locomo(args.path, conversations=args.conversations.split(",")):
        mem = Memstrata(path=tempfile.mkdtemp())
        started = time.time()
        stats = mem.ingest(conv.raw, user_id="b", close=True)
        stages = {k: round(v, 2) for k, v in stats.get("stage_seconds", {}).items()}
        print(
            conv.sample_id,
            json.dumps(
                {
                    "seconds": round(time.time() - started, 1),
                    "stages": stages,
                    "themes": stats.get("themes"),
                    "persona_versions": stats.get("persona_versions"),
                }
            ),
            flush=True,
        )
        mem.close()


if __name__ == "__main__":
    main()
