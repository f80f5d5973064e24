"""Offline segmentation and extractive summaries."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from memstrata.memory.extractive import extractive_summary
from memstrata.memory.segmentation import segment_session


def _topics(*sizes: int, dim: int = 8) -> np.ndarray:
    rows = []
    for topic, size in enumerate(sizes):
        v = np.zeros(dim)
        v[topic] = 1.0
        rows += [v] * size
    return np.asarray(rows)


def test_topic_shift_cuts_where_similarity_dips() -> None:
    assert segment_session(_topics(5, 5), overlap=0) == [(0, 4), (5, 9)]


def test_overlap_prepends_previous_turn() -> None:
    assert segment_session(_topics(5, 5), overlap=1) == [(0, 4), (4, 9)]


def test_max_length_caps_an_unbroken_topic() -> None:
    spans = segment_session(_topics(30), max_turns=12, overlap=0)
    assert all(e - s + 1 <= 12 for s, e in spans)
    assert spans[0][0] == 0 and spans[-1][1] == 29


def test_time_gap_forces_a_boundary() -> None:
    start = datetime(2024, 1, 1, 10)
    times = [start + timedelta(minutes=i) for i in range(4)] + [start + timedelta(hours=3, minutes=i) for i in range(4)]
    spans = segment_session(_topics(8), times, overlap=0, min_turns=2)
    assert (0, 3) in spans and (4, 7) in spans


def test_forced_boundaries_replace_topic_cuts() -> None:
    assert segment_session(_topics(5, 5), overlap=0, forced={3}, min_turns=2) == [(0, 2), (3, 9)]


def test_every_turn_is_covered_exactly_in_order() -> None:
    rng = np.random.default_rng(0)
    spans = segment_session(rng.normal(size=(40, 16)), overlap=0)
    covered = [i for s, e in spans for i in range(s, e + 1)]
    assert covered == list(range(40))


def test_summary_keeps_names_numbers_and_resolved_dates() -> None:
    turns = [
        ("Ann", "Hey Bob! Good to see you!"),
        ("Ann", "I ran the Brighton half marathon two weeks ago in 1 hour 52 minutes."),
        ("Bob", "Wow, great."),
        ("Bob", "My sister Kim moved to Oslo yesterday."),
    ]
    s = extractive_summary(turns, datetime(2024, 4, 14))
    assert "Brighton" in s.text and "52" in s.text and "Oslo" in s.text
    assert "(31 March 2024)" in s.text and "(13 April 2024)" in s.text
    assert "Good to see you" not in s.text
    assert s.participants == ["Ann", "Bob"] and "14 April 2024" in s.text
