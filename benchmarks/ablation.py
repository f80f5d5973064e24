"""Which ranking signals carry recall: a flat-scorer ablation on LoCoMo (all conversations, categories 1-4).

This scores every raw turn of a conversation with a single formula (no graph, no summaries, no reflection) and
packs the ranked turns exactly like memstrata's packer (one ``[D3 · 8 May 2023]`` header per session, ``7 Name:
text`` lines, a turn that does not fit is skipped). It isolates what each search view adds, and it is how the
contextual views and the caption rule were chosen before they went into ``memstrata.memory``.

    python benchmarks/ablation.py ../shared/data/locomo/locomo10.json [--cache /tmp/ablation.pkl]

Embedding every view of 5,882 turns takes a few minutes on two cores; ``--cache`` keeps them for reruns.
"""

from __future__ import annotations

import argparse
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from memstrata_bench.locomo import LocomoConversation, load_locomo

from memstrata.context import default
from memstrata.memory.embeddings import MiniLMEmbeddings
from memstrata.memory.index import Bm25 as _Bm25
from memstrata.memory.index import tokenize
from memstrata.memory.search.fusion import ranks_to_unit, standardize
from memstrata.memory.timeparse import format_date, parse_timestamp
from memstrata.memory.tokens import TokenCounter

WINDOW_WIDTHS = default("retrieval.window_widths")

BUDGETS = (500, 1000, 1500, 2000, 4000)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def windows(rendered: list[str], sessions: np.ndarray, width: int) -> list[str]:
    n = len(rendered)
    return [
        "\n".join(rendered[j] for j in range(i - width, i + width + 1) if 0 <= j < n and sessions[j] == sessions[i])
        for i in range(n)
    ]


def prepare(conv: LocomoConversation, emb: MiniLMEmbeddings, counter: TokenCounter) -> dict[str, Any]:
    """Everything the scorers need for one conversation: views, vectors, BM25 scores, token costs."""
    turns = conv.turns
    rendered = [t.render() for t in turns]
    sessions = np.array([t.session for t in turns])
    lines = [f"{t.dia_id.split(':')[1]} {t.speaker}: {t.text}" for t in turns]
    captions = [f" [shares a photo: {t.caption}]" if t.caption else "" for t in turns]
    dates = {int(k.split("_")[1]): v for k, v in conv.raw["conversation"].items() if k.endswith("date_time")}
    header = {
        s: counter.count(f"[D{s} · {format_date(parse_timestamp(dates[s])) if s in dates else ''}]")
        for s in set(sessions.tolist())
    }
    questions = [q.question for q in conv.questions]
    sentences, owner = [], []
    for i, t in enumerate(turns):
        for part in [p for p in _SENTENCE.split(t.text) if len(p.split()) >= 3] or [t.text]:
            sentences.append(f"{t.speaker}: {part}")
            owner.append(i)

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray(emb.embed_documents(texts), dtype=np.float32)

    bm25 = {w: _Bm25.build(windows(rendered, sessions, w)) for w in sorted({0, 1, 2, *WINDOW_WIDTHS})}
    qtokens = [tokenize([q])[0] for q in questions]
    return {
        "id": conv.sample_id,
        "sessions": sessions,
        "ids": [t.dia_id for t in turns],
        "speakers": sorted({t.speaker for t in turns}),
        "speaker": np.array([t.speaker for t in turns]),
        "cost": np.array(counter.count_many([a + b for a, b in zip(lines, captions, strict=True)])),
        "cost_plain": np.array(counter.count_many(lines)),
        "header": header,
        "caption_tokens": [set(tokenize([t.caption])[0]) if t.caption else set() for t in turns],
        "questions": questions,
        "qtokens": [set(q) for q in qtokens],
        "gold": [list(q.evidence) for q in conv.questions],
        "category": [q.category for q in conv.questions],
        "Q": embed(questions),
        "turn": embed(rendered),
        "context": embed(windows(rendered, sessions, 1)),
        "sentence": embed(sentences),
        "sentence_owner": np.array(owner),
        "bm25": {w: np.stack([b.scores(q) for q in qtokens]) for w, b in bm25.items()},
    }


