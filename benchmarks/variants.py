r"""Which part of memstrata's retrieval carries recall: one ingest, then the same questions under named variants.

Each conversation is ingested once (offline, MiniLM) into a folder kept under ``--cache``; every variant is a set
of :class:`memstrata.context.Context` overrides (or the pool sizing of the light lookup replaced by the old fixed
pool), run over the same questions at the given budgets, scored as ``shared/docs/EVAL.md`` says. This is how the
rows "per idea" of BENCHMARKS.md are measured; the headline numbers always come from ``memstrata bench locomo``.
Recall is also split by the scope the question got (H-Mem's Short / Long / Mixed), with how many questions and
sub-queries each scope got (as H-Mem's Appendix A.4 reports them), so a variant such as "no tree nodes searched"
shows what the temporal tree adds per scope.

    python benchmarks/variants.py ../shared/data/locomo/locomo10.json --conversations conv-26,conv-30 \
        --budgets 1500,4000 --cache /tmp/variants

LongMemEval's questions run the same way, each question's haystack its own cached store, asked at its date and
tallied by question type (the questions ``memstrata bench longmemeval --per-type N`` draws, abstention skipped):

    python benchmarks/variants.py ../shared/data/longmemeval/longmemeval_s_dev.json.gz --per-type 2 \
        --budgets 1000,2000,4000,8000 --cache /tmp/variants-lme
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from memstrata_bench.locomo import load_locomo
from memstrata_bench.longmemeval import parse_record, read_records, select_records
from memstrata_bench.metric import score_context
from memstrata_bench.provenance import provenance

from memstrata import Memstrata
from memstrata.memory.embeddings import MiniLMEmbeddings
from memstrata.memory.levels import FACT, TREE_NODE, register, scope_table
from memstrata.memory.search import fusion, scoring
from memstrata.runtime import search
from memstrata.runtime.search import pool_size

NO_FACTS = {scope: [k for k in kinds if k != FACT.kind] for scope, kinds in scope_table().items()}
NO_TREE_NODES = {scope: [k for k in kinds if k != TREE_NODE.kind] for scope, kinds in scope_table().items()}
_THEMES = {"themes.search_k": 8, "themes.pick": 8, "themes.fact_pick": 24, "themes.share": 0.0}
VARIANTS: dict[str, dict[str, Any]] = {
    "memstrata (all)": {},
    "no tree nodes searched": {"retrieval.scope_kinds": NO_TREE_NODES},
    "no temporal relevance (tree windows unused)": {"weights.temporal": 0.0},
    "no offline rewrite round": {"max_iterations": 0},
    "facts lend no prior": {"_fact_prior": False},
    "facts lend the prior": {"_fact_prior": True},
    "no entity graph": {"graph.hops": -1},
    # H-Mem's seeds by vector: the entities nearest the query's vector seed the expansion too
    "entity seeds also by vector: 2 above 0.35": {"graph.vector_seeds": 2, "graph.seed_floor": 0.35},
    "entity seeds also by vector: 5 above 0.25": {"graph.vector_seeds": 5, "graph.seed_floor": 0.25},
    "no facts and no graph": {"graph.hops": -1, "retrieval.scope_kinds": NO_FACTS},
    "fixed pool (before)": {"_pool": "fixed"},
    "no facts/graph and fixed pool (as before)": {
        "graph.hops": -1,
        "retrieval.scope_kinds": NO_FACTS,
        "_pool": "fixed",
    },
    # the theme path (xMemory's Stage I and II, Bi-Mem's spreading), stage by stage; each row names every setting
    "no theme path": {"themes.search_k": 0},
    "themes alone": {**_THEMES, "themes.select": "top", "experimental.theme_stage2": False, "themes.spread": 0},
    "themes + Eq. 4": {**_THEMES, "themes.select": "eq4", "experimental.theme_stage2": False, "themes.spread": 0},
    "themes + Eq. 4 + Stage II": {
        **_THEMES,
        "themes.select": "eq4",
        "experimental.theme_stage2": True,
        "themes.spread": 0,
    },
    "themes + Eq. 4 + Stage II + spreading": {
        **_THEMES,
        "themes.select": "eq4",
        "experimental.theme_stage2": True,
        "themes.spread": 3,
    },
    "themes + spreading (the default)": {
        **_THEMES,
        "themes.select": "top",
        "experimental.theme_stage2": False,
        "themes.spread": 3,
    },
    "themes + Eq. 4 + spreading": {
        **_THEMES,
        "themes.select": "eq4",
        "experimental.theme_stage2": False,
        "themes.spread": 3,
    },
    "themes + spreading + first 20% of the budget": {
        **_THEMES,
        "themes.select": "top",
        "experimental.theme_stage2": False,
        "themes.spread": 3,
        "themes.share": 0.2,
    },
    # Bi-Mem's persona: the line and its items' turns for questions that ask to infer about a named speaker
    "no persona path": {"persona.search": False},
    # Bi-Mem's Eq. 10: a picked scene brings its m facts nearest the scene, not those nearest the query
    "spreading: facts nearest their scene (Eq. 10)": {"themes.fact_order": "scene"},
    # Bi-Mem's Eq. 9: facts, themes and persona ranked together (k of the paper's 15-40), then its spreading
    "Bi-Mem Eq. 9: joint top-20": {"experimental.theme_joint_k": 20},
    "Bi-Mem Eq. 9 + Eq. 10: joint top-20 and scene order": {
        "experimental.theme_joint_k": 20,
        "themes.fact_order": "scene",
    },
    "Bi-Mem Eq. 9: joint top-40": {"experimental.theme_joint_k": 40},
    # Bi-Mem's Eq. 11: the reader gets the picked scenes as lines, out of the same budget
    "scene lines for the reader: 2 (Eq. 11)": {"experimental.scene_lines": 2},
    # H-Mem's entity profiles (Table 5) and the tree walked up from the graph's events (§3.3 step 2)
    "H-Mem entity profiles: 10 facts each": {"experimental.graph_profile_facts": 10},
    "H-Mem tree walked up from the graph": {"experimental.graph_tree_walk": True},
    # H-Mem's Eq. 3 on the events too: summaries, tree nodes and facts with T and R
    "H-Mem Eq. 3 on events": {"weights.events": "eq3"},
    # xMemory's Stage II with its expansion of an admitted episode to its other messages
    "themes + Eq. 4 + Stage II with expansion + spreading": {
        **_THEMES,
        "themes.select": "eq4",
        "experimental.theme_stage2": True,
        "experimental.theme_stage2_expand": True,
        "themes.spread": 3,
    },
    # H-Mem's Eq. 3 with its own S: the cosine of the query and the turn, no views, BM25, prior, boosts or neighbour
    "H-Mem's S (the turn's cosine) in Eq. 3": {
        "_cosine_s": True,
        "weights.episode_prior": 0.0,
        "weights.speaker": 0.0,
        "weights.when": 0.0,
        "weights.neighbour": 0.0,
    },
}


@dataclass(frozen=True)
class Asked:
    """One question as a variant asks it: its text, gold turn texts, the key it is tallied under, and its date."""

    question: str
    gold: list[str]
    category: str
    now: datetime | None = None


@dataclass(frozen=True)
class History:
    """One store's worth of memory: its cache folder name, the ingest payload, the searched conversation."""

    name: str
    raw: Any
    conversation_id: str
    questions: list[Asked]


