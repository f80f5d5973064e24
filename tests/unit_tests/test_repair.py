"""memstrata.repair.rebuild: a broken store is rebuilt from its raw turns, and nothing else is touched.

Every test starts from real data on two users with the same conversation ids and near-identical text, breaks one
user's store directly through the store API (as a lost race or a crash would), and rebuilds it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import PORTO, HashEmbeddings, assert_store_ok

from memstrata import Memstrata
from memstrata.memory.levels import levels
from memstrata.memory.store.invariants import check_store
from memstrata.memory.store.tables import TableRow
from memstrata.repair import rebuild

NOW = datetime.now(UTC).replace(tzinfo=None)  # the open session is recent: a rebuild must not find it quiet
EARLIER = [
    ("Ann", "I adopted a grey cat called {m}Miso last spring."),
    ("Bo", "What a lovely name! Does she like the flat?"),
    *PORTO[:6],
]
LATER = [
    ("Ann", "I moved to Lisbon last month."),
    ("Bo", "Wow, why Lisbon?"),
    ("Ann", "Tom got a job there, so we packed up."),
    ("Bo", "Exciting!"),
]


def _session(n: int, start: datetime, lines: list[tuple[str, str]], marker: str) -> list[dict[str, Any]]:
    return [
        {
            "speaker": speaker,
            "text": text.format(m=marker),
            "timestamp": (start + timedelta(minutes=i)).isoformat(),
            "session": str(n),
            "id": f"s{n}:{i}",
            "metadata": {"source": "chat"},
        }
        for i, (speaker, text) in enumerate(lines)
    ]


def _fill(mem: Memstrata, user: str, marker: str) -> None:
    """Conversation ``c``: a closed session two days ago and an open one of a few minutes ago; ``c2``: closed."""
    earlier = _session(1, NOW - timedelta(days=2), EARLIER, marker)
    later = _session(2, NOW - timedelta(minutes=6), LATER, marker)
    mem.ingest({"conversation_id": "c", "messages": [*earlier, *later]}, user_id=user)
    mem.ingest(
        {"conversation_id": "c2", "messages": _session(1, NOW - timedelta(days=1), LATER, marker)},
        user_id=user,
        close=True,
    )


def _digest(mem: Memstrata, user: str) -> dict[str, Any]:
    """Everything of a user as read through the tenant scope: units of every kind, edges, counters, kept tables."""
    out: dict[str, Any] = {
        kind: sorted(
            json.dumps([r.metadata["conversation_id"], r.unit_id, r.document, r.payload], sort_keys=True)
            for r in mem.store.get(kind, user_id=user)
        )
        for kind in [lv.kind for lv in levels()]
    }
    for name, table in mem.store.tables().items():
        out[name] = sorted(
            json.dumps([r.key, r.conversation_id, r.fields], sort_keys=True) for r in table.get(user_id=user)
        )
    return out


def _shape(mem: Memstrata, user: str, conv: str) -> dict[str, list[tuple[str, bool]]]:
    """The ids (and open flags) of the episodes, summaries and facts of one conversation."""
    return {
        kind: sorted(
            (r.unit_id, bool(r.payload.get("open"))) for r in mem.store.get(kind, user_id=user, conversation_id=conv)
        )
        for kind in ("episode", "summary", "fact")
    }


@pytest.fixture
def mem(tmp_path: Path) -> Memstrata:
    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    _fill(mem, "u", "")
    _fill(mem, "v", "Vx")  # the other tenant: same conversation and unit ids, near-identical text
    return mem


def test_a_rebuild_mends_orphan_facts_and_a_lost_summary_and_retrieval_still_finds_the_text(mem: Memstrata) -> None:
    shape, other = _shape(mem, "u", "c"), _digest(mem, "v")
    assert [o for _, o in shape["episode"]].count(True) == 1  # session 2's tail is open
    closed = mem.store.get("episode", user_id="u", conversation_id="c", where={"open": False})[0].payload
    mem.store.delete("episode", user_id="u", conversation_id="c", unit_ids=[closed["id"]])  # its facts stay: orphans
    other_conv = mem.store.get("episode", user_id="u", conversation_id="c2")[0].payload
    mem.store.delete("summary", user_id="u", conversation_id="c2", unit_ids=[other_conv["summary_id"]])
    broken = {p.unit.split()[0] for p in check_store(mem.store, "u") if p.invariant == "parent"}
    assert broken == {"fact", "episode"}

    out = rebuild(mem, user_id="u")

    turns = len(EARLIER) + 2 * len(LATER)
    assert out["conversations"] == 2 and out["turns"] == turns and out["removed"] > 0 and out["written"] > 0
    assert_store_ok(mem.store, "u")
    assert _shape(mem, "u", "c") == shape  # the same units as before the damage; the open tail still open
    assert "Miso" in mem.retrieve("What is the cat called?", user_id="u", context_budget=400).context
    assert _digest(mem, "v") == other  # the other tenant is untouched
    assert "VxMiso" not in mem.retrieve("What is the cat called?", user_id="u", context_budget=400).context


def test_a_rebuild_of_one_conversation_keeps_the_others_and_what_is_not_derived(mem: Memstrata) -> None:
    # a journal entry (and a tombstone)
    mem.update("s1:4", "I work as a teacher at the city school.", user_id="u", conversation_id="c")
    mem.store.items.upsert([TableRow("item-1", "u", "c", {"value": json.dumps({"text": "kept"})})])
    before = _digest(mem, "u")
    mem.store.delete("summary", user_id="u", conversation_id="c", unit_ids=["sum:s2:0-3"])
    assert check_store(mem.store, "u", "c") != []

    out = rebuild(mem, user_id="u", conversation_id="c")

    assert out["conversations"] == 1 and out["turns"] == len(EARLIER) + len(LATER)
    assert_store_ok(mem.store, "u")
    after = _digest(mem, "u")
    kept = {"turn", "items", "journal", "sequences", "tombstones"} & after.keys()
    assert {k: after[k] for k in kept} == {k: before[k] for k in kept}
    for kind in {lv.kind for lv in levels()} - kept:  # c2 as it was, unit for unit
        assert [r for r in after[kind] if r.startswith('["c2"')] == [r for r in before[kind] if r.startswith('["c2"')]
    assert "teacher" in mem.retrieve("What does Ann do for work?", user_id="u", context_budget=400).context


def test_an_unknown_user_or_conversation_is_a_lookup_error_and_changes_nothing(mem: Memstrata) -> None:
    before = _digest(mem, "u")
    with pytest.raises(LookupError, match="nobody"):
        rebuild(mem, user_id="nobody")
    with pytest.raises(LookupError, match="'nope'"):
        rebuild(mem, user_id="u", conversation_id="nope")
    assert _digest(mem, "u") == before


def test_a_fact_removed_from_a_persona_stays_removed_after_a_rebuild(mem: Memstrata) -> None:
    personas = mem.persona("Ann", user_id="u", conversation_id="c")
    dimension, persona = next((d, p) for d, p in personas.items() if p.items)
    removed = persona.items[0].fact_id
    mem.forget_persona_item("Ann", dimension, removed, user_id="u", conversation_id="c")
    rebuild(mem, user_id="u")
    now = mem.persona("Ann", user_id="u", conversation_id="c")[dimension]
    assert removed in now.excluded
    assert all(removed not in (i.fact_id, *i.fact_ids) for i in now.items)
    assert_store_ok(mem.store, "u")
