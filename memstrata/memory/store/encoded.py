"""The store's memory of what it encoded: a text's vector, kept by the text's hash, so no text is encoded twice.

A chat app's open episode is distilled again at each message: its unchanged facts and turns come back with the same
text, and a re-sent message is the same text too. :class:`EncodedTexts` (one per store, dying with it) answers those
from memory and sends only the new texts to the embedder, in one call. It holds at most ``max_texts`` vectors
(least recently used go first), exactly as the embedder gave them: 10,000 MiniLM vectors take about 31 MB.

Example:
    >>> from conftest import HashEmbeddings  # doctest: +SKIP
    >>> cache = EncodedTexts(HashEmbeddings(), max_texts=2)  # doctest: +SKIP
    >>> cache.embed(["a", "b", "a"]) and cache.stats()  # doctest: +SKIP
    {'hits': 1, 'misses': 2, 'held': 2}
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
from langchain_core.embeddings import Embeddings

DEFAULT_MAX_TEXTS = 10_000


class EncodedTexts:
    """Vectors of texts already encoded, by the text's hash, with a bound; the embedder is called for the rest."""

    def __init__(self, embeddings: Embeddings, *, max_texts: int = DEFAULT_MAX_TEXTS) -> None:
        if max_texts < 0:
            msg = f"max_texts must be 0 or more, got {max_texts}"
            raise ValueError(msg)
        self.embeddings = embeddings
        self.max_texts = max_texts
        self._held: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The vector of each text, in order; texts not held are encoded in one call (each distinct one once)."""
        keys = [hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest() for t in texts]
        with self._lock:
            found = {k: self._touch(k) for k in dict.fromkeys(keys) if k in self._held}
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            first = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}
            fresh = self.embeddings.embed_documents([first[k] for k in missing])
            found.update(zip(missing, (np.asarray(v, dtype=np.float64) for v in fresh), strict=True))
            with self._lock:
                for k in missing:
                    self._hold(k, found[k])
        with self._lock:
            self.misses += len(missing)
            self.hits += len(keys) - len(missing)
        return [found[k].tolist() for k in keys]

    def stats(self) -> dict[str, int]:
        """Texts answered from memory, texts encoded, vectors held."""
        return {"hits": self.hits, "misses": self.misses, "held": len(self._held)}

    def clear(self) -> None:
        """Forget every vector (after the store changed its embedder, or on close)."""
        with self._lock:
            self._held.clear()

    def _touch(self, key: bytes) -> np.ndarray:
        self._held.move_to_end(key)
        return self._held[key]

    def _hold(self, key: bytes, vector: np.ndarray) -> None:
        if self.max_texts == 0:
            return
        self._held[key] = vector
        self._held.move_to_end(key)
        while len(self._held) > self.max_texts:
            self._held.popitem(last=False)