def locomo_histories(path: str, conversations: list[str]) -> list[History]:
    """LoCoMo's conversations, with their scored questions (categories 1-4)."""
    out = []
    for conv in load_locomo(path, conversations=conversations or None):
        texts = conv.turn_texts()
        asked = [
            Asked(q.question, [texts[e] for e in q.evidence if e in texts], str(q.category))
            for q in conv.questions
            if q.category in (1, 2, 3, 4)
        ]
        out.append(History(conv.sample_id, conv.raw, conv.sample_id, asked))
    return out


def longmemeval_histories(path: str, per_type: int) -> list[History]:
    """LongMemEval questions, ``per_type`` of each type (abstention apart and not scored), each its own history,
    asked at its ``question_date``: the questions ``memstrata bench longmemeval --per-type`` draws.
    """
    out = []
    for record in select_records(read_records(path), per_type=per_type):
        q = parse_record(record)
        if q.abstention:
            continue
        asked = Asked(q.question, q.gold_texts(), q.question_type, q.asked_at)
        out.append(History(q.question_id, q.conversation.raw, q.conversation.sample_id, [asked]))
    return out


def run(histories: list[History], budgets: list[int], cache: Path, names: list[str]) -> dict[str, Any]:
    emb = MiniLMEmbeddings()
    out: dict[str, Any] = {}
    for name in names:
        settings = dict(VARIANTS[name])
        search.pool_size = _pool(settings.pop("_pool", None))
        prior = settings.pop("_fact_prior", None)
        if prior is not None:
            register(replace(FACT, lends_prior=prior))
        scoring.turn_semantic = _cosine if settings.pop("_cosine_s", False) else fusion.turn_semantic
        tally: dict[str, dict[int, list[float]]] = {}
        sub_queries: dict[str, int] = {}
        for history in histories:
            folder = cache / history.name
            mem = Memstrata(path=folder, embeddings=emb)
            # a finished record, as the bench ingests it; a cached folder writes nothing again, but gets the stages
            # it was built without (themes, personas) from the stored facts
            mem.ingest(history.raw, user_id="bench", close=True)
            for q in history.questions:
                for budget in budgets:
                    result = mem.retrieve(
                        q.question,
                        user_id="bench",
                        conversation_id=history.conversation_id,
                        context_budget=budget,
                        now=q.now,
                        **settings,
                    )
                    hit, share = score_context(result.context, q.gold)
                    scopes = result.trace.get("scopes", {})
                    for key in ("all", q.category, f"scope {scopes.get('q0', '?')}"):
                        tally.setdefault(key, {}).setdefault(budget, []).append(hit)
                    tally.setdefault("all (recall_frac)", {}).setdefault(budget, []).append(share)
                    if budget == budgets[0]:  # H-Mem A.4: how many (sub-)queries each scope got
                        for scope in scopes.values():
                            sub_queries[scope] = sub_queries.get(scope, 0) + 1
            mem.close()
        register(FACT)
        out[name] = {key: {b: round(100 * sum(v) / len(v), 1) for b, v in per.items()} for key, per in tally.items()}
        out[name]["questions per scope"] = {
            key[6:]: len(next(iter(per.values()))) for key, per in tally.items() if key.startswith("scope ")
        }
        out[name]["sub-queries per scope"] = sub_queries
        print(name, json.dumps(out[name]), flush=True)
    search.pool_size = pool_size
    return out


