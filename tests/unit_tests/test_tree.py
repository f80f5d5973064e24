"""H-Mem's temporal-semantic tree: windows and thresholds, active levels, incremental and stale updates,
untimed turns, temporal hints, reinforcement (decay_eta), scope routing, windows in the evidence and the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLE, REPO, HashEmbeddings

from memstrata import Memstrata
from memstrata.context import Context
from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels import EventSummary, scope_table
from memstrata.memory.plan.temporal_hints import Offset, apply_offset, parse_hint, resolve
from memstrata.memory.query import Hit
from memstrata.memory.search.selection import window_first
from memstrata.memory.timeparse import resolve_relative
from memstrata.memory.tree import Forest, Item, active_levels, grow, tree_levels, window_key
from memstrata.memory.tree.persist import TreeUpdate, refresh
from memstrata.memory.tree.search import load_reinforcement, reinforcement_current, select_windows, turn_robustness
from memstrata.memory.tree.windows import level_for_span

MAY_8 = datetime(2023, 5, 8, 10)  # a Monday, ISO week 19


def _vec(angle_deg: float) -> np.ndarray:
    """A unit vector in the x-y plane at ``angle_deg`` degrees from the x axis: its cosine with it is cos(angle)."""
    a = np.radians(angle_deg)
    return np.array([np.cos(a), np.sin(a), 0.0])


def _cos(sim: float) -> float:
    return float(np.degrees(np.arccos(sim)))


# ---- windows, thresholds, active levels ------------------------------------------------------------
def test_each_level_has_its_window_and_a_node_joins_only_within_it_and_above_alpha() -> None:
    assert [window_key(lv, MAY_8) for lv in ("day", "week", "month", "year")] == [
        "2023-05-08",
        "2023-W19",
        "2023-05",
        "2023",
    ]
    assert [(lv.name, lv.alpha) for lv in tree_levels()] == [("week", 0.8), ("month", 0.7), ("year", 0.6)]
    f = Forest()
    f.add_leaf(Item("a", _vec(0), MAY_8))
    f.add_leaf(Item("b", _vec(_cos(0.85)), MAY_8 + timedelta(days=2)))  # same week, above 0.8: joins a
    f.add_leaf(Item("c", _vec(-_cos(0.75)), MAY_8 + timedelta(days=3)))  # same week, below 0.8: a new parent
    f.add_leaf(Item("d", _vec(0), MAY_8 + timedelta(days=7)))  # identical to a, next week: its own
    grow(f, tree_levels(), active=("day", "week"))
    weeks = {n.id: n.children for n in f.nodes.values()}
    assert weeks == {"tree:week:2023-W19:0": ["a", "b"], "tree:week:2023-W19:1": ["c"], "tree:week:2023-W20:0": ["d"]}
    assert all(n.level == "week" for n in f.nodes.values())  # month and year are not active yet


def test_a_threshold_schedule_changes_the_clustering() -> None:
    def weeks(alphas: tuple[float, float, float]) -> int:
        f = Forest()
        for i, angle in enumerate((0, 30, 60)):  # neighbours have cosine 0.87, the ends 0.5
            f.add_leaf(Item(f"s{i}", _vec(angle), MAY_8 + timedelta(hours=i)))
        grow(f, tree_levels(alphas), active=("day", "week"))
        return len(f.nodes)

    assert weeks((0.8, 0.7, 0.6)) == 1 and weeks((0.9, 0.8, 0.7)) == 3


def test_active_levels_follow_the_history_age() -> None:
    assert active_levels(timedelta(days=6)) == ("day", "week")
    assert active_levels(timedelta(days=7)) == active_levels(timedelta(days=30)) == ("day", "week", "month")
    assert active_levels(timedelta(days=31)) == ("day", "week", "month", "year")
    assert active_levels(None) == ("day", "week")
    for days, levels in ((3, {"week"}), (20, {"week", "month"}), (90, {"week", "month", "year"})):
        update = TreeUpdate("u", "c", Forest(), {}, {})
        for i, at in enumerate((MAY_8, MAY_8 + timedelta(days=days))):
            update.summaries[f"s{i}"] = EventSummary(
                user_id="u", id=f"s{i}", episode_id=f"ep:s{i}:0-1", session_id=str(i), text="x", timestamp=at
            )
            update.forest.add_leaf(Item(f"s{i}", _vec(0), at))
        update.grow(tree_levels())
        assert {n.level for n in update.forest.nodes.values()} == levels, days


# ---- stale recomputation, never a duplicate ------------------------------------------------------------
def _update_with(leaves: dict[str, tuple[float, datetime]]) -> TreeUpdate:
    update = TreeUpdate("u", "c", Forest(), {}, {})
    for sid, (angle, at) in leaves.items():
        update.summaries[sid] = EventSummary(
            user_id="u",
            id=sid,
            episode_id=f"ep:s{sid}:0-1",
            session_id="1",
            text=f"[{at:%d %B %Y}] Ann, Bo. Ann: note {sid} about Porto and {int(angle)} boats.",
            turn_ids=[f"{sid}:t0"],
            timestamp=at,
        )
        update.forest.add_leaf(Item(sid, _vec(angle), at))
    return update


def test_a_node_whose_children_changed_is_stale_and_recomputed_in_place() -> None:
    update = _update_with({"a": (0, MAY_8), "z": (90, MAY_8 + timedelta(days=40))})
    for node_id in update.grow(tree_levels()):
        refresh(update, node_id, f"text of {node_id}", method="extractive", leaves_per_node=3)
    before = {n.id: list(n.children) for n in update.forest.nodes.values()}
    assert not update.stale()
    # a new leaf in a's week, similar to a: a's week and its ancestors go stale, z's branch does not
    update.summaries["b"] = EventSummary(
        user_id="u",
        id="b",
        episode_id="ep:sb:0-1",
        session_id="1",
        text="Bo: the boats left.",
        turn_ids=["b:t0"],
        timestamp=MAY_8,
    )
    update.forest.add_leaf(Item("b", _vec(_cos(0.9)), MAY_8 + timedelta(hours=3)))
    stale = update.grow(tree_levels())
    week_a = update.forest.parent["a"]
    assert stale == [week_a, *update.forest.ancestors(week_a)]
    assert update.forest.parent["b"] == week_a and set(update.forest.nodes) == set(before)  # no new node
    assert not any(
        update.forest.nodes[n].stale
        for n in [update.forest.parent["z"], *update.forest.ancestors(update.forest.parent["z"])]
    )
    unit = refresh(update, week_a, "new text", method="extractive", leaves_per_node=3)
    assert unit.children == ["a", "b"] and unit.leaves == 2 and set(unit.turn_ids) == {"a:t0", "b:t0"}


def test_a_joined_member_is_reinforced() -> None:
    f = Forest()
    f.add_leaf(Item("a", _vec(0), MAY_8))
    first = grow(f, tree_levels(), active=("day", "week"))
    f.add_leaf(Item("b", _vec(_cos(0.95)), MAY_8 + timedelta(days=1)))
    second = grow(f, tree_levels(), active=("day", "week"))
    assert [(r.unit_id, r.at) for r in first] == [("a", MAY_8)]
    assert [(r.unit_id, r.at) for r in second] == [("b", MAY_8 + timedelta(days=1)), ("a", MAY_8 + timedelta(days=1))]


# ---- through the store: incremental ingestion, untimed turns -----------------------------------------
def _messages(session_range: range) -> dict:
    data = json.loads(EXAMPLE.read_text())
    days = sorted({m["timestamp"][:10] for m in data["messages"]})
    keep = {days[i] for i in session_range}
    return {
        "conversation_id": data["conversation_id"],
        "messages": [m for m in data["messages"] if m["timestamp"][:10] in keep],
    }


def _tree(mem: Memstrata, user: str = "u") -> dict[str, dict]:
    return {r.unit_id: r.payload for r in mem.store.get("tree_node", user_id=user)}


def test_appending_a_session_changes_only_its_windows_and_their_ancestors(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest(_messages(range(2)), user_id="u", close=True)
    before = _tree(mem)
    stats = mem.ingest(_messages(range(3)), user_id="u", close=True)
    after = _tree(mem)
    new_leaves = {r.unit_id for r in mem.store.get("summary", user_id="u") if r.payload["session_id"] == "3"}
    parents = {c: n for n, p in after.items() for c in p["children"]}
    touched = {a for leaf in new_leaves for a in _chain(parents, leaf)}
    changed = {n for n in after if n not in before or after[n] != before[n]}
    assert new_leaves and changed == touched
    assert set(before) <= set(after)  # nothing was dropped or renamed
    assert sorted(c for p in after.values() if p["level"] == "week" for c in p["children"]) == sorted(
        r.unit_id for r in mem.store.get("summary", user_id="u")
    )  # every leaf placed exactly once
    assert sum(stats["tree_nodes_written"].values()) == len(touched)
    edges = mem.store.edges.get("u", rel="child_of")
    assert {(e.src, e.dst) for e in edges} == set(parents.items())
    assert mem.ingest(_messages(range(3)), user_id="u")["tree_nodes_written"] == {"week": 0, "month": 0, "year": 0}
    assert _tree(mem) == after


def _chain(parents: dict[str, str], leaf: str) -> list[str]:
    out, node = [], parents.get(leaf)
    while node is not None:
        out.append(node)
        node = parents.get(node)
    return out


def test_untimed_turns_fall_back_to_session_order_and_the_tree_says_so(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    messages = [{"speaker": m["speaker"], "text": m["text"]} for m in _messages(range(3))["messages"]]
    mem.ingest({"conversation_id": "plain", "messages": messages}, user_id="u", stamp_untimed=False)
    nodes = list(_tree(mem).values())
    assert nodes and {n["level"] for n in nodes} == {"week"}  # no age: day and week only
    assert all(n["window"] == "untimed" and not n["timed"] and n["timestamp"] is None for n in nodes)
    assert all("no timestamps; session order" in n["text"] for n in nodes)


# ---- temporal hints ------------------------------------------------------------------------------------
def test_hints_parse_into_windows_or_into_an_offset_from_an_anchor() -> None:
    now = datetime(2023, 10, 20, 14)  # a Friday
    week = parse_hint("What did Ann do last week?", now=now)
    assert (week.interval.start, week.interval.end.date(), week.granularity) == (
        datetime(2023, 10, 9),
        datetime(2023, 10, 15).date(),
        "week",
    )
    year = parse_hint("Where did they travel in 2022?", now=now)
    assert (year.interval.start, year.interval.end.date(), year.granularity) == (
        datetime(2022, 1, 1),
        datetime(2022, 12, 31).date(),
        "year",
    )
    june = parse_hint("When did Melanie go camping in June?", now=now)
    assert june.interval.start == datetime(2023, 6, 1) and june.granularity == "month"
    assert parse_hint("What happened in May 2023?", now=None).interval.start == datetime(2023, 5, 1)
    assert parse_hint("May I ask what Ann likes?", now=now) is None
    anchored = parse_hint("What did Ann do the weekend before the concert?", now=now)
    assert anchored.offset == Offset(direction=-1, unit="weekend", count=1) and anchored.anchor == "the concert"
    assert anchored.interval is None  # the concert has to be dated from memory
    dated = resolve(anchored, lambda anchor: datetime(2023, 6, 14) if anchor == "the concert" else None)
    assert (dated.start, dated.end.date()) == (datetime(2023, 6, 10), datetime(2023, 6, 11).date())


def test_a_question_counting_the_time_between_two_events_names_no_window() -> None:
    """LongMemEval's "How many months before my anniversary did Rachel get engaged?" was read as "a month before
    <my anniversary did Rachel get engaged>", dated to an unrelated June, whose turns then filled the context.
    """
    now = datetime(2023, 7, 7)
    assert parse_hint("How many months before my anniversary did Rachel get engaged?", now=now) is None
    assert parse_hint("How many days after the wedding did I buy the car?", now=now) is None
    assert parse_hint("how long after the move did I start?", now=now) is None
    kept = parse_hint("What did Ann do two days after the wedding?", now=now)
    assert kept.offset == Offset(direction=1, unit="day", count=2) and kept.anchor == "the wedding"
    two_days = parse_hint("two days after the wedding", now=now)
    assert two_days.offset == Offset(1, "day", 2) and two_days.anchor == "the wedding"
    by_date = parse_hint("What did Maria do the weekend before April 10, 2023?", now=now)
    assert by_date.interval.start == datetime(2023, 4, 8)  # a dated anchor resolves at once
    assert apply_offset(Offset(-1, "week"), datetime(2023, 5, 10)).start == datetime(2023, 5, 1)


@pytest.mark.parametrize(
    ("question", "now", "first", "last"),
    [
        ("What state did Joanna visit in summer 2021?", None, "2021-06-01", "2021-08-31"),
        ("What happened towards the end of summer 2023?", None, "2023-08-01", "2023-08-31"),
        ("What did Ann do in the fall of 2020?", None, "2020-09-01", "2020-11-30"),
        ("Where did we go in the winter of 2023?", None, "2022-12-01", "2023-02-28"),  # named by its January
        ("What did we plant in early spring 2022?", None, "2022-03-01", "2022-03-31"),
        ("What did we do last summer?", datetime(2023, 10, 15), "2023-06-01", "2023-08-31"),  # the latest one over
        ("What did we do last summer?", datetime(2023, 7, 10), "2022-06-01", "2022-08-31"),  # this one is not over
        ("What happened this summer?", datetime(2023, 7, 10), "2023-06-01", "2023-08-31"),
    ],
)
def test_a_season_is_its_months(question, now, first, last) -> None:
    hint = parse_hint(question, now=now)
    assert (hint.interval.start.date().isoformat(), hint.interval.end.date().isoformat()) == (first, last)
    assert level_for_span(hint.interval.start, hint.interval.end) == "month"  # searched as months, not a year


def test_season_words_that_name_no_time_are_no_hint() -> None:
    for question in (
        "What did James enjoy doing on cold winter days?",
        "What are Caroline's plans for the summer?",
        "When did Evan's son fall off his bike?",
    ):
        assert parse_hint(question, now=datetime(2023, 10, 15)) is None
    year = parse_hint("Where did they travel in 2022?", now=None)
    assert level_for_span(year.interval.start, year.interval.end) == "year"


@pytest.mark.parametrize(
    ("question", "day"),
    [
        ("What did Ann do on 5/8/2023?", "2023-05-08"),  # month first, as the timestamps' parser reads it
        ("What did Ann do on 25/8/2023?", "2023-08-25"),  # 25 cannot be a month
        ("What did Ann do on 8.5.2023?", "2023-05-08"),  # dotted dates are day first
        ("What did Ann do on 2023/05/08?", "2023-05-08"),
        ("What did Ann do on 5/8/23?", "2023-05-08"),
    ],
)
def test_numeric_dates_are_days_not_years(question, day) -> None:
    hint = parse_hint(question, now=None)
    assert (hint.granularity, hint.interval.start.date().isoformat()) == ("day", day)


def test_colloquial_relative_hints() -> None:
    now = datetime(2023, 5, 10, 9)  # a Wednesday
    before = parse_hint("What did Ann do the day before yesterday?", now=now)
    assert before.anchor is None and before.interval.start == datetime(2023, 5, 8)  # not "a day before <event>"
    assert parse_hint("What did Ann buy a couple days ago?", now=now).interval.start == datetime(2023, 5, 8)
    assert parse_hint("Where was Ann a few weeks back?", now=now).interval.start == datetime(2023, 4, 17)


def test_a_weekend_is_the_same_days_in_a_turn_and_in_a_question() -> None:
    said = datetime(2023, 5, 10, 9)  # a Wednesday: last weekend was 6-7 May
    told = resolve_relative("last weekend", said)
    asked = parse_hint("What did Ann do last weekend?", now=said).interval
    assert told.date() == asked.start.date() == datetime(2023, 5, 6).date()
    assert asked.end.date() == datetime(2023, 5, 7).date()
    sunday = datetime(2023, 5, 14, 9)  # the weekend under way is "this weekend", not "last weekend"
    assert resolve_relative("last weekend", sunday).date() == datetime(2023, 5, 6).date()
    assert resolve_relative("over the weekend", sunday).date() == datetime(2023, 5, 13).date()
    assert resolve_relative("over the weekend", said).date() == datetime(2023, 5, 6).date()
    assert resolve_relative("this weekend", said).date() == datetime(2023, 5, 13).date()


# ---- retrieval: scopes, windows, reinforcement --------------------------------------------------------
@pytest.fixture
def demo(data_dir) -> Memstrata:
    mem = Memstrata(path=data_dir, embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="demo", close=True)
    return mem


def test_scopes_route_short_to_leaves_and_long_and_mixed_to_the_tree() -> None:
    table = scope_table()
    assert "tree_node" not in table["Short"] and "summary" in table["Short"] and "turn" in table["Short"]
    assert "tree_node" in table["Long"] and "turn" not in table["Long"]
    assert {"tree_node", "turn", "summary"} <= set(table["Mixed"])


def test_evidence_found_through_a_tree_node_names_that_nodes_window(demo: Memstrata) -> None:
    only_tree = {scope: ["tree_node"] for scope in ("Short", "Long", "Mixed")}
    result = demo.retrieve(
        "How did Priya's life change?",
        user_id="demo",
        context_budget=800,
        retrieval={"scope_kinds": only_tree},
    )
    holds: dict[str, set[str]] = {}  # "<level> <window>" -> the turns its nodes reach
    for r in demo.store.get("tree_node", user_id="demo"):
        holds.setdefault(f"{r.payload['level']} {r.payload['window']}", set()).update(r.payload["turn_ids"])
    found = [e for e in result.evidence if e.found_by == "tree_node"]
    assert found and all(e.turn_id in holds.get(e.window, ()) for e in found)  # the window of the node that found it


def test_a_hinted_query_searches_its_windows_and_each_evidence_names_scope_and_window(demo: Memstrata) -> None:
    result = demo.retrieve("What did Tom say in April 2024?", user_id="demo", context_budget=300)
    assert result.trace["windows"]["q0"] == [
        {
            "level": "month",
            "window": "2024-04",
            "nodes": sorted(
                r.unit_id for r in demo.store.get("tree_node", user_id="demo") if r.payload["window"] == "2024-04"
            ),
            "events": 2,
        }
    ]
    april = [e for e in result.evidence if e.turn_id.startswith("s2:")]
    assert april and all(e.scope == "Short" and e.window == "month 2024-04" for e in april)
    assert all(e.window != "month 2024-04" for e in result.evidence if not e.turn_id.startswith("s2:"))
    assert all(e.score_parts["temporal"] == 1.0 for e in april)
    anchored = demo.retrieve("What did Priya do the week before the Brighton half marathon?", user_id="demo")
    assert anchored.trace["windows"]["q0"][0]["level"] == "week"  # dated through the memory, then searched


def test_a_turn_telling_of_the_hinted_day_is_inside_its_window_though_said_later(data_dir) -> None:
    mem = Memstrata(path=data_dir, embeddings=HashEmbeddings())
    mem.ingest(
        {
            "conversation_id": "c",
            "messages": [
                {"speaker": "Dave", "text": "Hi Calvin, how was the week?", "timestamp": "2023-10-04T14:40:00"},
                {
                    "speaker": "Calvin",
                    "text": "Yesterday I met some incredible artists in Boston.",
                    "timestamp": "2023-10-04T14:44:00",
                },
                {
                    "speaker": "Dave",
                    "text": "Today I fixed the old car in the garage.",
                    "timestamp": "2023-10-04T14:46:00",
                },
            ],
        },
        user_id="u",
    )
    result = mem.retrieve("Which city was Calvin in on October 3, 2023?", user_id="u", context_budget=400)
    assert result.trace["windows"]["q0"][0]["window"] == "2023-10-03"
    by_text = {e.text: e for e in result.evidence}
    told = by_text["Yesterday I met some incredible artists in Boston."]
    assert told.window == "day 2023-10-03" and told.score_parts["temporal"] == 1.0  # the fact dates it 3 October
    said_that_day = by_text["Today I fixed the old car in the garage."]
    assert said_that_day.window == "" and said_that_day.score_parts["temporal"] < 1.0


def test_a_window_holding_few_turns_brings_its_best_first_though_others_match_better(data_dir) -> None:
    """Many turns about meetings said on other days, one turn telling of the hinted day in other words."""
    messages = [
        {
            "speaker": "Sam" if i % 2 else "Evan",
            "text": f"Sam went to the {topic} meeting and did the "
            f"{topic} meeting work with Sam's {topic} meeting group.",
            "timestamp": (datetime(2023, 11, 1, 9) + timedelta(days=i % 3, minutes=i)).isoformat(),
        }
        for i, topic in enumerate(
            [
                "budget",
                "planning",
                "design",
                "review",
                "hiring",
                "sales",
                "legal",
                "board",
                "team",
                "product",
                "research",
                "support",
            ]
            * 2
        )
    ]
    messages.append(
        {"speaker": "Sam", "text": "Yesterday I tried a weight class downtown.", "timestamp": "2023-12-05T10:00:00"}
    )
    mem = Memstrata(path=data_dir, embeddings=HashEmbeddings())
    mem.ingest({"conversation_id": "c", "messages": messages}, user_id="u")
    question, told = "What did Sam do at the meeting on December 4, 2023?", "Yesterday I tried a weight class downtown."
    alone = mem.retrieve(
        question,
        user_id="u",
        context_budget=120,
        retrieval={"window_turns": 0},
    )
    assert alone.evidence[0].text != told  # on scores alone the meetings come first, and may fill the budget
    found = mem.retrieve(question, user_id="u", context_budget=120)
    assert found.evidence[0].text == told and found.evidence[0].window == "day 2023-12-04"


def test_window_first_moves_only_the_best_in_window_hits_up() -> None:
    def hit(name: str, score: float, temporal: float) -> Hit:
        return Hit(kind="turn", unit_id=name, conversation_id="c", score=score, parts={"temporal": temporal})

    ranked = [hit("a", 0.9, 0.4), hit("b", 0.8, 1.0), hit("c", 0.7, 0.2), hit("d", 0.6, 1.0), hit("e", 0.5, 1.0)]
    assert [h.unit_id for h in window_first(ranked, 2)] == ["b", "d", "a", "c", "e"]
    assert window_first(ranked, 0) == ranked
    assert window_first([hit("x", 0.3, 0.0)], 3)[0].unit_id == "x"  # a query without a hint: nothing moves


def test_reinforcement_counts_live_in_the_counters_and_decay_eta_changes_robustness(demo: Memstrata) -> None:
    counters = demo.store.counters.all("demo", kind="summary")
    assert counters and all(c.reinforcement_count >= 1 and c.recall_count == 0 for c in counters)
    index = MemoryIndex.load(demo.store, user_id="demo")
    load_reinforcement(index, demo.store.counters, "demo")
    later = index.latest + timedelta(days=400)
    plain = turn_robustness(index, later, tau_days=365, eta=0.0)
    reinforced = turn_robustness(index, later, tau_days=365, eta=2.0)
    assert (reinforced > plain + 1e-6).all()  # every turn sits under a consolidated summary
    hits = [
        demo.retrieve("Where does Priya work?", user_id="demo", context_budget=200, weights={"eta": eta}, now=later)
        for eta in (0.0, 2.0)
    ]
    robust = [{e.turn_id: e.score_parts["robustness"] for e in r.evidence} for r in hits]
    shared = robust[0].keys() & robust[1].keys()
    assert shared and all(robust[1][t] > robust[0][t] for t in shared)
    assert not select_windows(index, None)


def test_a_snapshot_reads_again_only_the_reinforcement_that_moved(data_dir, monkeypatch) -> None:
    mem = Memstrata(path=data_dir, embeddings=HashEmbeddings())
    messages = json.loads(EXAMPLE.read_text())["messages"]
    for conv in ("a", "b"):
        mem.ingest({"conversation_id": conv, "messages": messages}, user_id="u")
    counters = mem.store.counters
    index = MemoryIndex.load(mem.store, user_id="u")
    load_reinforcement(index, counters, "u")
    later = index.latest + timedelta(days=400)
    before = turn_robustness(index, later, tau_days=365, eta=2.0)
    reads: list[str | None] = []
    read = counters.all
    monkeypatch.setattr(counters, "all", lambda user, **kw: reads.append(kw.get("conversation_id")) or read(user, **kw))
    assert reinforcement_current(index, counters, "u")
    b_summary = next(c for c in read("u", kind="summary") if c.conversation_id == "b")
    counters.reinforce("u", [("b", "summary", b_summary.unit_id)], at=later.timestamp())  # consolidated again
    assert not reinforcement_current(index, counters, "u")
    load_reinforcement(index, counters, "u")
    assert reads == ["b"] and reinforcement_current(index, counters, "u")
    after = turn_robustness(index, later, tau_days=365, eta=2.0)
    fresh = MemoryIndex.build(mem.store, "u", None)
    load_reinforcement(fresh, counters, "u")  # a full read gives the same
    assert np.array_equal(after, turn_robustness(fresh, later, tau_days=365, eta=2.0))
    assert (after > before).any()  # the summary's turns gained robustness, and only turns of b changed
    assert all(t.conversation_id == "b" for t, a, b in zip(index.turns, after, before, strict=True) if a != b)


# ---- seeing it -----------------------------------------------------------------------------------------
@pytest.mark.integration
def test_inspect_draws_the_tree_and_lists_a_window(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memstrata", *args, "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=600,
            env=env,
        )

    assert run("ingest", str(EXAMPLE), "--user", "demo").returncode == 0
    tree = run("inspect", "--user", "demo", "--tree")
    assert tree.returncode == 0, tree.stderr[-2000:]
    for label in ("year 2024", "month 2024-04", "week 2024-W15", "day 2024-04-14", "sum:s2:0-5"):
        assert label in tree.stdout, label
    window = run("inspect", "--user", "demo", "--window", "2024-04")
    assert window.returncode == 0 and "tree:month:2024-04:0" in window.stdout and "sum:s2:0-5" in window.stdout
    assert "sum:s1:0-2" not in window.stdout
    bad = run("inspect", "--user", "demo", "--window", "April")
    assert bad.returncode != 0 and "2023-W19" in bad.stdout + bad.stderr


# ---- consolidation: extractive offline, the model's with a fallback and a budget --------------------------
def _two_stale_weeks() -> TreeUpdate:
    update = _update_with({"a": (0, MAY_8), "b": (90, MAY_8 + timedelta(days=7))})
    update.grow(tree_levels())
    return update


def test_offline_consolidation_keeps_details_within_the_cap() -> None:
    from memstrata.memory.tree.persist import offline_text

    update = _two_stale_weeks()
    week = update.forest.parent["a"]
    text = offline_text(update, week, {"week": 40, "month": 40, "year": 40}, lambda s: len(s.split()))
    assert text.startswith("[week 2023-W19 · 8 May 2023 – 14 May 2023 · 1 events]")
    assert "Porto" in text and "8 May 2023" in text and len(text.split()) <= 40
    tight = offline_text(update, week, {"week": 16, "month": 16, "year": 16}, lambda s: len(s.split()))
    assert len(tight.split()) <= 16 and tight != text


def test_model_consolidation_has_a_schema_a_fallback_and_a_budget() -> None:
    import asyncio

    from memstrata.nodes.ingest.tree import _recompute
    from memstrata.runtime.step import Step
    from memstrata.testing import ScriptedChatModel

    update = _two_stale_weeks()
    weeks = [n for n in update.stale() if update.forest.nodes[n].level == "week"]
    model = ScriptedChatModel(script=[{"summary": "Ann noted Porto on 8 May 2023."}], default="not json at all")
    ctx = Context(user_id="u", model=model, tree={"llm_calls": 2}, llm_retries=0)
    calls = {"left": ctx.tree.llm_calls}
    step = Step.for_ingestion(ctx)
    first, second = (asyncio.run(_recompute(step, ctx, update, n, calls)) for n in weeks)
    assert first.method == "llm" and first.text.endswith("Ann noted Porto on 8 May 2023.")
    assert first.text.startswith("[week 2023-W19")
    assert second.method == "extractive" and "Porto" in second.text  # garbage: the extractive text instead
    assert calls["left"] == 0
    third = asyncio.run(_recompute(step, ctx, update, update.stale()[-1], calls))
    assert third.method == "extractive"  # the budget is spent: no further call
    assert "long-term index" in model.calls[0][0].content


def test_a_vanished_leaf_is_pruned_and_an_emptied_node_removed() -> None:
    from memstrata.memory.tree import prune

    f = Forest()
    f.add_leaf(Item("a", _vec(0), MAY_8))
    f.add_leaf(Item("b", _vec(_cos(0.9)), MAY_8 + timedelta(hours=1)))
    f.add_leaf(Item("z", _vec(90), MAY_8 + timedelta(days=20)))
    grow(f, tree_levels(), active=("day", "week", "month"))
    for node in f.nodes.values():
        node.stale = False
    week_a, week_z = f.parent["a"], f.parent["z"]
    del f.leaves["b"], f.leaves["z"]  # their episodes were rebuilt away
    removed = prune(f)
    assert f.nodes[week_a].children == ["a"] and f.nodes[week_a].stale
    assert week_z in removed and week_z not in f.nodes and "z" not in f.parent
    assert "b" not in f.parent  # its node stays, but it is nobody's child: save_tree deletes its edge
    assert all(c in f.leaves or c in f.nodes for n in f.nodes.values() for c in n.children)
