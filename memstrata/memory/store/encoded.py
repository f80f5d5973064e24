"""The store's memory of what it encoded: a text's vector, kept by the text's hash, so no text is encoded twice.

A chat app's open episode is distilled again at each message: its unchanged facts and turns come back with the same
text, and a re-sent message is the same text too. :class:`EncodedTexts` (one per store, dying with it) answers those
from memory and sends only the new texts to the embedder, in one call. It holds at most ``max_texts`` vectors
(least recently used go first), exactly as the embedder gave them: 10,000 MiniLM vectors take about 31 MB.

Asked to (``keep_tokens``: the turns a write stores, when ``Context.episodes.span_vectors`` pools), it also keeps the
token
vectors of the texts it encodes, if the embedder gives them
(:meth:`memstrata.memory.embeddings.MiniLMEmbeddings.embed_with_tokens`), so that the facts and summaries cut from
those turns get their vectors pooled from them (:mod:`memstrata.memory.late_chunking`). At most ``max_tokens`` token
vectors are kept, least recently used texts first out: 131,072 MiniLM tokens in float16 take 96 MB.

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

from memstrata.memory.embeddings import TokenVectors

DEFAULT_MAX_TEXTS = 10_000
DEFAULT_MAX_TOKENS = 131_072


class EncodedTexts:
    """Vectors of texts already encoded, by the text's hash, with a bound; the embedder is called for the rest."""

    def __init__(
        self, embeddings: Embeddings, *, max_texts: int = DEFAULT_MAX_TEXTS, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> None:
        if max_texts < 0 or max_tokens < 0:
            msg = f"max_texts and max_tokens must be 0 or more, got {max_texts} and {max_tokens}"
            raise ValueError(msg)
        self.embeddings = embeddings
        self.max_texts = max_texts
        self.max_tokens = max_tokens
        self._held: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._tokens: OrderedDict[bytes, TokenVectors] = OrderedDict()
        self._token_count = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def embed(self, texts: Sequence[str], *, keep_tokens: bool = False) -> list[list[float]]:
        """The vector of each text, in order; texts not held are encoded in one call (each distinct one once).

        With ``keep_tokens``, the token vectors of the texts encoded now are kept too (see :meth:`tokens_of`).
        """
        keys = [_key(t) for t in texts]
        with self._lock:
            found = {k: self._touch(k) for k in dict.fromkeys(keys) if k in self._held}
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            first = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}
            with_tokens = getattr(self.embeddings, "embed_with_tokens", None) if keep_tokens else None
            tokens: list[TokenVectors] = []
            if with_tokens is not None and self.max_tokens:
                fresh, tokens = with_tokens([first[k] for k in missing])
            else:
                fresh = self.embeddings.embed_documents([first[k] for k in missing])
            found.update(zip(missing, (np.asarray(v, dtype=np.float64) for v in fresh), strict=True))
            with self._lock:
                for k in missing:
                    self._hold(k, found[k])
                for k, held in zip(missing, tokens, strict=False):
                    self._hold_tokens(k, held)
        with self._lock:
            self.misses += len(missing)
            self.hits += len(keys) - len(missing)
        return [found[k].tolist() for k in keys]

    def tokens_of(self, text: str) -> TokenVectors | None:
        """The token vectors kept when ``text`` was encoded with ``keep_tokens``, or ``None`` (never kept, evicted,
        or an embedder that cannot give them).
        """
        key = _key(text)
        with self._lock:
            held = self._tokens.get(key)
            if held is not None:
                self._tokens.move_to_end(key)
            return held

    def stats(self) -> dict[str, int]:
        """Texts answered from memory, texts encoded, vectors held, token vectors held."""
        return {"hits": self.hits, "misses": self.misses, "held": len(self._held), "tokens_held": self._token_count}

    def clear(self) -> None:
        """Forget every vector (after the store changed its embedder, or on close)."""
        with self._lock:
            self._held.clear()
            self._tokens.clear()
            self._token_count = 0

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

    def _hold_tokens(self, key: bytes, tokens: TokenVectors) -> None:
        if not len(tokens) or len(tokens) > self.max_tokens:
            return
        old = self._tokens.pop(key, None)
        self._token_count -= len(old) if old is not None else 0
        self._tokens[key] = tokens
        self._token_count += len(tokens)
        while self._token_count > self.max_tokens:
            _, gone = self._tokens.popitem(last=False)
            self._token_count -= len(gone)


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
