"""Retrieval through the themes: xMemory's Eq. 4 and Stage II proxy (pure), and the theme path on a real store."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from memstrata.memory.query import Hit
from memstrata.memory.search.selection import found_first
from memstrata.memory.search.themes import knn_weights
from memstrata.memory.themes.select import admit_by_coverage, objective, representatives


def _random_case(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random(size=(n, 4))  # positive cosines: every node has k neighbours
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return rng.random(n), x @ x.T


@pytest.mark.parametrize("seed", range(12))
def test_eq4_greedy_reaches_the_submodular_bound_of_the_brute_force_optimum(seed: int) -> None:
    rel, sims = _random_case(seed, 7)
    budget, alpha, k = 3, 0.6, 2
    greedy = representatives(rel, sims, k=k, alpha=alpha, coverage=1.01, budget=budget)
    assert len(greedy) == budget and len(set(greedy)) == budget
    best = max(objective(rel, sims, c, k=k, alpha=alpha) for c in itertools.combinations(range(7), budget))
    assert objective(rel, sims, greedy, k=k, alpha=alpha) >= (1 - 1 / math.e) * best - 1e-9


def test_eq4_equals_the_brute_force_optimum_when_candidates_are_disjoint_clusters() -> None:
    # three tight pairs: the best 3 picks take one node of each pair; with alpha high, coverage decides
    sims = np.zeros((6, 6))
    for a, b in ((0, 1), (2, 3), (4, 5)):
        sims[a, b] = sims[b, a] = 0.9
    np.fill_diagonal(sims, 1.0)
    rel = np.array([1.0, 0.95, 0.5, 0.45, 0.2, 0.1])
    picks = representatives(rel, sims, k=1, alpha=0.9, coverage=1.01, budget=3)
    best = max(itertools.combinations(range(6), 3), key=lambda c: objective(rel, sims, c, k=1, alpha=0.9))
    assert sorted(picks) == sorted(best) == [0, 2, 4]


def test_eq4_with_alpha_zero_is_the_top_by_relevance_and_stops_at_the_coverage_ratio() -> None:
    rel, sims = _random_case(3, 8)
    assert representatives(rel, sims, k=2, alpha=0.0, coverage=1.01, budget=4) == list(np.argsort(-rel)[:4])
    # each pick covers itself and 2 neighbours: 3 of 8 covered after one pick, so 0.3 stops after one
    assert len(representatives(rel, sims, k=2, alpha=0.5, coverage=0.3, budget=8)) == 1
    assert representatives(rel, sims, k=2, alpha=0.5, coverage=1.0, budget=0) == []
    assert len(representatives(rel, sims, k=2, alpha=0.5, coverage=0.0, budget=3)) == 1  # one pick at least


def test_eq4_reads_each_candidates_nearest_in_its_whole_conversation_not_among_the_candidates() -> None:
    """The kNN graph of Stage I: two candidates are linked only when one is among the other's k nearest units of
    its conversation. Among candidates alone, rows 0 and 1 (cosine 0.8) would be each other's nearest.
    """

    def unit(theta: float) -> list[float]:
        return [math.cos(theta), math.sin(theta), 0.0]

    angles = {0: 0.0, 1: math.acos(0.8), 2: -0.05, 3: -0.08, 4: math.acos(0.8) + 0.05, 5: -0.5}
    units = [SimpleNamespace(conversation_id="c") for _ in angles] + [SimpleNamespace(conversation_id="other")]
    vecs = np.array([unit(a) for a in angles.values()] + [unit(0.0)], dtype=np.float32)
    memo: dict[str, object] = {}
    index = SimpleNamespace(
        events={"theme": SimpleNamespace(units=units, vecs=vecs)}, memo=memo, remember=memo.__setitem__
    )
    w = knn_weights(index, "theme", [0, 1, 2], k=2)  # candidates: rows 0, 1 and 2
    # row 0's two nearest of its conversation are rows 2 and 3 (the other conversation's copy is not one)
    assert w[0, 1] == 0.0 and w[0, 2] == pytest.approx(math.cos(0.05), abs=1e-6)
    # row 1's two nearest are rows 4 and 0 (cosines 0.999 and 0.8): it covers row 0, not row 2
    assert w[1, 0] == pytest.approx(0.8, abs=1e-6) and w[1, 2] == 0.0
    assert list(np.diag(w)) == [1.0, 1.0, 1.0]


def test_stage2_admits_only_units_that_say_something_new_and_stops_early() -> None:
    query = {"cat", "miso", "grey"}
    units = [{"cat", "box"}, {"cat"}, {"miso"}, {"dog"}, {"lisbon"}, {"grey"}]
    admitted, left = admit_by_coverage(query, units, patience=2)
    # unit 1 says nothing new; 3 and 4 say nothing new in a row: stop before the 'grey' unit
    assert admitted == [0, 2]
    assert left == pytest.approx(1 / 3)
    admitted, left = admit_by_coverage(query, units, patience=3)
    assert admitted == [0, 2, 5] and left == 0.0
    assert admit_by_coverage(set(), units, patience=2) == ([], 0.0)


def test_found_first_moves_the_best_quota_of_theme_hits_up_once_each() -> None:
    def hit(unit: str, score: float, by: str) -> Hit:
        return Hit(kind="turn", unit_id=unit, conversation_id="c", score=score, found_by=by)

    ranked = [
        hit("a", 0.9, "summary"),
        hit("b", 0.8, "turn"),
        hit("c", 0.7, "theme"),
        hit("c", 0.7, "summary"),
        hit("d", 0.6, "spread"),
        hit("e", 0.5, "theme"),
    ]
    moved = found_first(ranked, ("theme", "spread"), 2)
    assert [(h.unit_id, h.found_by) for h in moved] == [
        ("c", "theme"),
        ("d", "spread"),
        ("a", "summary"),
        ("b", "turn"),
        ("e", "theme"),
    ]
    assert found_first(ranked, ("theme", "spread"), 0) == ranked


# ---- the theme path on a real store (packaged MiniLM, embedded Chroma, no model) ----------------------------
SESSIONS = [
    (
        "2024-03-02T10:00:00",
        [
            "I adopted a grey cat named Miso last week.",
            "Lovely! Is she settling in?",
            "She hides in cardboard boxes all day.",
            "Cats love boxes.",
            "I started training for the Lisbon half marathon.",
            "How far do you run now?",
            "About ten kilometres, three times a week.",
        ],
    ),
    (
        "2024-04-10T18:00:00",
        [
            "Miso knocked my plants off the shelf again.",
            "Naughty cat!",
            "My knee hurts after the long run on Sunday.",
            "Rest it a bit.",
            "I booked a physiotherapist for my knee.",
            "Good idea.",
        ],
    ),
    (
        "2024-05-20T09:00:00",
        [
            "I bought Miso a scratching post and a heated bed.",
            "She must be spoiled.",
            "I finished the Lisbon half marathon in two hours.",
            "Congratulations!",
            "My sister Lena visited and loved the cat.",
            "Nice.",
        ],
    ),
]


def _conversation() -> dict:
    msgs = []
    for s, (when, texts) in enumerate(SESSIONS, start=1):
        for i, text in enumerate(texts):
            msgs.append(
                {
                    "speaker": "Ann" if i % 2 == 0 else "Bo",
                    "text": text,
                    "timestamp": when,
                    "session": str(s),
                    "id": f"s{s}:{i}",
                }
            )
    return {"conversation_id": "ann-bo", "messages": msgs}


@pytest.fixture(scope="module")
def theme_mem(minilm, tmp_path_factory):
    from memstrata import Memstrata

    mem = Memstrata(path=str(tmp_path_factory.mktemp("themes")), embeddings=minilm)
    mem.ingest(_conversation(), user_id="ann", close=True)
    mem.ingest({**_conversation(), "conversation_id": "other"}, user_id="zed", close=True)  # same words, other user
    yield mem
    mem.close()


def _theme_events(result) -> dict:
    return next(e for e in result.trace["events"] if e["node"] == "lookup_level1")["themes"]


@pytest.mark.integration
def test_the_theme_path_brings_facts_of_picked_themes_with_their_path(theme_mem) -> None:
    result = theme_mem.retrieve("What do we know about Ann's cat Miso?", user_id="ann", context_budget=400)
    [(_, how)] = _theme_events(result).items()
    assert how["themes"] and how["candidates"] >= len(how["themes"])
    assert 0 < how["facts"] <= 24 and how["episodes_offered"] == 0  # defaults: no Stage II
    evidence = [e.model_dump() for e in result.evidence]
    assert all(e["conversation_id"] == "ann-bo" for e in evidence)  # never the other user's copy
    assert "Miso" in " ".join(e["text"] for e in evidence)


@pytest.mark.integration
def test_the_theme_path_is_off_at_zero_and_ablation_settings_change_what_it_picks(theme_mem) -> None:
    question = "How is Ann's running going?"
    base = theme_mem.retrieve(question, user_id="ann", context_budget=400)
    assert _theme_events(base)
    assert (
        _theme_events(
            theme_mem.retrieve(
                question,
                user_id="ann",
                context_budget=400,
                themes={"search_k": 0},
            )
        )
        == {}
    )
    top = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        themes={"select": "top", "spread": 0},
        experimental={"theme_stage2": False},
    )
    [(_, how)] = _theme_events(top).items()
    assert how["evoked"] == 0 and how["episodes_offered"] == 0  # no spreading, no Stage II
    paper = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        themes={"select": "eq4", "pick": 3, "fact_pick": 8},
        experimental={"theme_stage2": True},
    )
    [(_, how)] = _theme_events(paper).items()
    assert len(how["themes"]) <= 3 and how["facts"] <= 8
    assert how["episodes_offered"] >= 1 and how["uncertainty_measure"].startswith("offline")
    # the proxy starts from the picked themes' lines: a theme's text is made of its facts, so the one episode offered
    # (its fact and turn) says no query word the theme did not; from no coarse context it would have been admitted
    assert how["episodes_admitted"] == 0 and how["uncertainty_left"] == how["coarse_uncertainty"] == 0.5
    # with Eq. 4 the themes facts evoke are candidates like the others: the pick cap holds for them too
    one = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        themes={"select": "eq4", "pick": 1, "search_k": 1},
    )
    [(_, how)] = _theme_events(one).items()
    assert how["evoked"] >= 1 and len(how["themes"]) == 1
    top = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        themes={"pick": 1, "search_k": 1},
    )
    [(_, how)] = _theme_events(top).items()
    assert len(how["themes"]) == 1 + how["evoked"]  # best match: evoked themes join by association
    # the scope table decides: a scope that does not list the theme kind never takes the theme path
    no_themes = {
        "Short": ["summary", "fact", "turn"],
        "Long": ["summary", "fact"],
        "Mixed": ["summary", "fact", "turn"],
    }
    assert (
        _theme_events(
            theme_mem.retrieve(
                question,
                user_id="ann",
                context_budget=400,
                retrieval={"scope_kinds": no_themes},
            )
        )
        == {}
    )


def test_the_uncertainty_gate_admits_only_what_lowers_the_doubt_and_stops_after_patience() -> None:
    from memstrata.memory.themes.select import UncertaintyGate

    gate = UncertaintyGate(1.0, patience=2)
    assert [gate.offer(u) for u in (0.7, 0.7, 0.4, 0.5, 0.4)] == [True, False, True, False, False]
    assert gate.done and gate.uncertainty == 0.4
    solved = UncertaintyGate(1.0, patience=5)
    assert solved.offer(0.0) and solved.done  # nothing left to lower


def _scripted_reader(confidences: list[float]):
    """A model whose Stage II self-checks say ``confidences`` in turn; every other decision gets no tool call."""
    from memstrata.prompts import PROMPTS
    from memstrata.testing import ScriptedChatModel

    def reply(messages):
        if messages[0].content == PROMPTS["STAGE2_PROMPT"]:
            return {"confidence": confidences.pop(0) if confidences else 0.0}
        return "no structured reply"  # the other steps fall back (their own tests cover them)

    return ScriptedChatModel(default=reply)


@pytest.mark.integration
def test_with_a_model_stage2_keeps_the_theme_turns_of_the_episodes_the_reader_admitted(theme_mem) -> None:
    question = "What do we know about Ann's cat Miso?"
    plain = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        model=_scripted_reader([]),
        experimental={"theme_stage2": False},
    )
    lookup = next(e for e in plain.trace["events"] if e["node"] == "lookup_level1")
    assert "stage2" not in lookup  # Stage II off: the model is never asked
    offered = lookup["found_by"].get("theme", 0) + lookup["found_by"].get("spread", 0)
    assert offered > 0
    result = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        model=_scripted_reader([0.4] + [0.5] * 9),
        experimental={"theme_stage2": True},
        themes={"patience": 2},
        llm_depth=None,  # Stage II's self-checks are sequential calls: no bound, so they all run
    )
    lookup = next(e for e in result.trace["events"] if e["node"] == "lookup_level1")
    how = lookup["stage2"]
    # the picked themes leave a doubt of 0.6; the first episode lowers it to 0.5; the next ones lower nothing: two
    # more checks, then stop
    assert how["coarse_uncertainty"] == 0.6 and how["admitted"] == 1 and how["fallbacks"] == 0
    assert how["checked"] == 1 + min(3, how["offered"])
    assert how["uncertainty_left"] == 0.5 and how["measure"].startswith("reader self-check")
    assert next(iter(lookup["themes"].values()))["episodes_offered"] == 0  # no offline proxy as well
    checks = result.trace["llm"]["per_node"]["stage2"]  # every check of every lookup round is metered
    rounds = [e["stage2"] for e in result.trace["events"] if e["node"] == "lookup_level1" and "stage2" in e]
    assert checks["calls"] == sum(r["checked"] for r in rounds) and checks["fallbacks"] == 0
    if how["offered"] > 1:
        assert how["removed"] > 0
    assert lookup["turns"] == sum(lookup["found_by"].values())


class _Table:
    """A kind's snapshot table as ``joint_top`` reads it: cosines, BM25 scores and units."""

    def __init__(self, cos: list[float], lex: list[float], units: list | None = None) -> None:
        self.cos, self.units = np.array(cos), units or [SimpleNamespace() for _ in cos]
        self.bm25 = SimpleNamespace(scores=lambda tokens: np.array(lex))

    def __len__(self) -> int:
        return len(self.units)

    def dense(self, qvec: object) -> np.ndarray:
        return self.cos

    def units_as(self, cls: type) -> list:
        return self.units


