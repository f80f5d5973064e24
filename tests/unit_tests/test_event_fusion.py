"""H-Mem's Eq. 3 on the event units (``Context.weights.events="eq3"``): summaries, tree nodes and facts get T and R."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest
from conftest import HashEmbeddings, session_messages

from memstrata import Memstrata
from memstrata.context import Context
from memstrata.memory.index import KindTable, MemoryIndex, tokenize
from memstrata.memory.levels import FACT, SUMMARY, TREE_NODE, TURN, EventSummary, Fact, TreeNode, Turn
from memstrata.memory.query import Query
from memstrata.memory.search.fusion import Weights, fused_events, ranked_events, score_events
from memstrata.memory.search.hmem_score import (
    Interval,
    robustness,
    robustness_array,
    temporal_relevance,
    temporal_relevance_array,
)
from memstrata.memory.search.scoring import score_query
from memstrata.memory.tree.search import event_robustness, load_reinforcement, unit_window
from memstrata.runtime.search import weights as weights_of

MAY_8 = Interval(datetime(2023, 5, 8), datetime(2023, 5, 8, 23, 59, 59))
NOW = datetime(2023, 9, 1)


def _weights(mode: str = "eq3", /, **settings: float) -> Weights:
    return weights_of(Context(user_id="u", weights={"events": mode, **settings}))


def _summary(session: int, when: datetime) -> EventSummary:
    return EventSummary(
        user_id="u",
        conversation_id="c",
        episode_id=f"ep:s{session}:0-0",
        session_id=str(session),
        text=f"Ann went hiking, session {session}.",
        turn_ids=[f"s{session}:0"],
        timestamp=when,
    )


def _index(summaries: list[EventSummary]) -> MemoryIndex:
    """A snapshot of the summaries and their turns, built in memory (no store)."""
    turns = [
        Turn(
            user_id="u",
            conversation_id="c",
            id=s.turn_ids[0],
            session_id=s.session_id,
            position=0,
            speaker="Ann",
            text=s.text,
            timestamp=s.timestamp,
        )
        for s in summaries
    ]
    vecs = np.eye(len(turns), 4, dtype=np.float32)
    return MemoryIndex(
        {
            TURN.kind: KindTable(TURN, list(turns), vecs),
            SUMMARY.kind: KindTable(SUMMARY, list(summaries), vecs),
        }
    )


def _order(scores: np.ndarray) -> list[int]:
    return [row for _, row, _ in ranked_events({SUMMARY.kind: scores}, [SUMMARY.kind])]


# ---- Eq. 1 and Eq. 2 over arrays ------------------------------------------------------------------------------
def test_eq1_and_eq2_over_arrays_give_the_numbers_of_one_item_at_a_time() -> None:
    rng = np.random.default_rng(7)
    base = datetime(2023, 1, 1).timestamp()
    starts = base + rng.uniform(0, 300, 40) * 86400
    ends = starts + rng.uniform(0, 40, 40) * 86400
    starts[3] = ends[3] = np.nan  # a unit without a time
    hint = Interval(datetime(2023, 4, 1), datetime(2023, 4, 30, 23, 59, 59))
    got = temporal_relevance_array(starts, ends, hint, lam=0.3)
    one = [
        temporal_relevance(
            None if np.isnan(s) else Interval(datetime.fromtimestamp(s), datetime.fromtimestamp(e)), hint, lam=0.3
        )
        for s, e in zip(starts, ends, strict=True)
    ]
    assert np.allclose(got, one, atol=1e-9) and got[3] == 0.0 and got.max() > 0.5
    counts = rng.integers(0, 5, 40).astype(float)
    got = robustness_array(ends, NOW, tau_days=100, eta=0.5, reinforcements=counts)
    one = [
        robustness(
            None if np.isnan(e) else datetime.fromtimestamp(e), NOW, tau_days=100, eta=0.5, reinforcements=int(n)
        )
        for e, n in zip(ends, counts, strict=True)
    ]
    assert np.allclose(got, one, atol=1e-12) and got[3] == 1.0


def test_a_units_window_is_its_tree_window_or_the_days_it_covers() -> None:
    said, happened = datetime(2023, 5, 9, 15, 30), datetime(2023, 5, 8)
    fact = Fact(user_id="u", episode_id="ep:s1:0-0", session_id="1", n=0, text="Ann hiked.", subject="Ann")
    dated = fact.model_copy(update={"timestamp": said, "event_date": happened})
    node = TreeNode(user_id="u", level="month", window="2023-05", text="May.", timestamp=said)
    assert unit_window(dated) == (happened.timestamp(), datetime(2023, 5, 8, 23, 59, 59, 999999).timestamp())
    assert unit_window(fact.model_copy(update={"timestamp": said}))[0] == datetime(2023, 5, 9).timestamp()
    assert unit_window(node) == (datetime(2023, 5, 1).timestamp(), datetime(2023, 6, 1).timestamp() - 1e-6)
    assert np.isnan(unit_window(fact)).all()  # no time at all


# ---- the scores events are ranked by ----------------------------------------------------------------------------
def test_a_unit_inside_the_hints_window_outranks_an_equal_s_unit_outside_it() -> None:
    index = _index([_summary(1, datetime(2023, 6, 20, 10)), _summary(2, datetime(2023, 5, 8, 10))])
    same = np.array([0.6, 0.6])
    eq3 = fused_events(index, {SUMMARY.kind: same}, [SUMMARY.kind], MAY_8, weights=_weights(), now=NOW)
    assert _order(same) == [0, 1] and _order(eq3[SUMMARY.kind]) == [1, 0]
    # the later unit is the more robust one: only the hint's T puts the earlier first
    r = event_robustness(index, SUMMARY.kind, NOW, tau_days=365, eta=0.5)
    assert r[0] > r[1]
    plain = {SUMMARY.kind: same}
    assert fused_events(index, plain, [SUMMARY.kind], MAY_8, weights=_weights("rank"), now=NOW) is plain


def test_without_a_hint_t_is_zero_and_the_order_follows_s_then_r() -> None:
    days = [datetime(2023, 3, 1), datetime(2023, 8, 1), datetime(2023, 5, 1), datetime(2023, 6, 1)]
    index = _index([_summary(i, d) for i, d in enumerate(days)])
    s = np.array([0.5, 0.1, 0.5, 0.9])
    f = fused_events(index, {SUMMARY.kind: s}, [SUMMARY.kind], None, weights=_weights(), now=NOW)[SUMMARY.kind]
    r = event_robustness(index, SUMMARY.kind, NOW, tau_days=365, eta=0.5)
    assert np.allclose(f, 0.7 * s + 0.15 * r)  # T = 0
    assert _order(f) == [3, 2, 0, 1]  # S first; between the two at 0.5, the later (more robust) one
    untimed = fused_events(index, {SUMMARY.kind: s}, [SUMMARY.kind], None, weights=_weights(), now=None)
    assert np.allclose(untimed[SUMMARY.kind], 0.7 * s + 0.15)  # no reference time: R = 1 for every unit


def test_the_weights_are_the_turns_weights() -> None:
    index = _index([_summary(1, datetime(2023, 6, 20, 10)), _summary(2, datetime(2023, 5, 8, 10))])
    s = np.array([0.9, 0.5])
    days = [datetime(2023, 6, 20), datetime(2023, 5, 8)]  # a summary's window is its session's day
    t = np.array(
        [temporal_relevance(Interval(d, d + timedelta(days=1, microseconds=-1)), MAY_8, lam=0.5) for d in days]
    )
    r = np.array([robustness(u.timestamp, NOW, tau_days=365, eta=0.5) for u in index.events[SUMMARY.kind].units])

    def f(**w: float) -> np.ndarray:
        return fused_events(index, {SUMMARY.kind: s}, [SUMMARY.kind], MAY_8, weights=_weights(**w), now=NOW)[
            SUMMARY.kind
        ]

    assert np.allclose(
        f(semantic=0.5, temporal=0.3, robustness=0.2),
        0.5 * s + 0.3 * t + 0.2 * r,
    )
    assert _order(f(semantic=1.0, temporal=0.0, robustness=0.0)) == [0, 1]
    assert _order(f(semantic=0.0, temporal=1.0, robustness=0.0)) == [1, 0]
    assert np.allclose(
        f(semantic=0.0, temporal=0.0, robustness=1.0),
        r,
    )


# ---- a real store ---------------------------------------------------------------------------------------------
SESSIONS = [
    ("2023-05-08T10:00:00", ["I went hiking in the hills with my dog Rex.", "Two hours by train, the view was great."]),
    ("2023-06-20T10:00:00", ["I went hiking by the lake with my sister.", "The lake trail, we went hiking all day."]),
    ("2023-08-15T10:00:00", ["We went hiking again up the big hill.", "No, hiking with friends from work."]),
]
QUESTION = "Where did Ann go hiking on 8 May 2023?"


@pytest.fixture
def hikes(data_dir: str) -> Memstrata:
    mem = Memstrata(path=data_dir, embeddings=HashEmbeddings())
    messages = [
        m
        for n, (when, said) in enumerate(SESSIONS, 1)
        for m in session_messages(n, when, [("Ann", said[0]), ("Bo", "Where was that?"), ("Ann", said[1])])
    ]
    mem.ingest({"conversation_id": "c", "messages": messages}, user_id="u", close=True)
    return mem


def _ranked(mem: Memstrata, index: MemoryIndex, mode: str) -> list[tuple[str, str]]:
    query = Query(id="q0", text=QUESTION, hint_start=MAY_8.start, hint_end=MAY_8.end)
    qvec = np.asarray(mem.store.embeddings.embed_query(QUESTION), dtype=np.float32)
    kinds = [SUMMARY.kind, FACT.kind, TREE_NODE.kind]
    ranked, _ = score_query(index, query, qvec, event_kinds=kinds, top_events=5, weights=_weights(mode), now=NOW)
    return [(kind, index.events[kind].units[row].id) for kind, row, _ in ranked]


def test_on_a_real_store_eq3_reorders_the_events_of_a_dated_query_and_rank_keeps_them(hikes: Memstrata) -> None:
    index = MemoryIndex.load(hikes.store, user_id="u")
    for kind in (SUMMARY.kind, TREE_NODE.kind):
        load_reinforcement(index, hikes.store.counters, "u", kind=kind)
    tokens = tokenize([QUESTION])[0]
    qvec = np.asarray(hikes.store.embeddings.embed_query(QUESTION), dtype=np.float32)
    s = {k: score_events(t, qvec, tokens) for k, t in index.events.items()}
    kinds = [SUMMARY.kind, FACT.kind, TREE_NODE.kind]
    by_s = [(kind, index.events[kind].units[row].id) for kind, row, _ in ranked_events(s, kinds)]
    rank, eq3 = _ranked(hikes, index, "rank"), _ranked(hikes, index, "eq3")
    assert rank == by_s  # "rank": the events' own match alone, as before
    assert eq3 != rank and eq3[0] == (SUMMARY.kind, "sum:s1:0-2")  # the summary of 8 May leads
    assert rank.index((SUMMARY.kind, "sum:s1:0-2")) > 0  # which its words alone do not put first
    # the tree nodes' own reinforcement reached R: the May month node gains from the counters it holds
    nodes = index.events[TREE_NODE.kind]
    reinforced = event_robustness(index, TREE_NODE.kind, NOW + timedelta(days=400), tau_days=365, eta=2.0)
    index.held.clear()
    plain = event_robustness(index, TREE_NODE.kind, NOW + timedelta(days=400), tau_days=365, eta=2.0)
    assert len(nodes) and (reinforced > plain).all()


def test_an_empty_user_scores_no_events_and_retrieves_nothing(hikes: Memstrata) -> None:
    empty = MemoryIndex.load(hikes.store, user_id="nobody")
    scores = {k: np.zeros(0) for k in empty.events}
    fused = fused_events(empty, scores, list(empty.events), MAY_8, weights=_weights(), now=None)
    assert fused.keys() == scores.keys() and all(len(v) == 0 for v in fused.values())
    assert (
        hikes.retrieve(
            QUESTION,
            user_id="nobody",
            weights={"events": "eq3"},
        ).evidence
        == []
    )
