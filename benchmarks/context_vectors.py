"""Encoded or pooled turn-context vectors: the same ingest, the same questions, only those vectors differ.

Each conversation is ingested once with encoded contexts (the window's text through MiniLM) into
``<cache>/encoded/<id>``; a copy gets every ``turn_context`` vector replaced by
:func:`memstrata.memory.levels.level2.turn_context.pooled_vectors` of its turns (what ingestion writes with
``episodes.context_vectors="pooled"``). Both answer categories 1-4 at the given budgets, scored as
``shared/docs/EVAL.md``
says (recall_all).

    python benchmarks/context_vectors.py ../shared/data/locomo/locomo10.json --conversations conv-26,conv-30,conv-42
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
from memstrata_bench.locomo import load_locomo
from memstrata_bench.metric import score_context

from memstrata import Memstrata
from memstrata.memory.embeddings import MiniLMEmbeddings
from memstrata.memory.levels.level2.turn_context import TurnContext, pooled_vectors


def pool_copy(source: Path, target: Path, emb: MiniLMEmbeddings, width: int = 1) -> None:
    """Copy an ingested store and replace its turn-context vectors with pooled ones."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    mem = Memstrata(path=target, embeddings=emb)
    sessions: dict[tuple[str, str], list] = {}
    for r in mem.store.get("turn", user_id="bench", with_vectors=True):
        sessions.setdefault((r.metadata["conversation_id"], r.metadata["session_id"]), []).append(r)
    pooled: dict[tuple[str, str], list[float]] = {}
    for recs in sessions.values():
        recs.sort(key=lambda r: r.metadata["position"])
        vecs = pooled_vectors(np.array([r.metadata["_vector"] for r in recs]), width=width)
        pooled |= {(r.metadata["conversation_id"], r.unit_id): v.tolist() for r, v in zip(recs, vecs, strict=True)}
    views = [TurnContext.model_validate(r.payload) for r in mem.store.get("turn_context", user_id="bench")]
    mem.store.upsert(
        "turn_context",
        views,
        documents=[v.embed_text() for v in views],
        vectors=[pooled[(v.conversation_id, v.turn_id)] for v in views],
        extra=[v.metadata() for v in views],
    )
    mem.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--conversations", default="conv-26,conv-30,conv-42")
    parser.add_argument("--budgets", default="1500,4000")
    parser.add_argument("--cache", default="/tmp/memstrata-context-vectors")
    args = parser.parse_args()
    emb, cache = MiniLMEmbeddings(), Path(args.cache)
    budgets = [int(b) for b in args.budgets.split(",")]
    totals: dict[str, dict[int, list[bool]]] = {}
    for conv in load_locomo(args.path, conversations=args.conversations.split(",")):
        encoded = cache / "encoded" / conv.sample_id
        mem = Memstrata(
            path=encoded,
            embeddings=emb,
            episodes={"context_vectors": "encoded"},
        )
        if not mem.store.count("turn", user_id="bench"):
            mem.ingest(conv.raw, user_id="bench")
        mem.close()
        pool_copy(encoded, cache / "pooled" / conv.sample_id, emb)
        texts = conv.turn_texts()
        for name in ("encoded", "pooled"):
            mem = Memstrata(path=cache / name / conv.sample_id, embeddings=emb)
            for q in conv.questions:
                if q.category not in (1, 2, 3, 4):
                    continue
                gold = [texts[e] for e in q.evidence if e in texts]
                for budget in budgets:
                    context = mem.retrieve(
                        q.question, user_id="bench", conversation_id=conv.sample_id, context_budget=budget
                    ).context
                    totals.setdefault(name, {}).setdefault(budget, []).append(score_context(context, gold)[0])
            mem.close()
    for name, per in totals.items():
        print(name, {b: f"{100 * sum(v) / len(v):.1f} ({len(v)} q)" for b, v in per.items()})


if __name__ == "__main__":
    main()
