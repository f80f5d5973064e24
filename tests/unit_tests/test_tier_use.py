"""HMO's use below the tiers' threshold: with tiers on, every query counts its cited records' recalls (Eq. 5's n),
so a user who grows past ``scale.max_turns`` brings that history into the tiers; with tiers off nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from conftest import EXAMPLE, HashEmbeddings, assert_store_ok

from memstrata import Memstrata

ON = {"tiers": True, "tier.recent_sessions": 1, "tier.pivotal": 1, "tier.buffer": 2}  # snapshot_max_turns: default


def test_with_tiers_on_a_query_below_the_threshold_counts_its_records_use(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="ann", close=True, **ON)
    before = {c.unit_id: c.recall_count for c in mem.store.counters.all("ann", kind="summary")}
    assert before and not any(before.values())
    result = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", **ON)
    assert result.trace["tiers"] is None  # not a tiered query: a small user is searched whole
    use = result.trace["tier_use"]
    after = {c.unit_id: c.recall_count for c in mem.store.counters.all("ann", kind="summary")}
    assert use["recalled"] >= 1 and sum(after.values()) == use["recalled"]
    again = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", **ON)
    assert (
        sum(c.recall_count for c in mem.store.counters.all("ann", kind="summary"))
        == use["recalled"] + (again.trace["tier_use"]["recalled"])
    )
    assert_store_ok(mem.store, "ann")
    mem.close()


def test_with_tiers_off_a_query_writes_no_use(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="ann", close=True, **ON)  # records scored, then tiers turned off for the query
    result = mem.retrieve("When did Tom run the Brighton half marathon?", user_id="ann", tiers=False)
    assert "tier_use" not in result.trace and result.trace["tiers"] is None
    assert not any(c.recall_count for c in mem.store.counters.all("ann", kind="summary"))
    mem.close()
