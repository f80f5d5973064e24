"""Why memstrata misses gold turns on LoCoMo at one budget: a per-category breakdown.

For every headline question whose gold turns are not all in the context at ``--budget``, each missing turn
is put in one bucket by where it sits in memstrata's full ranking (the same query at a very large budget):

* ``not_retrieved``: no search step proposed the turn at all;
* ``just_beyond`` : ranked within 2x the turns that fit;
* ``far_beyond``  : ranked lower than that.

It also counts how often the missing turn was spoken by someone the question does not name (the speaker
prior works against those) and prints a few examples per category.

    memstrata ingest ../shared/data/locomo/locomo10.json --user bench --data-dir /tmp/locomo_store
    python benchmarks/miss_analysis.py ../shared/data/locomo/locomo10.json --data-dir /tmp/locomo_store \
        --out benchmarks/results/misses.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from memstrata_bench.locomo import load_locomo

from memstrata import Memstrata

FULL = 60000


def analyse(args: argparse.Namespace) -> dict[str, Any]:
    mem = Memstrata(path=args.data_dir)
    buckets: dict[int, Counter[str]] = defaultdict(Counter)
    questions: Counter[int] = Counter()
    examples: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for conv in load_locomo(args.path):
        texts = {t.dia_id: t for t in conv.turns}
        for q in conv.questions:
            if q.category == 5:
                continue
            questions[q.category] += 1
            ctx = mem.retrieve(
                q.question, user_id=args.user, conversation_id=conv.sample_id, context_budget=args.budget
            )
            missing = [e for e in q.evidence if texts[e].text not in ctx.context]
            if not missing:
                continue
            buckets[q.category]["questions_missed"] += 1
            full = mem.retrieve(q.question, user_id=args.user, conversation_id=conv.sample_id, context_budget=FULL)
            order = [e.turn_id for e in full.evidence]
            for e in missing:
                bucket = _bucket(order, e, len(ctx.evidence))
                buckets[q.category][bucket] += 1
                other = texts[e].speaker.split()[0].lower() not in q.question.lower()
                buckets[q.category]["spoken_by_unnamed"] += other
                if len(examples[q.category]) < args.examples:
                    examples[q.category].append(
                        {
                            "question": q.question,
                            "turn": e,
                            "bucket": bucket,
                            "rank": order.index(e) if e in order else None,
                            "speaker": texts[e].speaker,
                            "text": texts[e].text[:160],
                        }
                    )
    return {
        "budget": args.budget,
        "questions": dict(questions),
        "buckets": {c: dict(b) for c, b in sorted(buckets.items())},
        "examples": examples,
    }


def _bucket(order: list[str], turn: str, fitted: int) -> str:
    if turn not in order:
        return "not_retrieved"
    return "just_beyond" if order.index(turn) < 2 * fitted else "far_beyond"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--user", default="bench")
    parser.add_argument("--budget", type=int, default=1500)
    parser.add_argument("--examples", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/misses.json"))
    args = parser.parse_args()
    report = analyse(args)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps({k: report[k] for k in ("budget", "questions", "buckets")}, indent=1))


if __name__ == "__main__":
    main()
