"""How often the persona path can help an open-domain question: does it take the path, and do the chosen dimension's
items cite any of its gold turns? One retrieval per open-domain (category 3) question at one budget, over stores
ingested by ``benchmarks/variants.py`` (the same ``--cache``).

    python benchmarks/persona_reach.py ../shared/data/locomo/locomo10.json --cache /tmp/variants --budget 1500
"""

from __future__ import annotations

import argparse
import json

from memstrata_bench.locomo import load_locomo
from memstrata_bench.metric import score_context

from memstrata import Memstrata
from memstrata.memory.embeddings import MiniLMEmbeddings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--cache", default="/tmp/memstrata-variants")
    parser.add_argument("--budget", type=int, default=1500)
    args = parser.parse_args()
    emb = MiniLMEmbeddings()
    counts = {"questions": 0, "took_the_path": 0, "items_cite_a_gold_turn": 0, "recall_all": 0}
    for conv in load_locomo(args.path):
        mem = Memstrata(path=f"{args.cache}/{conv.sample_id}", embeddings=emb)
        texts = conv.turn_texts()
        for q in (q for q in conv.questions if q.category == 3):
            counts["questions"] += 1
            result = mem.retrieve(
                q.question, user_id="bench", conversation_id=conv.sample_id, context_budget=args.budget
            )
            counts["recall_all"] += score_context(result.context, [texts[e] for e in q.evidence if e in texts])[0]
            taken = result.trace.get("persona")
            if taken:
                counts["took_the_path"] += 1
                [unit] = mem.store.get(
                    "persona", user_id="bench", conversation_id=conv.sample_id, unit_ids=[taken["persona"]]
                )
                cited = {t for item in unit.payload["items"] for t in item["turn_ids"]}
                counts["items_cite_a_gold_turn"] += bool(cited & set(q.evidence))
        mem.close()
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
