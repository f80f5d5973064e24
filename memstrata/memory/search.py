"""Hybrid search over one user's memory: dense (MiniLM) + BM25 (bm25s), turns and summaries.

Each turn is searched in several views: dense on the turn alone and on the turn
with its neighbours (the stored :class:`~memstrata.memory.models.TurnContext`),
BM25 on the turn alone and on windows of 1, 2, 4 and 8 neighbours each side
(the wider windows stand for the scene the turn belongs to).

Chroma is the store of record. For query latency, a read-only snapshot of one
user's turns and Level-1 summaries (vectors included) is loaded once and kept
per process; any write through the same store bumps its version and the next
query rebuilds the snapshot. Writes from another process are picked up after
``refresh_seconds`` (a cheap count check).

Example:
    >>> idx = MemoryIndex.load(store, user_id="alice")      # doctest: +SKIP
    >>> idx.dense_turns(vec)[:3]                            # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import bm25s
import numpy as np

from memstrata.memory.models import UnitKind

WINDOW_WIDTHS = (0, 1, 2, 4, 8)  # BM25 views of a turn: alone, and with 1, 2, 4 or 8 neighbours each side
_CACHE: dict[tuple[int, str, str | None], MemoryIndex] = {}
_CACHE_LOCK = threading.Lock()


def _stemmer() -> Any:
    try:
        import Stemmer

        return Stemmer.Stemmer("english")
    except ImportError:  # pragma: no cover - PyStemmer is a declared dependency
        return None


_STEM = _stemmer()


def tokenize(texts: list[str]) -> list[list[str]]:
    """Lower-cased, stop-worded, stemmed word tokens (the BM25 vocabulary)."""
    return bm25s.tokenize(texts, stopwords="en", stemmer=_STEM, return_ids=False, show_progress=False)


@dataclass
class TurnRow:
    """A raw turn as search sees it."""

    conversation_id: str
    turn_id: str
    session_id: str
    position: int
    speaker: str
    text: str
    rendered: str
    image_caption: str | None
    ts: datetime | None
    time_raw: str | None
    source_id: str | None


@dataclass
class SummaryRow:
    """A Level-1 summary and its links."""

    conversation_id: str
    summary_id: str
    episode_id: str
    session_id: str
    text: str
    turn_ids: list[str]
    ts: datetime | None


@dataclass
class _Bm25:
    model: bm25s.BM25 | None
    size: int

    @classmethod
    def build(cls, texts: list[str]) -> _Bm25:
        return cls.from_tokens(tokenize(texts) if texts else [])

    @classmethod
    def from_tokens(cls, docs: list[list[str]]) -> _Bm25:
        """Index documents already run through :func:`tokenize` (windows reuse their turns' tokens)."""
        if not docs:
            return cls(None, 0)
        model = bm25s.BM25()
        model.index(docs, show_progress=False)
        return cls(model, len(docs))

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        if self.model is None or not query_tokens:
            return np.zeros(self.size)
        vocab = self.model.vocab_dict
        known = [t for t in query_tokens if t in vocab]
        return np.asarray(self.model.get_scores(known), dtype=float) if known else np.zeros(self.size)


@dataclass
class MemoryIndex:
    """A search snapshot of one user's memory (optionally one conversation)."""

    turns: list[TurnRow]
    turn_vecs: np.ndarray
    summaries: list[SummaryRow]
    summary_vecs: np.ndarray
    context_vecs: np.ndarray | None = None
    version: int = 0
    loaded_at: float = field(default_factory=time.monotonic)
    counts: tuple[int, ...] = (0, 0, 0)

    def __post_init__(self) -> None:
        self.memo: dict[str, Any] = {}
        if self.context_vecs is None or len(self.context_vecs) != len(self.turns):
            self.context_vecs = self.turn_vecs  # a store written before turn contexts: the turn stands alone
        self.summary_bm25 = _Bm25.build([s.text for s in self.summaries])
        self.by_key = {(t.conversation_id, t.turn_id): i for i, t in enumerate(self.turns)}
        self.by_position = {(t.conversation_id, t.session_id, t.position): i for i, t in enumerate(self.turns)}
        stamps = [t.ts for t in self.turns if t.ts]
        self.latest: datetime | None = max(stamps) if stamps else None
        self.speakers = sorted({t.speaker for t in self.turns})
        self.prev_idx = np.array([self.by_position.get((t.conversation_id, t.session_id, t.position - 1), -1)
                                  for t in self.turns], dtype=int)
        self.next_idx = np.array([self.by_position.get((t.conversation_id, t.session_id, t.position + 1), -1)
                                  for t in self.turns], dtype=int)
        self.ts_seconds = np.array([t.ts.timestamp() if t.ts else np.nan for t in self.turns], dtype=float)
        # BM25 at every width of WINDOW_WIDTHS: the turn alone, then ever wider stretches of its session.
        # Each turn is tokenized once; a window's tokens are its turns' tokens joined.
        tokens = tokenize([t.rendered for t in self.turns]) if self.turns else []
        self.turn_bm25 = [_Bm25.from_tokens([[tok for j in members for tok in tokens[j]] for members in
                                             self.window_members(w)]) for w in WINDOW_WIDTHS]

    # ---- loading -----------------------------------------------------------
    @classmethod
    def fresh(cls, store: Any, *, user_id: str, conversation_id: str | None = None,
              refresh_seconds: float = 5.0) -> MemoryIndex | None:
        """The cached snapshot when it needs no I/O to trust (same version, checked recently), else ``None``."""
        with _CACHE_LOCK:
            cached = _CACHE.get((id(store), user_id, conversation_id))
        if cached is not None and cached.version == store.versions.get(user_id) and \
                time.monotonic() - cached.loaded_at < refresh_seconds:
            return cached
        return None

    @classmethod
    def load(cls, store: Any, *, user_id: str, conversation_id: str | None = None,
             refresh_seconds: float = 5.0) -> MemoryIndex:
        """The cached snapshot, rebuilt after writes (this process) or count changes (others)."""
        key = (id(store), user_id, conversation_id)
        version = store.versions.get(user_id)
        with _CACHE_LOCK:
            cached = _CACHE.get(key)
        if cached is not None and cached.version == version:
            if time.monotonic() - cached.loaded_at < refresh_seconds or cached.counts == _counts(
                    store, user_id, conversation_id):
                cached.loaded_at = time.monotonic()
                return cached
        index = cls._build(store, user_id, conversation_id, version)
        with _CACHE_LOCK:
            _CACHE[key] = index
        return index

    @classmethod
    def _build(cls, store: Any, user_id: str, conversation_id: str | None, version: int) -> MemoryIndex:
        turns = store.get(UnitKind.TURN, user_id=user_id, conversation_id=conversation_id, with_vectors=True)
        sums = store.get(UnitKind.SUMMARY, user_id=user_id, conversation_id=conversation_id, with_vectors=True)
        turns.sort(key=lambda r: (r.metadata["conversation_id"], _session_key(r.metadata.get("session_id", "")),
                                  r.metadata.get("position", 0)))
        views = store.get(UnitKind.CONTEXT, user_id=user_id, conversation_id=conversation_id, with_vectors=True)
        turn_rows = [_turn_row(r) for r in turns]
        sum_rows = [_summary_row(r) for r in sums]
        dim = len(turns[0].metadata["_vector"]) if turns else 1
        turn_vecs = np.asarray([r.metadata["_vector"] for r in turns], dtype=np.float32).reshape(-1, dim)
        by_turn = {(r.metadata["conversation_id"], r.metadata.get("turn_id")): r.metadata["_vector"] for r in views}
        context_vecs = np.asarray([by_turn.get((t.conversation_id, t.turn_id), turn_vecs[i])
                                   for i, t in enumerate(turn_rows)], dtype=np.float32).reshape(-1, dim)
        return cls(
            turns=turn_rows, turn_vecs=turn_vecs, context_vecs=context_vecs,
            summaries=sum_rows,
            summary_vecs=np.asarray([r.metadata["_vector"] for r in sums], dtype=np.float32).reshape(-1, dim),
            version=version, counts=(len(turn_rows), len(sum_rows), len(views)),
        )

    def remember(self, key: str, value: Any, *, limit: int = 512) -> None:
        """Memoize per-query work on this snapshot (dropped with the snapshot after a write)."""
        if len(self.memo) >= limit:
            self.memo.pop(next(iter(self.memo)))
        self.memo[key] = value

    def window_members(self, width: int) -> list[list[int]]:
        """Each turn's window as turn indices in order: up to ``width`` neighbours each side, within its session."""
        out = []
        for i in range(len(self.turns)):
            before, after, j, k = [], [], i, i
            for _ in range(width):
                j = self.prev_idx[j] if j >= 0 else -1
                k = self.next_idx[k] if k >= 0 else -1
                if j >= 0:
                    before.insert(0, int(j))
                if k >= 0:
                    after.append(int(k))
            out.append([*before, i, *after])
        return out

    def windows(self, width: int) -> list[str]:
        """Each turn's rendered text with up to ``width`` neighbours each side, within its session."""
        return ["\n".join(self.turns[j].rendered for j in members) for members in self.window_members(width)]

    # ---- search --------------------------------------------------------------
    def dense_turns(self, qvec: np.ndarray) -> np.ndarray:
        return self.turn_vecs @ qvec if len(self.turns) else np.zeros(0)

    def dense_contexts(self, qvec: np.ndarray) -> np.ndarray:
        """Similarity of the query to each turn read with its neighbours (the stored contextual view)."""
        return self.context_vecs @ qvec if len(self.turns) else np.zeros(0)

    def dense_summaries(self, qvec: np.ndarray) -> np.ndarray:
        return self.summary_vecs @ qvec if len(self.summaries) else np.zeros(0)

    def episode_turns(self, summary: SummaryRow) -> list[int]:
        return [i for tid in summary.turn_ids if (i := self.by_key.get((summary.conversation_id, tid))) is not None]


def forget_store(store: Any) -> None:
    """Drop every cached snapshot of one store."""
    with _CACHE_LOCK:
        for key in [k for k in _CACHE if k[0] == id(store)]:
            del _CACHE[key]


def _counts(store: Any, user_id: str, conversation_id: str | None) -> tuple[int, ...]:
    return tuple(store.count(kind, user_id=user_id, conversation_id=conversation_id)
                 for kind in (UnitKind.TURN, UnitKind.SUMMARY, UnitKind.CONTEXT))


def _session_key(session_id: str) -> tuple[int, str]:
    return (int(session_id), "") if session_id.isdigit() else (1 << 30, session_id)


def _turn_row(record: Any) -> TurnRow:
    p = record.payload
    ts = datetime.fromisoformat(p["timestamp"]) if p.get("timestamp") else None
    return TurnRow(p["conversation_id"], p["id"], p["session_id"], p["position"], p["speaker"], p["text"],
                   record.document, p.get("image_caption"), ts, p.get("timestamp_raw"), p.get("source_id"))


def _summary_row(record: Any) -> SummaryRow:
    p = record.payload
    ts = datetime.fromisoformat(p["timestamp"]) if p.get("timestamp") else None
    return SummaryRow(p["conversation_id"], p["id"], p["episode_id"], p["session_id"], p["text"],
                      list(p.get("turn_ids", [])), ts)
