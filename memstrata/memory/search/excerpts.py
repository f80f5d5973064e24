r"""Quoting a long turn by its matching passage when the whole turn does not fit the context.

A turn longer than the encoder reads is stored with its passages
(:mod:`memstrata.memory.levels.level2.passage`). When such a turn is ranked but its whole line does not fit what
is left of the budget, the packer quotes its passage that best matches the query, and the next or previous one
when both fit, verbatim between ellipses, under the turn's own citation. Passages are scored by their stored
vectors against the query's (the best over the query and its sub-queries) plus the share of the query's words
they hold; a passage with no stored vector (a snapshot that lacks it) is scored by its words alone.

Example:
    >>> import re
    >>> from memstrata.memory.query import Hit
    >>> class Words:
    ...     def spans(self, text):
    ...         return [m.span() for m in re.finditer(r"\S+", text)]
    ...
    ...     def count(self, text):
    ...         return len(text.split())
    >>> text = " ".join(["Filler words here."] * 100 + ["My passport number is XK-4411."] + ["More filler."] * 99)
    >>> hit = Hit(kind="turn", unit_id="s1:t1", conversation_id="c", score=1.0, speaker="Ann", text=text)
    >>> quoted = Excerpts(None, [], "passport number", Words(), size=6).quote(hit, room=40)
    >>> quoted.text
    '… My passport number is XK-4411. More filler. More filler. More filler. …'
    >>> text[quoted.span[0] : quoted.span[1]].startswith("My passport number is XK-4411.")
    True
    >>> Excerpts(None, [], "passport number", Words(), size=6).quote(hit, room=20) is None  # too little room
    True
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import lru_cache
from typing import Any, Protocol

import numpy as np

from memstrata.memory.index.bm25 import tokenize
from memstrata.memory.levels.level2.passage import (
    ENCODER_TOKENS,
    PASSAGE,
    PASSAGE_TOKENS,
    is_long,
    passage_id,
    spans_of,
)
from memstrata.memory.query import Hit
from memstrata.memory.search.packing import line

ELLIPSIS = "…"
MIN_ROOM = 32
"""Tokens left under which no quote is tried (a passage and its citation rarely fit in fewer)."""


class SpanCounter(Hashable, Protocol):
    """A tokenizer that counts a text's tokens and gives their character spans (:class:`~memstrata.memory.tokens.
    TokenCounter`); hashable, since :func:`_cut` memoizes on it.
    """

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The (start, end) characters of each token of ``text``."""


@lru_cache(maxsize=512)
def _cut(text: str, size: int, counter: SpanCounter) -> tuple[tuple[int, int], ...]:
    """The passages' spans of a long text (memoized: the same turns are candidates of query after query)."""
    return tuple(spans_of(text, counter.spans(text), size=size))


class Excerpts:
    """Quotes long turns for one query: ``index`` is the search snapshot (or ``None``), ``vectors`` the query's and
    its sub-queries' unit vectors, ``text`` the words they ask with.
    """

    def __init__(
        self, index: Any, vectors: Any, text: str, counter: SpanCounter, *, size: int = PASSAGE_TOKENS
    ) -> None:
        self.table = index.events.get(PASSAGE.kind) if index is not None else None
        self.vectors = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1) if len(vectors) else None
        self.terms = set(tokenize([text])[0])
        self.counter, self.size = counter, size

    def quote(self, hit: Hit, room: int) -> Hit | None:
        """``hit`` with its text cut to the best passage (and a neighbour when both fit ``room`` tokens as one
        evidence line), or ``None`` when it is not a long turn or not even one passage fits.
        """
        if room < MIN_ROOM or not is_long(hit.speaker, hit.text, fits=ENCODER_TOKENS):
            return None
        spans = _cut(hit.text, self.size, self.counter)
        if len(spans) < 2:
            return None
        scores = self._scores(hit, spans)
        best = int(np.argmax(scores))
        chosen = self._fitted(hit, spans, best, best + 1, room)
        if chosen is None:
            return None
        before, after = best - 1, best + 1
        if after < len(spans) and (before < 0 or scores[after] >= scores[before]):
            chosen = self._fitted(hit, spans, best, after + 1, room) or chosen
        elif before >= 0:
            chosen = self._fitted(hit, spans, before, best + 1, room) or chosen
        return chosen

    def _scores(self, hit: Hit, spans: Sequence[tuple[int, int]]) -> np.ndarray:
        """Each passage's match: cosine to the nearest query vector (where stored) plus its share of query words."""
        words = np.array(
            [len(self.terms & set(tokenize([hit.text[a:b]])[0])) / max(1, len(self.terms)) for a, b in spans]
        )
        if self.table is None or self.vectors is None:
            return words
        rows = [self.table.by_key.get((hit.conversation_id, passage_id(hit.unit_id, a))) for a, _ in spans]
        dense = np.zeros(len(spans), dtype=np.float32)
        found = [i for i, r in enumerate(rows) if r is not None]
        if found:
            vecs = self.table.vecs[[rows[i] for i in found]]
            dense[found] = (vecs @ self.vectors.T).max(axis=1)
        return dense + words

    def _fitted(self, hit: Hit, spans: Sequence[tuple[int, int]], first: int, last: int, room: int) -> Hit | None:
        """The hit quoting passages ``first`` to ``last - 1``, if its evidence line fits ``room`` tokens."""
        start, end = spans[first][0], spans[last - 1][1]
        text = hit.text[start:end]
        if start > 0:
            text = f"{ELLIPSIS} {text}"
        if end < len(hit.text.rstrip()):
            text = f"{text} {ELLIPSIS}"
        quoted = hit.with_(text=text, span=(start, end), show_caption=False)
        return quoted if self.counter.count(line(quoted)) <= room else None