def test_eq9_ranks_facts_themes_and_current_persona_in_one_list_with_bm25_scaled_over_all_three() -> None:
    from memstrata.memory.search.associative import joint_top

    persona_units = [
        SimpleNamespace(current=False, items=["x"]),  # a replaced version: never an anchor
        SimpleNamespace(current=True, items=["y"]),
        SimpleNamespace(current=True, items=[]),  # no items: nothing to anchor
    ]
    index = SimpleNamespace(
        events={
            "fact": _Table([0.6, 0.2, 0.1], [0.0, 8.0, 0.0]),
            "theme": _Table([0.5], [2.0]),
            "persona": _Table([0.9, 0.3, 0.95], [0.0, 0.0, 0.0], persona_units),
        }
    )
    top = joint_top(index, None, ["w"], 4)
    # 0.5 * cosine + 0.5 * BM25 / 8 (the best BM25 of the three kinds)
    assert [(k, r) for k, r, _ in top] == [("fact", 1), ("theme", 0), ("fact", 0), ("persona", 1)]
    assert [round(s, 3) for _, _, s in top] == [0.6, 0.375, 0.3, 0.15]
    # a fact no longer current is worth its validity factor
    assert [(k, r) for k, r, _ in joint_top(index, None, ["w"], 2, validity={"fact": np.array([1.0, 0.1, 1.0])})] == [
        ("theme", 0),
        ("fact", 0),
    ]
    assert joint_top(index, None, ["w"], 0) == []


