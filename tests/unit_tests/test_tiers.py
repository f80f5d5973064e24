"""HMO's tiers: importance, Eq. 5, the drift gate, tiered search, lazy scoring, promotion, isolation and forget.

The tiered search runs on users past ``scale.max_turns`` when ``tiers`` is on; these tests turn it on and set
that threshold low, so the bundled
example (36 turns, three sessions, six episodes) is a "large" user whose tiers are one session (recent) plus one
pivotal record (the cache) and two more (the buffer).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLE, HashEmbeddings, assert_store_ok
from hypothesis import given
from hypothesis import strategies as st

from memstrata import Memstrata
from memstrata.memory.tiers.assign import ARCHIVE, BUFFER, CACHE, Record, assign_tiers, place_recalled
from memstrata.memory.tiers.importance import offline_importance, signals
from memstrata.memory.tiers.priority import PriorityWeights, decay, drift, priority, priority_at

SMALL = {"scale.max_turns": 5, "tiers": True, "tier.recent_sessions": 1, "tier.pivotal": 1, "tier.buffer": 2}


@pytest.fixture
def mem(tmp_path: Path) -> Any:
    memory = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    yield memory
    memory.close()


def _tiers(mem: Memstrata, user: str) -> dict[str, str | None]:
    return {c.unit_id: c.tier for c in mem.store.counters.all(user, kind="summary") if c.session_key}


# ---- the pure parts --------------------------------------------------------------------------------------------
@given(st.integers(0, 50), st.integers(1, 50), st.floats(0.1, 400), st.floats(10, 365))  # no underflow to 0
def test_eq5_more_recalls_decay_slower_and_score_higher(n: int, more: int, age: float, tau: float) -> None:
    assert decay(n + more, age, tau_days=tau) >= decay(n, age, tau_days=tau)
    assert decay(n, age, tau_days=tau) > decay(n, age + 10, tau_days=tau)
    w = PriorityWeights(tau_days=tau)
    assert priority(6, 0.3, recalls=n + more, age_days=age, weights=w) > priority(
        6, 0.3, recalls=n, age_days=age, weights=w
    )


@given(st.integers(0, 50), st.integers(1, 10), st.floats(0.0, 1.0))
def test_eq5_the_recall_gain_multiplies_any_base_alike_and_has_no_weight_of_its_own(
    n: int, importance: int, align: float
) -> None:
    w = PriorityWeights()
    assert not hasattr(w, "gamma")  # HMO names three hyperparameters: alpha, beta and tau
    fresh = priority(importance, align, recalls=0, age_days=0, weights=w)
    assert fresh == pytest.approx(w.alpha * importance / 10 + w.beta * align)
    assert priority(importance, align, recalls=n, age_days=0, weights=w) == pytest.approx(fresh * (1 + math.log1p(n)))


@given(st.integers(0, 20), st.floats(0, 200), st.floats(0.5, 200), st.floats(10, 365))
def test_a_stored_priority_carried_to_a_later_time_equals_scoring_it_then(
    n: int, age: float, later: float, tau: float
) -> None:
    w, day = PriorityWeights(tau_days=tau), 86400.0
    stored = priority(7, 0.4, recalls=n, age_days=age, weights=w)
    carried = priority_at(stored, scored_at=0.0, now=later * day, recalls=n, tau_days=tau)
    assert carried == pytest.approx(priority(7, 0.4, recalls=n, age_days=age + later, weights=w), rel=1e-9)
    assert carried < stored  # so an old score never outranks the same record scored now


def test_eq5_importance_and_alignment_raise_priority_and_negative_alignment_counts_as_none() -> None:
    w = PriorityWeights()
    assert priority(9, 0.2, recalls=0, age_days=5, weights=w) > priority(3, 0.2, recalls=0, age_days=5, weights=w)
    assert priority(5, 0.8, recalls=0, age_days=5, weights=w) > priority(5, 0.1, recalls=0, age_days=5, weights=w)
    assert priority(5, -0.9, recalls=0, age_days=5, weights=w) == priority(5, 0.0, recalls=0, age_days=5, weights=w)


def test_offline_importance_ranks_milestones_over_small_talk() -> None:
    milestone = signals(
        [
            "Priya: I signed the lease in Lisbon on 3 March, I'm moving at the end of April!",
            "Tom: I'm so proud of you, we will visit in May.",
        ],
        novelty=0.7,
        speakers=["Priya", "Tom"],
    )
    small_talk = signals(["Priya: hi!", "Tom: hey, thanks", "Priya: ok"], novelty=0.1, speakers=["Priya", "Tom"])
    high, low = offline_importance(milestone), offline_importance(small_talk)
    assert 1 <= low < 3 < 5 < high <= 10
    assert milestone.entities > 0 and milestone.dates > 0 and milestone.plans > 0 and small_talk.filler == 1.0


def test_drift_is_the_cosine_distance_from_the_anchor() -> None:
    a = np.array([1.0, 0.0])
    assert drift(a, a) == pytest.approx(0.0) and drift(a, np.array([0.0, 1.0])) == pytest.approx(1.0)
    assert drift(a, None) == 1.0 and drift(None, a) == 0.0


def test_tiers_hold_recent_sessions_then_pivotal_then_buffer_and_a_used_record_is_promoted() -> None:
    records = [
        Record(("c", "summary", f"r{i}"), f"c/{i}", float(i), priority=p)
        for i, p in enumerate([0.9, 0.2, 0.5, 0.4, 0.1])
    ]
    tiers = assign_tiers(records, recent_sessions=1, pivotal=1, buffer=2)
    assert tiers == {
        ("c", "summary", "r4"): CACHE,
        ("c", "summary", "r0"): CACHE,
        ("c", "summary", "r2"): BUFFER,
        ("c", "summary", "r3"): BUFFER,
        ("c", "summary", "r1"): ARCHIVE,
    }
    active = [r for r in records if tiers[r.item] != ARCHIVE]
    used = Record(("c", "summary", "r1"), "c/1", 1.0, priority=0.45)  # scored lazily: now above r3's 0.4
    moves = place_recalled(active, [used], tiers, recent_sessions=1, pivotal=1, buffer=2)
    assert moves == {("c", "summary", "r1"): BUFFER, ("c", "summary", "r3"): ARCHIVE}
    kept = place_recalled(
        active, [Record(used.item, "c/1", 1.0, priority=0.3)], tiers, recent_sessions=1, pivotal=1, buffer=2
    )
    assert kept == {}  # ranked out: it stays in the archive, nothing is displaced


# ---- ingestion ---------------------------------------------------------------------------------------------------
def test_ingestion_scores_every_closed_episode_and_tiers_them(mem: Memstrata) -> None:
    stats = mem.ingest(EXAMPLE, user_id="ann", close=True, **SMALL)
    assert stats["records_scored"] == mem.store.count("summary", user_id="ann") > 0
    rows = list(mem.store.counters.all("ann", kind="summary"))
    assert all(c.importance is not None and 1 <= c.importance <= 10 and c.priority is not None for c in rows)
    tiers = _tiers(mem, "ann")
    assert sorted(t or ARCHIVE for t in tiers.values()).count(BUFFER) == 2
    latest = max(c.session_key for c in rows)
    assert all(tiers[c.unit_id] == CACHE for c in rows if c.session_key == latest)  # the recent session
    assert sum(1 for t in tiers.values() if t == CACHE) == sum(c.session_key == latest for c in rows) + 1
    assert_store_ok(mem.store, "ann")


def test_an_open_episode_is_no_record_until_it_closes(mem: Memstrata) -> None:
    mem.ingest([{"speaker": "Ann", "text": "I adopted a grey cat named Miso."}], user_id="ann", **SMALL)
    assert mem.store.counters.active("ann") == []  # the open tail is searchable, not yet a record
    mem.ingest([{"speaker": "Ann", "text": "She loves boxes."}], user_id="ann", close=True, **SMALL)
    assert [c.tier for c in mem.store.counters.active("ann")] == [CACHE]


def test_the_drift_gate_reranks_the_active_tiers_only_past_its_threshold(mem: Memstrata) -> None:
    from memstrata.memory.tiers.anchor import read_anchor

    first = mem.ingest(EXAMPLE, user_id="ann", close=True, **SMALL)
    assert first["tiers_reranked"] is True and set(read_anchor(mem.store, "ann")) == {"priya-tom"}  # the first anchor
    before = {c.unit_id: c.priority for c in mem.store.counters.active("ann")}
    more = [
        {
            "speaker": "Priya",
            "text": "Work at Tidewater Labs is going well, I lead the data team now.",
            "timestamp": "2024-06-01T10:00:00",
        }
    ]
    calm = mem.ingest(
        more,
        user_id="ann",
        conversation_id="priya-tom",
        close=True,
        **SMALL,
        tier={"drift": 2.0},
    )
    assert calm["tiers_reranked"] is False and calm["persona_drift"] <= 2.0
    after = {c.unit_id: c.priority for c in mem.store.counters.active("ann")}
    assert all(after[k] == p for k, p in before.items() if k in after)  # stored priorities, untouched
    again = [
        {
            "speaker": "Priya",
            "text": "I quit and now I surf every morning in Ericeira.",
            "timestamp": "2024-07-01T10:00:00",
        }
    ]
    moved = mem.ingest(
        again,
        user_id="ann",
        conversation_id="priya-tom",
        close=True,
        **SMALL,
        tier={"drift": 0.0},
    )
    assert moved["tiers_reranked"] is True and moved["persona_drift"] > 0.0
    rescored = {c.unit_id: (c.priority, c.scored_at) for c in mem.store.counters.active("ann")}
    assert any(rescored[k][0] != p for k, p in after.items() if k in rescored)
    assert_store_ok(mem.store, "ann")


def test_with_a_model_importance_is_the_models_score_and_garbage_falls_back(tmp_path: Path) -> None:
    from memstrata.prompts import PROMPTS
    from memstrata.testing import ScriptedChatModel

    def reply(messages: list[Any]) -> Any:
        system, user = str(messages[0].content), str(messages[1].content)
        if system.startswith(PROMPTS["IMPORTANCE_PROMPT"][:40]):
            n = user.count("<record index=")
            return {"scores": [{"index": i, "score": 9} for i in range(n)]}
        return "no structured reply"

    model = ScriptedChatModel(default=reply)
    mem = Memstrata(path=tmp_path / "llm", embeddings=HashEmbeddings(), model=model)
    stats = mem.ingest(
        EXAMPLE,
        user_id="ann",
        close=True,
        **SMALL,
        tier={"importance_batch": 4},
    )
    rows = mem.store.counters.all("ann", kind="summary")
    assert rows and all(c.importance == 9.0 for c in rows) and stats["importance_fallbacks"] == 0
    assert stats["llm"]["importance"]["calls"] == -(-len(rows) // 4)  # one call per batch of four
    bad = Memstrata(
        path=tmp_path / "bad",
        embeddings=HashEmbeddings(),
        model=ScriptedChatModel(default=lambda m: {"scores": [{"index": 99, "score": 3}]}),
    )
    stats = bad.ingest(EXAMPLE, user_id="ann", close=True, **SMALL)
    rows = bad.store.counters.all("ann", kind="summary")
    assert stats["importance_fallbacks"] == len(rows) and all(c.importance != 3 for c in rows)  # the offline scores
    mem.close()
    bad.close()


# ---- retrieval ---------------------------------------------------------------------------------------------------
def test_a_query_searches_the_cache_then_the_buffer_then_the_archive_and_the_trace_says_so(mem: Memstrata) -> None:
    mem.ingest(EXAMPLE, user_id="ann", close=True, **SMALL)
    hard = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", **SMALL)
    steps = hard.trace["tiers"]["steps"]
    assert [s["tier"] for s in steps] == list(range(1, len(steps) + 1))  # never skips a tier, never goes back
    assert hard.trace["tiers"]["answered"] == steps[-1]["tier"]
    assert all(s["deeper"] for s in steps[:-1]) and not steps[-1]["deeper"]
    assert all(s["seconds"] >= 0 and s["turns_searched"] > 0 and s["why"] for s in steps)
    assert [s["turns_searched"] for s in steps] == sorted(s["turns_searched"] for s in steps)
    assert "Brighton" in hard.context
    whole = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", **{**SMALL, "tiers": False})
    assert whole.trace["tiers"] is None and "Brighton" in whole.context
    small = mem.retrieve("Where does Priya work?", user_id="ann")  # below the threshold: no tiers
    assert small.trace["tiers"] is None


def test_use_counts_recalls_scores_the_archive_lazily_and_promotes(mem: Memstrata) -> None:
    mem.ingest(EXAMPLE, user_id="ann", close=True, **SMALL)
    archive = {c.unit_id: c for c in mem.store.counters.all("ann", kind="summary") if not c.tier}
    assert archive
    result = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", **SMALL)
    use = result.trace["tiers"]["use"]
    assert use["recalled"] >= 1
    after = {c.unit_id: c for c in mem.store.counters.all("ann", kind="summary")}
    used = [k for k, c in after.items() if c.recall_count]
    assert len(used) == use["recalled"]
    touched_archive = [k for k in archive if after[k].recall_count]
    untouched = [k for k in archive if not after[k].recall_count]
    assert all(after[k].priority == archive[k].priority for k in untouched)  # never scored while unused
    assert all(after[k].priority != archive[k].priority for k in touched_archive)  # scored when used
    assert use["scored_lazily"] == len(touched_archive)
    assert sum(1 for c in after.values() if c.tier == BUFFER) == 2  # promotion displaces, sizes hold
    assert use["promoted"] == use["demoted"] or use["promoted"] == 0
    assert_store_ok(mem.store, "ann")


def test_a_new_user_with_tiers_on_is_answered_before_and_after_the_first_write(mem: Memstrata) -> None:
    empty = mem.retrieve("What is the cat called?", user_id="new", **SMALL)
    assert empty.evidence == [] and empty.trace["tiers"] is None
    mem.ingest([{"speaker": "Ann", "text": "I adopted a grey cat named Miso."}], user_id="new", close=True, **SMALL)
    assert "Miso" in mem.retrieve("What is the cat called?", user_id="new", **SMALL).context


def test_tiers_and_counters_stay_with_their_user_and_forget_takes_them(mem: Memstrata) -> None:
    for user in ("ann", "bob"):
        mem.ingest(EXAMPLE, user_id=user, close=True, **SMALL)
    bob = {c.unit_id: (c.tier, c.priority, c.recall_count) for c in mem.store.counters.all("bob", kind="summary")}
    for _ in range(3):
        mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", **SMALL)
    assert {
        c.unit_id: (c.tier, c.priority, c.recall_count) for c in mem.store.counters.all("bob", kind="summary")
    } == bob
    assert any(c.recall_count for c in mem.store.counters.all("ann", kind="summary"))
    mem.delete_user(user_id="ann")
    assert mem.store.counters.all("ann") == [] and mem.store.tier_state.count(user_id="ann") == 0
    assert mem.store.tier_state.count(user_id="bob") == 1 and mem.store.counters.active("bob")
    gone = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", **SMALL)
    assert gone.evidence == []
    assert_store_ok(mem.store, "bob")


def test_offline_a_tier_answers_only_if_it_holds_the_archives_nearest_summaries(mem: Memstrata) -> None:
    mem.ingest(EXAMPLE, user_id="ann", close=True, **SMALL)
    # every summary of the user is among the "nearest": the cache (one session and one record) lacks some of them
    every = mem.retrieve(
        "Where does Priya work?",
        user_id="ann",
        **SMALL,
        tier={"probe_k": 50},
    )
    steps = every.trace["tiers"]["steps"]
    held, of = (int(n) for n in steps[0]["why"].rpartition("held ")[2].split("/"))
    assert steps[0]["tier"] == 1 and steps[0]["deeper"] and held < of == 6
    assert all("archive's nearest summaries held" in s["why"] for s in steps if s["tier"] < 3)
    unprobed = mem.retrieve(
        "Where does Priya work?",
        user_id="ann",
        **SMALL,
        tier={"probe_k": 0},
    )
    assert all("archive's nearest" not in s["why"] for s in unprobed.trace["tiers"]["steps"])


def test_use_moves_records_at_once_and_a_held_tier_takes_them_at_its_refresh(mem: Memstrata) -> None:
    from memstrata.context import Context, nested
    from memstrata.memory.index.active import active_index, active_sessions, refresh_tiers
    from memstrata.runtime.search import bounds

    mem.ingest(EXAMPLE, user_id="ann", close=True, **SMALL)
    ctx = Context(user_id="ann", **nested(SMALL))
    held = active_index(mem.store, user_id="ann", conversation_id=None, depth=2, bounds=bounds(ctx))
    before = {c.item: c.tier for c in mem.store.counters.active("ann")}
    moved = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", **SMALL)
    after = {c.item: c.tier for c in mem.store.counters.active("ann")}
    assert moved.trace["tiers"]["use"]["recalled"] >= 1
    if moved.trace["tiers"]["use"]["moves"]:
        assert after != before  # written at once
    kept = active_index(
        mem.store, user_id="ann", conversation_id=None, depth=2, bounds=bounds(ctx), refresh_seconds=3600.0
    )
    assert kept is held  # the held snapshot is searched as it was until the refresh: never rebuilt by a read
    wanted = set(active_sessions(mem.store.counters.active("ann"))[2])
    for refreshed in ("by time", "at once"):
        if refreshed == "at once":
            refresh_tiers(mem.store, "ann")  # as a bench's pause: the next read re-reads membership
        fresh = active_index(
            mem.store,
            user_id="ann",
            conversation_id=None,
            depth=2,
            bounds=bounds(ctx),
            refresh_seconds=0.0 if refreshed == "by time" else 3600.0,
        )
        assert wanted <= {f"{t.conversation_id}/{t.session_id}" for t in fresh.turns}


def test_use_ranks_against_the_held_active_records_and_keeps_them_equal_to_the_store(mem: Memstrata) -> None:
    from memstrata.memory.index.active import held_active

    mem.ingest(EXAMPLE, user_id="ann", close=True, **SMALL)
    reads = []
    active = mem.store.counters.active
    mem.store.counters.active = lambda *a, **k: reads.append(a) or active(*a, **k)
    questions = ["Which neighbourhood did Priya pick, close to the castle?", "Cello teacher, Bach suite", "Alfama"]
    uses = [
        mem.retrieve(q, user_id="ann", **SMALL, tier={"refresh_s": 3600.0}, context_budget=60).trace["tiers"]["use"]
        for q in questions
    ]
    assert uses[0]["promoted"] == uses[0]["demoted"] == 1  # an archive record rose into the active tiers
    assert len(reads) == 1  # the active tiers were read from the store once, at the first refresh
    mem.store.counters.active = active
    held = held_active(mem.store, user_id="ann", conversation_id=None, refresh_seconds=3600.0)
    stored = active("ann")
    assert {(c.item, c.tier, c.priority) for c in held} == {(c.item, c.tier, c.priority) for c in stored}
    # the held rows are the store's whole counters (recalls, scoring time), though a use never reads them back
    assert sorted(held, key=lambda c: c.item) == sorted(stored, key=lambda c: c.item)


def test_tiers_off_cost_a_write_nothing_and_score_tiers_scores_what_was_written_meanwhile(mem: Memstrata) -> None:
    stats = mem.ingest(EXAMPLE, user_id="ann", close=True, **{**SMALL, "tiers": False})
    assert "records_scored" not in stats and "tiers" not in stats["stage_seconds"]  # the stage did not run
    assert not [c for c in mem.store.counters.all("ann", kind="summary") if c.importance is not None]
    mem.ingest(EXAMPLE, user_id="bob", close=True, **{**SMALL, "tiers": False})
    done = mem.score_tiers(user_id="ann")
    summaries = mem.store.count("summary", user_id="ann")
    assert done == {"users": 1, "conversations": 1, "records_scored": summaries} and summaries > 0
    rows = list(mem.store.counters.all("ann", kind="summary"))
    assert len(rows) == summaries and all(c.importance is not None and c.tier is not None for c in rows)
    assert all(c.importance is None for c in mem.store.counters.all("bob", kind="summary"))  # only the user asked
    assert mem.score_tiers(user_id="ann")["records_scored"] == 0  # nothing left unscored
    assert mem.score_tiers()["records_scored"] == mem.store.count("summary", user_id="bob")  # every user
    assert_store_ok(mem.store, "ann")
    assert_store_ok(mem.store, "bob")
