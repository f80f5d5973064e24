"""Relative times beyond the dates Python holds ("3000 years ago") are no date, never a crash, in writes and queries.

A LongMemEval haystack holds such a phrase: before this, the offline fact extractor raised OverflowError and the
whole ingest stopped.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from conftest import HashEmbeddings, assert_store_ok
from hypothesis import given
from hypothesis import strategies as st

from memstrata import Memstrata
from memstrata.memory.plan.temporal_hints import Offset, apply_offset, parse_hint, resolve
from memstrata.memory.timeparse import resolve_relative

NOW = datetime(2023, 5, 20, 14, 0)
UNITS = ("day", "week", "fortnight", "month", "year")


@given(st.integers(0, 10**12), st.sampled_from(UNITS))
def test_an_offset_of_any_size_resolves_to_a_date_or_to_none(count: int, unit: str) -> None:
    when = resolve_relative(f"{count} {unit}s ago", NOW)
    assert when is None or when <= NOW
    hint = parse_hint(f"What did I do {count} {unit}s ago?", now=NOW)  # a count like 2024 reads as that year
    assert hint is None or hint.interval is None or hint.interval.start <= hint.interval.end
    anchored = parse_hint(f"What did I do {count} {unit}s before my wedding?", now=NOW)
    if anchored is not None:  # dated by the wedding's time: a period, or none where no date holds it
        period = resolve(anchored, lambda _: NOW)
        assert period is None or period.start <= period.end


def test_what_no_date_holds_is_none_and_what_one_does_is_kept() -> None:
    assert resolve_relative("3000 years ago", NOW) is None
    assert resolve_relative("100 years ago", NOW) == datetime(1923, 6, 14, 14, 0)
    assert parse_hint("What did I do 3000 years ago?", now=NOW) is None
    assert parse_hint("What happened 5000 years before 2020?", now=NOW) is None
    assert apply_offset(Offset(-1, "year", 5000), NOW) is None
    assert apply_offset(Offset(-1, "year", 3), NOW).start == datetime(2020, 1, 1)  # type: ignore[union-attr]


def test_a_conversation_that_says_it_is_written_and_asked_about(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())
    said = [("Ann", "The pyramids were built about 4500 years ago, I read."), ("Bo", "I moved to Lisbon 3 years ago.")]
    turns = [{"speaker": who, "text": text, "timestamp": NOW.isoformat()} for who, text in said]
    mem.ingest(turns, user_id="u", conversation_id="c", close=True)
    facts = [r.payload for r in mem.store.get("fact", user_id="u")]
    assert any("4500 years ago" in f["text"] and not f.get("event_date") for f in facts)  # kept, with no date
    assert any("Lisbon" in f["text"] and f.get("event_date") for f in facts)
    found = mem.retrieve("What was built 3000 years ago?", user_id="u", context_budget=300)
    assert "pyramids" in found.context
    assert_store_ok(mem.store, "u")
    mem.close()