def pack(c: dict[str, Any], order: np.ndarray, cost: np.ndarray, budget: int) -> set[int]:
    """Memstrata's packing rule: admit in rank order while it fits, a header per new session."""
    used, opened, chosen = 0, set(), set()
    for i in order[:800]:
        s = int(c["sessions"][i])
        k = int(cost[i]) + (c["header"][s] if s not in opened else 0)
        if used + k <= budget:
            used += k
            opened.add(s)
            chosen.add(int(i))
    return chosen


def evaluate(
    data: list[dict[str, Any]], score: Callable[[dict[str, Any], int], np.ndarray], *, captions: str = "all"
) -> dict[str, Any]:
    """recall_all per budget (%), per category at B=1500, and which questions were found at B=1500.

    ``captions``: all, none or matching.
    """
    hits = np.zeros(len(BUDGETS))
    found: list[bool] = []
    per_cat: dict[int, list[int]] = {}
    n = 0
    for c in data:
        index = {d: i for i, d in enumerate(c["ids"])}
        for qi, (gold, cat) in enumerate(zip(c["gold"], c["category"], strict=True)):
            if cat == 5:
                continue
            if captions == "all":
                cost = c["cost"]
            elif captions == "none":
                cost = c["cost_plain"]
            else:
                shown = np.array([bool(t & c["qtokens"][qi]) for t in c["caption_tokens"]])
                cost = np.where(shown, c["cost"], c["cost_plain"])
            order = np.argsort(-score(c, qi), kind="stable")
            wanted = [index[g] for g in gold]
            got = [all(w in pack(c, order, cost, b) for w in wanted) for b in BUDGETS]
            hits += got
            found.append(got[BUDGETS.index(1500)])
            per_cat.setdefault(cat, [0, 0])
            per_cat[cat][0] += got[BUDGETS.index(1500)]
            per_cat[cat][1] += 1
            n += 1
    return {
        "recall_all": [round(100 * h / n, 1) for h in hits],
        "cat@1500": {k: round(100 * v[0] / v[1], 1) for k, v in sorted(per_cat.items())},
        "found": found,
    }


# ---- scorers ------------------------------------------------------------------------------------
def lexical(c: dict[str, Any], qi: int, widths: tuple[int, ...]) -> np.ndarray:
    return sum(np.where(c["bm25"][w][qi] > 0, ranks_to_unit(c["bm25"][w][qi]), 0.0) for w in widths) / len(widths)


def dense(c: dict[str, Any], qi: int, views: tuple[str, ...]) -> np.ndarray:
    return sum(ranks_to_unit(c[v] @ c["Q"][qi]) for v in views) / len(views)


def sentence_max(c: dict[str, Any], qi: int) -> np.ndarray:
    sims = c["sentence"] @ c["Q"][qi]
    out = np.full(len(c["ids"]), -1.0)
    np.maximum.at(out, c["sentence_owner"], sims)
    return ranks_to_unit(out)


def speaker(c: dict[str, Any], qi: int, weight: float = 0.7) -> np.ndarray:
    q = c["questions"][qi]
    named = [s for s in c["speakers"] if re.search(rf"\b{re.escape(s.split()[0])}\b", q, re.IGNORECASE)]
    if not named or len(named) == len(c["speakers"]):
        return np.ones(len(c["ids"]))
    return 1 + weight * np.isin(c["speaker"], named)


def scorer(
    views: tuple[str, ...] = ("turn",),
    widths: tuple[int, ...] = (0,),
    *,
    speaker_weight: float = 0.0,
    sentences: bool = False,
    per_token: float = 0.0,
    zscores: bool = False,
) -> Callable[[dict[str, Any], int], np.ndarray]:
    """Half dense, half BM25; fused by rank (the first push) or, with ``zscores``, by z-score like memstrata now."""

    def score(c: dict[str, Any], qi: int) -> np.ndarray:
        if zscores:
            s = sum(standardize(c[v] @ c["Q"][qi]) for v in views) / max(len(views), 1) + sum(
                standardize(c["bm25"][w][qi]) for w in widths
            ) / max(len(widths), 1)
            s = (s - s.min()) / (s.max() - s.min()) if s.max() > s.min() else np.zeros_like(s)
            return s * speaker(c, qi, speaker_weight)
        d = dense(c, qi, views)
        if sentences:
            d = (d * len(views) + sentence_max(c, qi)) / (len(views) + 1)
        s = (d + lexical(c, qi, widths)) / 2 * speaker(c, qi, speaker_weight)
        return s / c["cost"] ** per_token if per_token else s

    return score


