"""memstrata itself as a benchmarked method, driven through the public facade.

Each conversation goes into a fresh embedded store in its own temporary
folder, so nothing leaks between conversations or runs.

Example:
    >>> method = MemstrataMethod(embeddings=MiniLMEmbeddings())  # doctest: +SKIP
    >>> method.prepare(conversation)  # doctest: +SKIP
    >>> method.context("Where did Ann move?", conversation, 1500)  # doctest: +SKIP
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from langchain_core.embeddings import Embeddings

from memstrata_bench.locomo import LocomoConversation
from memstrata_bench.tuning import TUNED

BENCH_USER = "bench"


class MemstrataMethod:
    """Ingest each conversation with ``Memstrata.ingest`` and answer with ``retrieve(...).context``.

    Args:
        embeddings: the shared embedder (the MiniLM instance the baselines use; ``None``: ``Memstrata``'s default).
        settings: extra :class:`~memstrata.context.Context` fields passed to ``Memstrata``.
    """

    name = "memstrata"

    def __init__(self, *, embeddings: Embeddings | None, settings: dict[str, Any] | None = None) -> None:
        self.embeddings = embeddings
        self.settings = dict(settings or {})
        self.stats: dict[str, Any] = {}
        self._mem: Any = None
        self._tmpdir: str | None = None

    def prepare(self, conversation: LocomoConversation) -> None:
        """Create a fresh store in a temporary folder and ingest the raw LoCoMo item."""
        from memstrata import Memstrata

        self.close()
        self._tmpdir = tempfile.mkdtemp(prefix=f"memstrata-bench-{conversation.sample_id}-")
        self._mem = Memstrata(path=self._tmpdir, embeddings=self.embeddings, **{**TUNED, **self.settings})
        self.stats = self._mem.ingest(conversation.raw, user_id=BENCH_USER, close=True)  # a finished record

    def context(self, question: str, conversation: LocomoConversation, budget: int) -> str:
        """The retrieval context for ``question`` within ``budget`` tokens."""
        if self._mem is None:
            msg = f"{self.name}: prepare({conversation.sample_id!r}) must run before its questions"
            raise RuntimeError(msg)
        result = self._mem.retrieve(
            question, user_id=BENCH_USER, conversation_id=conversation.sample_id, context_budget=budget
        )
        return str(result.context)

    def close(self) -> None:
        """Drop the store and delete its temporary folder."""
        if self._mem is not None:
            self._mem.close()
        self._mem = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