def _cosine(index: Any, qvec: Any, qtokens: list[str]) -> Any:
    """H-Mem's S: each turn's cosine to the query (its own vector only; MiniLM's vectors are unit length)."""
    return index.dense_turns(qvec)


def _pool(kind: str | None) -> Callable[[Any], int]:
    return (lambda ctx: ctx.retrieval.direct_turns) if kind == "fixed" else pool_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="LoCoMo's locomo10.json, or LongMemEval's .json/.json.gz with --per-type")
    parser.add_argument("--conversations", default="", help="LoCoMo: the conversations (default all)")
    parser.add_argument("--per-type", type=int, default=0, help="LongMemEval: questions per type (abstention skipped)")
    parser.add_argument("--budgets", default="1500,4000")
    parser.add_argument("--cache", default="/tmp/memstrata-variants")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    histories = (
        longmemeval_histories(args.path, args.per_type)
        if args.per_type
        else locomo_histories(args.path, [c for c in args.conversations.split(",") if c])
    )
    budgets = [int(b) for b in args.budgets.split(",")]
    result = run(histories, budgets, Path(args.cache), args.variants.split(","))
    if args.out:
        command = " ".join(["python", *(shlex.quote(a) for a in sys.argv)])
        out = {
            "benchmark": "longmemeval" if args.per_type else "locomo",
            "histories": [h.name for h in histories],
            "questions": sum(len(h.questions) for h in histories),
            "budgets": budgets,
            "variants": result,
            "settings": {name: {k: str(v) for k, v in VARIANTS[name].items()} for name in result},
            "provenance": provenance(command),
        }
        Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