VIEWS = ("turn", "context")
ROWS: list[tuple[str, Callable[[dict[str, Any], int], np.ndarray], str]] = [
    ("turn: dense + BM25 (rank fusion)", scorer(), "all"),
    ("+ dense on the turn with its neighbours", scorer(VIEWS), "all"),
    ("+ speaker prior 0.7", scorer(VIEWS, speaker_weight=0.7), "all"),
    ("+ BM25 on 1-neighbour windows", scorer(VIEWS, (0, 1), speaker_weight=0.7), "all"),
    ("+ BM25 on 2-neighbour windows", scorer(VIEWS, (0, 1, 2), speaker_weight=0.7), "all"),
    (
        "+ captions only where they share a word with the question",
        scorer(VIEWS, (0, 1, 2), speaker_weight=0.7),
        "matching",
    ),
    ("  (no captions at all, for reference)", scorer(VIEWS, (0, 1, 2), speaker_weight=0.7), "none"),
    (
        "x sentence-level dense view added (failed)",
        scorer(VIEWS, (0, 1, 2), speaker_weight=0.7, sentences=True),
        "matching",
    ),
    (
        "x score per token^0.2, to favour cheap turns (failed)",
        scorer(VIEWS, (0, 1, 2), speaker_weight=0.7, per_token=0.2),
        "matching",
    ),
    ("+ z-score fusion instead of rank fusion", scorer(VIEWS, (0, 1, 2), speaker_weight=0.7, zscores=True), "matching"),
    (
        "+ BM25 on 4- and 8-neighbour windows (memstrata's views now)",
        scorer(VIEWS, WINDOW_WIDTHS, speaker_weight=0.7, zscores=True),
        "matching",
    ),
]
# Each view ranking alone (with the speaker prior): the material for the per-question ceiling below.
SINGLE: list[tuple[str, Callable[[dict[str, Any], int], np.ndarray], str]] = [
    (f"  single view: dense {v}", scorer((v,), (), speaker_weight=0.7, zscores=True), "matching") for v in VIEWS
] + [
    (f"  single view: BM25 window {w}", scorer((), (w,), speaker_weight=0.7, zscores=True), "matching")
    for w in WINDOW_WIDTHS
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--cache", type=Path, default=None, help="pickle of the prepared views, reused if present")
    args = parser.parse_args()
    if args.cache and args.cache.exists():
        data = pickle.loads(args.cache.read_bytes())
    else:
        emb, counter = MiniLMEmbeddings(), TokenCounter()
        data = [prepare(conv, emb, counter) for conv in load_locomo(args.path)]
        if args.cache:
            args.cache.write_bytes(pickle.dumps(data))
    print(f"| scorer | {' | '.join(f'B={b}' for b in BUDGETS)} | cat 1 / 2 / 3 / 4 @1500 |")
    print("|---|" + "---|" * (len(BUDGETS) + 1))
    found = []
    for name, score, captions in ROWS + SINGLE:
        r = evaluate(data, score, captions=captions)
        found.append(r["found"])
        cats = " / ".join(str(v) for v in r["cat@1500"].values())
        print(f"| {name} | {' | '.join(str(v) for v in r['recall_all'])} | {cats} |", flush=True)
    # An oracle that, knowing the gold turns, picks for each question whichever ranking above found them all.
    # No fusion of these signals can be expected to pass it by much: it bounds what re-weighting them can reach.
    ceiling = 100 * float(np.mean(np.any(np.array(found), axis=0)))
    print(
        f"| ceiling: best of the {len(found)} rankings above, picked per question with the answer known "
        f"| | | {ceiling:.1f} | | | |",
        flush=True,
    )


if __name__ == "__main__":
    main()
