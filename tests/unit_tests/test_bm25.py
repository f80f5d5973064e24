"""BM25 over windows of neighbouring documents equals BM25 over each window's joined tokens."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.memory.index.bm25 import Bm25

WORDS = ["porto", "cat", "miso", "lisbon", "run", "marathon", "tom", "ann"]


def _steps(n: int, width: int) -> list[np.ndarray]:
    """For s = 1..width, each document's neighbour s before and after it in one sequence (-1: none)."""
    return [
        np.stack(
            [
                np.where(np.arange(n) - s >= 0, np.arange(n) - s, -1),
                np.where(np.arange(n) + s < n, np.arange(n) + s, -1),
            ]
        )
        for s in range(1, width + 1)
    ]


@settings(max_examples=60, deadline=None)
@given(
    docs=st.lists(st.lists(st.sampled_from(WORDS), max_size=6), min_size=1, max_size=12),
    query=st.lists(st.sampled_from([*WORDS, "unknown"]), min_size=1, max_size=4),
    widths=st.lists(st.integers(0, 4), min_size=1, max_size=4, unique=True).map(sorted),
)
def test_window_scores_equal_bm25_over_the_joined_windows(
    docs: list[list[str]], query: list[str], widths: list[int]
) -> None:
    index = Bm25.from_tokens(docs)
    n = len(docs)
    got = index.window_scores(query, _steps(n, max(widths)), widths)
    for width, scores in zip(widths, got, strict=True):
        joined = [[t for j in range(max(0, i - width), min(n, i + width + 1)) for t in docs[j]] for i in range(n)]
        np.testing.assert_allclose(scores, Bm25.from_tokens(joined).scores(query), rtol=1e-9, atol=1e-12)


def test_window_lengths_follow_a_changed_document() -> None:
    """The windows' lengths are kept between queries and dropped when a document changes."""
    index = Bm25.from_tokens([["cat"], ["miso", "cat"], ["porto"]])
    steps = _steps(3, 1)
    before = index.window_scores(["cat"], steps, [1])[0]
    index.set_doc(2, ["porto", "porto", "porto", "cat"])
    after = index.window_scores(["cat"], steps, [1])[0]
    joined = [
        ["cat", "miso", "cat"],
        ["cat", "miso", "cat", "porto", "porto", "porto", "cat"],
        ["miso", "cat", "porto", "porto", "porto", "cat"],
    ]
    np.testing.assert_allclose(after, Bm25.from_tokens(joined).scores(["cat"]))
    assert not np.allclose(before, after)