@pytest.mark.integration
def test_eq9_admits_its_facts_and_evokes_their_themes_on_a_real_store(theme_mem) -> None:
    question = "What do we know about Ann's cat Miso?"
    base = theme_mem.retrieve(question, user_id="ann", context_budget=400)
    joint = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        experimental={"theme_joint_k": 15},
    )
    [(_, how)] = _theme_events(joint).items()
    assert how["themes"] and how["facts"] > 0
    assert how["persona"] is None or isinstance(how["persona"][0], int)
    lookup = next(e for e in joint.trace["events"] if e["node"] == "lookup_level1")
    assert lookup["found_by"].get("associative", 0) > 0  # Eq. 9's own facts bring their turns
    if how["persona"] is not None:  # the anchor is the dimension Eq. 9 ranked, named as such
        assert lookup["persona"]["q0"]["why"].startswith("Eq. 9 ranked")
    assert all(e.conversation_id == "ann-bo" for e in joint.evidence)
    assert "Miso" in " ".join(e.text for e in joint.evidence)
    [(_, off)] = _theme_events(base).items()
    assert off.get("persona") is None  # without Eq. 9 the theme path names no persona


@pytest.mark.integration
def test_scene_lines_open_the_context_within_their_share_and_cite_turns_of_the_conversation(theme_mem) -> None:
    from memstrata.memory.search.packing import parse_context
    from memstrata.memory.tokens import TokenCounter

    question = "What do we know about Ann's cat Miso?"
    plain = theme_mem.retrieve(question, user_id="ann", context_budget=400)
    assert "[scenes]" not in plain.context and "scenes" not in plain.trace  # off by default: the context is turns
    result = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        experimental={"scene_lines": 2},
    )
    head, *_ = result.context.split("\n[")
    lines = head.splitlines()
    assert lines[0] == "[scenes]" and 1 <= len(lines) - 1 <= 2
    assert all(line.startswith("theme:") and "(cites s" in line for line in lines[1:])
    assert result.trace["scenes"]["lines"] == len(lines) - 1 and result.trace["scenes"]["tokens"] <= 0.15 * 400
    assert TokenCounter().count(result.context) <= 400  # the scenes come out of the same budget
    assert parse_context(result.context) == parse_context(result.context[len(head) + 1 :])  # not read as turns
    assert all(e.conversation_id == "ann-bo" for e in result.evidence)
    # a share too small for one line: no scene block at all
    tight = theme_mem.retrieve(
        question,
        user_id="ann",
        context_budget=400,
        experimental={"scene_lines": 2},
        persona={"scene_share": 0.01},
    )
    assert "[scenes]" not in tight.context and tight.trace["scenes"]["lines"] == 0


