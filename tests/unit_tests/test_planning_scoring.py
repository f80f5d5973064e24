"""Pure retrieval operations: planning rules, H-Mem scoring, packing."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from memstrata.context import Context, default
from memstrata.memory.index import KindTable, MemoryIndex, tokenize
from memstrata.memory.levels import TURN, Turn
from memstrata.memory.plan.rules import coverage, decompose_query, follow_up_query, predict_scope, temporal_hint
from memstrata.memory.query import Hit, Interval, Query
from memstrata.memory.search.fusion import hybrid_semantic, score_turns, standardize, turn_semantic, when_match
from memstrata.memory.search.hmem_score import robustness, temporal_relevance
from memstrata.memory.search.packing import pack_context, parse_context, render
from memstrata.memory.search.selection import mark_captions
from memstrata.runtime.search import weights as weights_of


def test_decomposition_keeps_the_original_and_splits_named_conjunctions() -> None:
    parts = [s.text for s in decompose_query("Where did Ann, Bob and Cy travel?")]
    assert parts == [
        "Where did Ann, Bob and Cy travel?",
        "Where did Ann travel?",
        "Where did Bob travel?",
        "Where did Cy travel?",
    ]
    assert [s.text for s in decompose_query("What is the cat called?")] == ["What is the cat called?"]


@pytest.mark.parametrize(
    ("query", "scope"),
    [
        ("When did Ann move to Porto?", "Short"),
        ("What kind of music does Ann usually like?", "Long"),
        ("Where does Ann work?", "Mixed"),
    ],
)
def test_scope_rules(query: str, scope: str) -> None:
    assert predict_scope(query, now=None)[0] == scope


def test_temporal_hints() -> None:
    assert temporal_hint("What happened in May 2023?", now=None) == Interval(  # the whole month, as a tree window
        datetime(2023, 5, 1), datetime(2023, 6, 1) - timedelta(microseconds=1)
    )
    day = temporal_hint("What did Ann do on 8 May, 2023?", now=None)
    assert day is not None and day.start == datetime(2023, 5, 8)
    last_week = temporal_hint("What did Ann cook last week?", now=datetime(2023, 5, 15))
    assert last_week is not None and (last_week.start, last_week.end.date()) == (
        datetime(2023, 5, 8),
        datetime(2023, 5, 14).date(),
    )


def test_coverage_and_follow_up() -> None:
    texts = ["Ann: I adopted a cat named Miso."]
    assert coverage("What cat did Ann adopt?", texts) == 1.0
    assert follow_up_query("What cat did Ann adopt and where does she work?", texts, speakers=["Ann"]) == "Ann work"


def test_hmem_scoring_parts() -> None:
    day = Interval(datetime(2023, 5, 8), datetime(2023, 5, 8, 23, 59))
    assert temporal_relevance(day, day, lam=0.5) > temporal_relevance(
        day, Interval(datetime(2023, 9, 1), datetime(2023, 9, 2)), lam=0.5
    )
    assert temporal_relevance(None, day, lam=0.5) == 0.0
    fresh = robustness(datetime(2024, 1, 1), datetime(2024, 1, 2), tau_days=365, eta=0.5)
    old = robustness(datetime(2023, 1, 1), datetime(2024, 1, 2), tau_days=365, eta=0.5)
    reinforced = robustness(datetime(2023, 1, 1), datetime(2024, 1, 2), tau_days=365, eta=0.5, reinforcements=5)
    assert fresh > reinforced > old


def test_hybrid_semantic_ignores_bm25_zeros() -> None:
    scores = hybrid_semantic(np.array([0.9, 0.1, 0.5]), np.array([0.0, 0.0, 3.0]))
    assert scores.argmax() == 2 and scores[0] > scores[1]


def _item(turn_id: str, session: str, pos: int, text: str, score: float) -> Hit:
    return Hit(
        kind="turn",
        unit_id=turn_id,
        conversation_id="c",
        score=score,
        session_id=session,
        position=pos,
        speaker="Ann",
        text=text,
        time="8 May 2023",
    )


class Words:
    def count(self, text: str) -> int:
        return len(text.split())


def test_packing_respects_budget_skips_what_does_not_fit_and_renders_chronologically() -> None:
    ranked = [
        _item("D2:1", "2", 0, "second session line", 0.9),
        _item("D1:5", "1", 4, "a very long line " * 20, 0.8),
        _item("D1:2", "1", 1, "first session line", 0.7),
    ]
    context, chosen, tokens = pack_context(ranked, budget=20, counter=Words())
    assert tokens <= 20 and [c.unit_id for c in chosen] == ["D2:1", "D1:2"]
    assert context.index("first session line") < context.index("second session line")
    assert parse_context(context) == [("D1:2", "Ann: first session line"), ("D2:1", "Ann: second session line")]
    assert render([]) == ""


def _hit(turn_id: str, position: int, speaker: str, text: str, caption: str | None = None) -> Hit:
    return Hit(
        kind="turn",
        unit_id=turn_id,
        conversation_id="c",
        score=1.0,
        session_id="1",
        position=position,
        speaker=speaker,
        text=text,
        image_caption=caption,
    )


def _index(texts: list[tuple[str, str, int, str]], vecs: np.ndarray) -> MemoryIndex:
    """A snapshot of raw turns only: (turn id, session id, position, text) spoken by Ann."""
    turns = [
        Turn(user_id="u", conversation_id="c", id=tid, session_id=sid, position=pos, speaker="Ann", text=text)
        for tid, sid, pos, text in texts
    ]
    return MemoryIndex({"turn": KindTable(TURN, turns, vecs)})


def test_photo_captions_are_shown_only_when_they_share_a_word_with_the_query() -> None:
    items = [
        _hit("D1:1", 0, "Ann", "Look what I made!", "a painting of a sunset over a lake"),
        _hit("D1:2", 1, "Ann", "And this.", "a dog on a sofa"),
        _hit("D1:3", 2, "Bob", "Nice!"),
    ]
    marked = mark_captions(items, ["What did Ann paint?"])
    assert [m.show_caption for m in marked] == [True, False, True]  # no caption: nothing to hide
    text = render(marked)
    assert "sunset" in text and "dog" not in text and "And this." in text  # the turn's own text always stays


def test_window_views_of_the_search_snapshot() -> None:
    index = _index(
        [(f"D{s}:{p}", str(s), p, f"t{s}{p}") for s in (1, 2) for p in range(3)], np.eye(6, dtype=np.float32)
    )
    assert index.windows(0)[0] == "Ann: t10"
    assert index.windows(1)[1] == "Ann: t10\nAnn: t11\nAnn: t12"
    assert index.windows(1)[3] == "Ann: t20\nAnn: t21"  # windows never cross a session
    assert index.windows(2)[0] == "Ann: t10\nAnn: t11\nAnn: t12"
    assert len(index.views) == 1 and (index.views[0] == index.turn_vecs).all()  # no view kind: the turn stands alone


def test_a_turn_deep_in_a_scene_is_lifted_by_the_wide_windows() -> None:
    """Six turns after "camping" was said, a reply that never names it still outranks an unrelated session."""
    assert max(default("retrieval.window_widths")) >= 6
    scene = [
        "We went camping in the Rockies last week",
        "Oh nice, how was it?",
        "Cold at night but lovely",
        "Did the kids like it?",
        "They loved the fire",
        "Any wildlife?",
        "We saw a moose by the lake",
    ]
    other = [
        "My sister got a new job",
        "Oh nice, how is it?",
        "Busy but lovely",
        "Does she like it?",
        "She loves the team",
        "Any travel?",
        "They saw a heron by the lake",
    ]
    texts = scene + other
    flat = np.ones((len(texts), 4), dtype=np.float32) / 2  # dense says nothing: every turn is equally close
    index = _index([(f"D{1 + i // 7}:{i % 7}", str(1 + i // 7), i % 7, t) for i, t in enumerate(texts)], flat)
    scores = turn_semantic(index, flat[0], tokenize(["What did Ann see by the lake while camping?"])[0])
    assert scores[6] > scores[13] + 0.1  # the moose by the lake (camping scene) beats the heron by the lake


def test_a_question_asking_when_prefers_the_turn_that_tells_a_time() -> None:
    texts = [
        "I met this awesome woman on a trip to Canada last week",
        "She is incredible, I met her in Canada",
        "I may go to Canada again",
        "We have been together for 3 months",
    ]
    index = _index([(f"D1:{p}", "1", p, t) for p, t in enumerate(texts)], np.ones((4, 4), dtype=np.float32) / 2)
    assert when_match(index, "When did Evan meet his wife?").tolist() == [1.0, 0.0, 0.0, 1.0]  # "may" is no month
    assert when_match(index, "Where did Evan meet his wife?").tolist() == [0.0] * 4
    own = np.array([0.9, 1.0, 0.2, 0.1])  # the undated turn matches the words a little better
    for question, best in (("When did Evan meet his wife?", 0), ("Where did Evan meet his wife?", 1)):
        query = Query(id="q", text=question)
        scores = score_turns(index, query, own, np.zeros(4), weights=weights_of(Context(user_id="t")), now=None)[
            "score"
        ]
        assert int(np.argmax(scores)) == best
    flat = score_turns(
        index,
        Query(id="q", text="When did Evan meet his wife?"),
        own,
        np.zeros(4),
        weights=weights_of(
            Context(
                user_id="t",
                weights={"when": 0.0},
            )
        ),
        now=None,
    )["score"]
    assert int(np.argmax(flat)) == 1  # the boost, not the words, made the difference


def test_turn_semantic_fuses_views_into_unit_range() -> None:
    texts = ["I adopted a puppy called Toby", "We went camping by the lake", "Work was busy this week"]
    index = _index([(f"D1:{p}", "1", p, t) for p, t in enumerate(texts)], np.eye(3, dtype=np.float32))
    qvec = np.array([0.0, 1.0, 0.0], dtype=np.float32)
    with_words = turn_semantic(index, qvec, tokenize(["camping trip"])[0])
    without_words = turn_semantic(index, qvec, [])  # no BM25 match at all: dense alone decides, no NaN
    for scores in (with_words, without_words):
        assert np.isfinite(scores).all() and scores.min() == 0.0 and scores.max() == 1.0
        assert int(np.argmax(scores)) == 1
    assert standardize(np.zeros(4)).tolist() == [0.0] * 4


@pytest.mark.parametrize(
    ("question", "turn", "expected"),
    [
        (
            "When did Tom run the half marathon?",
            "Tom: Nice. I ran the Brighton half marathon two weeks ago in 1 hour 52.",
            "I ran the Brighton half marathon two weeks ago (31 March 2024) in 1 hour 52.",
        ),
        ("How many cats does Ann have?", "Ann: Lovely day. We have three cats now!", "We have three cats now!"),
        (
            "Where does Priya work?",
            "Priya: Hi! I work at Tidewater Labs since May.",
            "I work at Tidewater Labs since May.",
        ),
    ],
)
def test_extractive_answer_takes_the_clause_of_the_type_asked(question: str, turn: str, expected: str) -> None:
    from memstrata.views.extractive_answer import extractive_answer

    assert extractive_answer(question, [(turn, datetime(2024, 4, 14))]) == expected


def test_extractive_answer_is_none_when_nothing_fits() -> None:
    from memstrata.views.extractive_answer import extractive_answer

    assert extractive_answer("How many dogs?", [("Ann: No idea at all.", None)]) is None


def test_level1_summaries_reranked_by_their_turns_own_text_or_both() -> None:
    from types import SimpleNamespace

    from memstrata.memory.search.fusion import ranked_events
    from memstrata.memory.search.light import rerank_summaries

    # Summary 0 matches by its own words only; summary 2 holds the best turn (row 4); facts keep their slots.
    index = SimpleNamespace(events={"summary": SimpleNamespace(turn_rows=[[0, 1], [2], [3, 4]])})
    ranked = ranked_events({"summary": np.array([0.9, 0.5, 0.3]), "fact": np.array([0.7, 0.1])}, ["summary", "fact"])
    assert [(k, r) for k, r, _ in ranked] == [("summary", 0), ("fact", 0), ("summary", 1), ("summary", 2), ("fact", 1)]
    turns = np.array([0.1, 0.2, 0.6, 0.3, 0.9])
    assert rerank_summaries(index, ranked, turns, "own") == ranked
    by_turns = rerank_summaries(index, ranked, turns, "turns")
    assert [(k, r) for k, r, _ in by_turns] == [
        ("summary", 2),
        ("fact", 0),
        ("summary", 1),
        ("summary", 0),
        ("fact", 1),
    ]
    assert by_turns[0][2] == 0.3  # a summary keeps its own score; only its place changes
    # Own ranks 0,1,2 and turn ranks 2,1,0: the two that each lead one ranking beat the one second in both.
    fused = rerank_summaries(index, ranked, turns, "fused")
    assert [(k, r) for k, r, _ in fused] == [("summary", 0), ("fact", 0), ("summary", 2), ("summary", 1), ("fact", 1)]
    turns[4] = 0.0  # turn ranks now 2,0,1: summary 1 (first by turns, second by own) leads, 2 (last, second) trails
    assert [r for k, r, _ in rerank_summaries(index, ranked, turns, "fused") if k == "summary"] == [1, 0, 2]
    with pytest.raises(ValueError, match="level1_rank"):
        rerank_summaries(index, ranked, turns, "best")


def test_ranked_events_depth_keeps_each_kinds_best_in_order() -> None:
    from memstrata.memory.search.fusion import ranked_events

    scores = {"fact": np.array([0.2, 0.8, 0.5, 0.9, 0.1]), "summary": np.array([0.7, 0.3])}
    full = ranked_events(scores, ["summary", "fact"])
    assert [s for _, _, s in full] == sorted([s for _, _, s in full], reverse=True) and len(full) == 7
    cut = ranked_events(scores, ["summary", "fact"], {"fact": 2})
    assert cut == [x for x in full if x[0] == "summary" or x[1] in (3, 1)]  # facts 3 and 1, the two best
    assert ranked_events(scores, ["fact"], {"fact": 0}) == []


def test_hit_copies_change_only_the_named_fields() -> None:
    from dataclasses import replace

    hit = Hit(
        kind="turn",
        unit_id="D1:3",
        conversation_id="c",
        score=0.5,
        parts={"own": 0.4},
        turn_ids=["D1:3"],
        found_by="summary",
        level="level1",
        text="I moved to Lisbon.",
        scope="Short",
    )
    copy = hit.with_(score=0.9, window="month 2023-05", via="Ann -> f1")
    assert copy == replace(hit, score=0.9, window="month 2023-05", via="Ann -> f1")
    assert hit.score == 0.5 and hit.window == "" and copy is not hit  # the original is never changed
    with pytest.raises(TypeError, match="no field"):
        hit.with_(colour="red")
