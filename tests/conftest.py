"""Shared fixtures: real MiniLM, embedded Chroma in a temp dir, and a cheap deterministic embedder."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.pop("MEMSTRATA_MODEL", None)

pytest_plugins = ["plugins.llm_server", "plugins.chroma_server"]

REPO = Path(__file__).resolve().parents[1]
LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
EXAMPLE = REPO / "examples" / "conversation.json"


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words vectors: fast, offline, and similar texts stay similar."""

    name = "test-hash-bow"
    dimension = 64

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dimension)
        for word in text.lower().split():
            v[int(hashlib.md5(word.strip(".,!?").encode()).hexdigest(), 16) % self.dimension] += 1.0
        n = np.linalg.norm(v) or 1.0
        return (v / n).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


@pytest.fixture(scope="session")
def minilm():
    from memstrata.memory.embeddings import MiniLMEmbeddings

    return MiniLMEmbeddings()


@pytest.fixture
def hash_embeddings() -> HashEmbeddings:
    return HashEmbeddings()


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "chroma")


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    if not LOCOMO.is_file():
        pytest.fail(f"LoCoMo data missing at {LOCOMO}: ../shared must sit beside the repo")
    return LOCOMO


def assert_store_ok(store, user_id: str, conversation_id: str | None = None) -> None:
    """``memstrata check`` finds nothing wrong in this user's memory."""
    from memstrata.memory.store.invariants import check_store

    problems = check_store(store, user_id, conversation_id)
    assert problems == [], "\n".join(map(str, problems[:20]))