@pytest.mark.integration
def test_stage2_starts_from_the_readers_doubt_on_the_picked_themes_shown_or_not(theme_mem) -> None:
    question = "What do we know about Ann's cat Miso?"
    settings = {"experimental.theme_stage2": True, "themes.patience": 2, "llm_depth": None, "context_budget": 400}
    # the scenes alone leave a doubt of 0.4; the episodes offered after them say 0.5 and 0.5: none lowers it
    coarse = theme_mem.retrieve(
        question,
        user_id="ann",
        model=_scripted_reader([0.6, 0.5, 0.5, 0.5]),
        experimental={"scene_lines": 2},
        **settings,
    )
    how = next(e for e in coarse.trace["events"] if e["node"] == "lookup_level1")["stage2"]
    assert how["coarse_uncertainty"] == 0.4 and how["admitted"] == 0 and how["uncertainty_left"] == 0.4
    assert how["checked"] == 1 + min(2, how["offered"])  # the coarse check, then patience
    # without scene lines the reader is not shown the themes, but they are still Stage II's coarse context: the
    # first episode offered (0.5) does not lower their doubt (0.5), so it is not admitted
    plain = theme_mem.retrieve(question, user_id="ann", model=_scripted_reader([0.5, 0.5, 0.5]), **settings)
    how = next(e for e in plain.trace["events"] if e["node"] == "lookup_level1")["stage2"]
    assert how["coarse_uncertainty"] == 0.5 and how["admitted"] == 0 and how["checked"] == 1 + min(2, how["offered"])
    assert "[scenes]" not in plain.context
