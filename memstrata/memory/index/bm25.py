"""BM25 over stemmed, stop-worded words: the lexical half of every search view, updatable in place.

Tokenization is bm25s's (English stopwords, PyStemmer). Scoring is the Lucene
variant bm25s uses (k1 = 1.5, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5))),
but computed at query time from stored term frequencies rather than from a
precomputed score matrix: adding or replacing a document then only updates its
postings, its length and the document frequencies, and every later query sees
exactly the scores a rebuild over the same documents would give.

Example:
    >>> index = Bm25.from_tokens(tokenize(["Ann moved to Porto", "Bob likes tea"]))
    >>> int(index.scores(tokenize(["Porto"])[0]).argmax())
    0
    >>> index.set_doc(2, tokenize(["Porto again"])[0])
    >>> index.scores(tokenize(["Porto"])[0]).round(3).tolist()
    [0.178, 0.0, 0.212]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

K1, B = 1.5, 0.75


def _stemmer() -> Any:
    try:
        import Stemmer

        return Stemmer.Stemmer("english")
    except ImportError:  # pragma: no cover - PyStemmer is a declared dependency
        return None


_STEM = _stemmer()


def tokenize(texts: list[str]) -> list[list[str]]:
    """Lower-cased, stop-worded, stemmed word tokens (the BM25 vocabulary).

    One text (a query, searched once per kind and per step of a retrieval) is memoized.
    """
    if len(texts) == 1:
        return [list(_tokenize_one(texts[0]))]
    import bm25s  # it imports scipy, so it is loaded on the first tokenization, not with memstrata

    return bm25s.tokenize(texts, stopwords="en", stemmer=_STEM, return_ids=False, show_progress=False)


@lru_cache(maxsize=4096)
def _tokenize_one(text: str) -> tuple[str, ...]:
    import bm25s

    return tuple(bm25s.tokenize([text], stopwords="en", stemmer=_STEM, return_ids=False, show_progress=False)[0])


class Bm25:
    """A BM25 index over documents numbered 0..n-1 that can grow and change in place."""

    def __init__(self) -> None:
        self.postings: dict[str, dict[int, int]] = {}
        self.lengths: list[int] = []
        self.docs: list[Counter[str]] = []
        self._total = 0
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._length_array: np.ndarray | None = None
        self._window_norms: tuple[tuple[int, ...], list[np.ndarray]] | None = None

    @classmethod
    def build(cls, texts: list[str]) -> Bm25:
        """Index raw texts, tokenized with :func:`tokenize`."""
        return cls.from_tokens(tokenize(texts) if texts else [])

    @classmethod
    def from_tokens(cls, docs: list[list[str]]) -> Bm25:
        """Index documents already run through :func:`tokenize`."""
        index = cls()
        for i, tokens in enumerate(docs):
            counts = Counter(tokens)
            for term, tf in counts.items():
                index.postings.setdefault(term, {})[i] = tf
            index.docs.append(counts)
            index.lengths.append(len(tokens))
            index._total += len(tokens)
        return index

    def frequencies(self, term: str) -> np.ndarray:
        """The term's frequency in every document (zeros where it is absent)."""
        out = np.zeros(len(self.lengths))
        if self.postings.get(term):
            docs, tf = self._postings(term)
            out[docs] = tf
        return out

    @property
    def size(self) -> int:
        """The number of documents."""
        return len(self.lengths)

    def set_doc(self, i: int, tokens: list[str]) -> None:
        """Add document ``i`` (the next number) or replace it."""
        if i > len(self.lengths):
            msg = f"Bm25.set_doc: document {i} would leave a gap after {len(self.lengths) - 1}"
            raise IndexError(msg)
        if i == len(self.lengths):
            self.lengths.append(0)
            self.docs.append(Counter())
        old = self.docs[i]
        for term in old:
            docs = self.postings[term]
            del docs[i]
            if not docs:
                del self.postings[term]
            self._arrays.pop(term, None)
        new = Counter(tokens)
        for term, tf in new.items():
            self.postings.setdefault(term, {})[i] = tf
            self._arrays.pop(term, None)
        self._total += len(tokens) - self.lengths[i]
        self.lengths[i], self.docs[i] = len(tokens), new
        self._length_array = self._window_norms = None

    def pop(self) -> None:
        """Remove the last document."""
        last = len(self.lengths) - 1
        self.set_doc(last, [])
        self.lengths.pop()
        self.docs.pop()
        self._length_array = self._window_norms = None

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        if term not in self._arrays:
            docs = self.postings[term]
            self._arrays[term] = (
                np.fromiter(docs.keys(), dtype=np.int64, count=len(docs)),
                np.fromiter(docs.values(), dtype=np.float64, count=len(docs)),
            )
        return self._arrays[term]

    def window_scores(
        self, query_tokens: list[str], steps: Sequence[np.ndarray], widths: Sequence[int]
    ) -> list[np.ndarray]:
        """BM25 of each document read as a window of documents, as if the windows were indexed themselves, for the
        windows of each width in ``widths``.

        ``steps[s - 1]`` gives, for each document, the documents ``s`` steps before and after it (``-1``: none), so a
        window of width ``w`` is the document and ``steps[:w]``. A window's term frequency and length are its
        members' sums; its document frequency counts the windows holding the term. Equal to indexing every window's
        joined tokens, without storing one posting list per window. The wider windows hold the narrower ones, so
        each sum grows from the last width's instead of starting again. The windows' lengths are kept until a
        document changes or :meth:`windows_changed` says the windows did.
        """
        n = len(self.lengths)
        known = [t for t in query_tokens if self.postings.get(t)]
        if not known:
            return [np.zeros(n) for _ in widths]
        key = tuple(widths)
        if self._window_norms is None or self._window_norms[0] != key:
            lengths = _nested_sums(np.asarray(self.lengths, dtype=np.float64), steps, widths)
            self._window_norms = (key, [K1 * ((1 - B) + B * length / length.mean()) for length in lengths])
        norms = self._window_norms[1]
        out = [np.zeros(n) for _ in widths]
        for term in known:  # a repeated query word counts again, as in bm25s
            for scores, norm, tf in zip(out, norms, _nested_sums(self.frequencies(term), steps, widths), strict=True):
                df = int(np.count_nonzero(tf))
                scores += np.log(1 + (n - df + 0.5) / (df + 0.5)) * tf / (norm + tf)
        return out

    def windows_changed(self) -> None:
        """Drop the windows' lengths kept by :meth:`window_scores` (the documents' neighbours changed)."""
        self._window_norms = None

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """One score per document; zeros when no query word is in the vocabulary."""
        n = len(self.lengths)
        out = np.zeros(n)
        known = [t for t in query_tokens if self.postings.get(t)]
        if not known:
            return out
        if self._length_array is None:
            self._length_array = np.asarray(self.lengths, dtype=np.float64)
        norm = K1 * ((1 - B) + B * self._length_array / (self._total / n))
        for term in known:  # a repeated query word counts again, as in bm25s
            docs, tf = self._postings(term)
            idf = np.log(1 + (n - len(docs) + 0.5) / (len(docs) + 0.5))
            out[docs] += idf * tf / (norm[docs] + tf)  # a term lists each document once
        return out


def _nested_sums(values: np.ndarray, steps: Sequence[np.ndarray], widths: Sequence[int]) -> list[np.ndarray]:
    """Each document's value summed over its window of each width (``steps``: see
    :meth:`Bm25.window_scores`), in the order of ``widths``.
    """
    padded = np.append(values, 0.0)
    acc, by_width = values.copy(), {0: values}
    for s, step in enumerate(steps[: max(widths, default=0)], start=1):
        for members in step:
            acc += padded[members]  # -1 reads the padding zero
        if s in widths:
            by_width[s] = acc.copy()
    return [by_width[w] for w in widths]
