"""The one settings object both graphs read from ``runtime.context``.

Precedence is explicit value, then environment variable, then built-in default.
Nothing is created at import time: the store, the embedder and the model are
built on first use by :func:`resolve_store`, :func:`resolve_model`.

Example:
    >>> ctx = Context(user_id="alice")
    >>> ctx.level1_k, ctx.coarse_n, ctx.llm_mode
    (10, 30, False)
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from pydantic import ConfigDict
from pydantic.json_schema import SkipJsonSchema

DATA_DIR_ENV = "MEMSTRATA_DATA_DIR"
CHROMA_URL_ENV = "MEMSTRATA_CHROMA_URL"
MODEL_ENV = "MEMSTRATA_MODEL"


def default_data_dir() -> Path:
    """``$MEMSTRATA_DATA_DIR``, else ``~/.memstrata``."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path.home() / ".memstrata").expanduser()


@dataclass(kw_only=True)
class Context:
    """Every setting of an ingestion or retrieval run.

    Attributes:
        user_id: the tenant; required on every run.
        conversation_id: optional filter inside the user (retrieval) or the id
            given to inputs that carry none (ingestion).
        data_dir: embedded Chroma folder; ignored when ``chroma_url`` is set.
        chroma_url: a Chroma server, instead of the embedded store.
        model: a chat model instance, or a model name for ``ChatOpenAI``. LLM mode
            is on only when this (or ``$MEMSTRATA_MODEL``) is set.
        embeddings: any LangChain ``Embeddings``; the packaged MiniLM by default.
        level1_k: summaries the light module reads (HyMem k).
        coarse_n: summaries the deep module considers (HyMem N).
        max_iterations: reflection rounds at most.
        context_budget: tokens of the returned context.
        llm_token_budget: LLM tokens (prompt + completion) one query may spend.
        llm_batch_size: Level-1 entries per parallel LLM selection branch (HyMem's batch d).
        max_fanout: the most parallel ``Send`` branches (summaries, selection batches).
        w_semantic / w_temporal / w_robustness: H-Mem's score weights.
        decay_tau_days / decay_eta: Ebbinghaus decay of the robustness score.
        gate_threshold: offline gate: the best light turn's own similarity score
            (rank-normalized) needed to accept the light path.
        episode_prior: share of a turn's semantic score taken from its Level-1 summary.
        neighbour_share: a turn scores at least this share of its best neighbour (answers follow questions).
        speaker_prior: relative boost of turns spoken by a speaker the query names.
        now: reference time for decay; the user's latest turn when unset.
        diversity: MMR penalty on turns similar to ones already ranked (xMemory's
            representative selection); 0 ranks by score alone.
        generate_answer: with a model, write an answer (``retrieve`` turns this off).
        max_episode_turns / min_episode_turns / episode_overlap: offline segmentation bounds.
        llm_timeout_s / llm_retries: per-call timeout and transport retries.
        llm_max_tokens: cap on the completion tokens of one model call.
        prompts: overrides of prompt constants by name, e.g. ``{"REFLECT_PROMPT": "..."}``.
    """

    # Studio and the LangGraph API build a JSON schema of this class; the embedder is Python-only.
    __pydantic_config__ = ConfigDict(arbitrary_types_allowed=True)

    user_id: str
    conversation_id: str | None = None
    data_dir: str | None = None
    chroma_url: str | None = None
    model: BaseChatModel | str | None = None
    embeddings: SkipJsonSchema[Embeddings | None] = None
    # retrieval
    level1_k: int = 10
    coarse_n: int = 30
    max_iterations: int = 1
    context_budget: int = 1500
    llm_token_budget: int = 20000
    llm_batch_size: int = 10
    max_fanout: int = 4
    w_semantic: float = 0.70
    w_temporal: float = 0.15
    w_robustness: float = 0.15
    decay_tau_days: float = 365.0
    decay_eta: float = 0.5
    gate_threshold: float = 0.55
    episode_prior: float = 0.15
    neighbour_share: float = 0.4
    speaker_prior: float = 0.7
    diversity: float = 0.15
    now: datetime | None = None
    generate_answer: bool = True
    # ingestion
    max_episode_turns: int = 12
    min_episode_turns: int = 3
    episode_overlap: int = 1
    # LLM calls
    llm_timeout_s: float = 60.0
    llm_retries: int = 2
    llm_max_tokens: int = 1024
    prompts: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.now, str):  # Studio and the API send JSON strings
            from memstrata.memory.timeparse import parse_timestamp

            parsed = parse_timestamp(self.now)
            if parsed is None:
                msg = f"Context.now: cannot parse {self.now!r} as a time"
                raise ValueError(msg)
            self.now = parsed
        if not isinstance(self.user_id, str) or not self.user_id.strip():
            msg = "Context.user_id is required: pass the user whose memory this run reads or writes"
            raise ValueError(msg)
        for name in ("level1_k", "coarse_n", "context_budget", "max_fanout", "llm_batch_size"):
            if getattr(self, name) < 1:
                msg = f"Context.{name} must be >= 1, got {getattr(self, name)}"
                raise ValueError(msg)
        if self.max_iterations < 0 or self.llm_token_budget < 0:
            msg = "Context.max_iterations and Context.llm_token_budget must be >= 0"
            raise ValueError(msg)

    @property
    def llm_mode(self) -> bool:
        """True only when a model is configured explicitly (here or in ``$MEMSTRATA_MODEL``)."""
        return self.model is not None or bool(os.environ.get(MODEL_ENV))

    def prompt(self, name: str, default: str) -> str:
        """A prompt constant, or its override from ``prompts``."""
        return self.prompts.get(name, default)


_STORES: dict[tuple[Any, ...], Any] = {}
_STORES_LOCK = threading.Lock()


def resolve_store(ctx: Context) -> Any:
    """The :class:`MemoryStore` for this context, cached per location and embedder."""
    from memstrata.memory.store import MemoryStore

    key = _store_key(ctx)
    url, path, _ = key
    with _STORES_LOCK:
        if key not in _STORES:
            _STORES[key] = MemoryStore(path=path, url=url, embeddings=ctx.embeddings)
        return _STORES[key]


def release_store(ctx: Context) -> None:
    """Forget the cached store of this context (the bench opens one per conversation)."""
    from memstrata.memory.search import forget_store

    with _STORES_LOCK:
        store = _STORES.pop(_store_key(ctx), None)
    if store is not None:
        forget_store(store)


def _store_key(ctx: Context) -> tuple[str | None, str | None, int | None]:
    url = ctx.chroma_url or os.environ.get(CHROMA_URL_ENV)
    path = None if url else str(Path(ctx.data_dir).expanduser() if ctx.data_dir else default_data_dir())
    return url, path, id(ctx.embeddings) if ctx.embeddings is not None else None


async def aresolve_store(ctx: Context) -> Any:
    """:func:`resolve_store` off the event loop: opening a store creates folders and a Chroma client.

    An already-open store is returned at once (no thread hop on the hot path).
    """
    with _STORES_LOCK:
        store = _STORES.get(_store_key(ctx))
    return store if store is not None else await asyncio.to_thread(resolve_store, ctx)


def resolve_model(ctx: Context) -> BaseChatModel | None:
    """The chat model for LLM mode, or ``None`` offline.

    A model instance is used as is; a name (from ``Context.model`` or
    ``$MEMSTRATA_MODEL``) builds a ``ChatOpenAI`` that reads
    ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` for the endpoint.
    """
    model = ctx.model if ctx.model is not None else os.environ.get(MODEL_ENV) or None
    if model is None or isinstance(model, BaseChatModel):
        return model
    from langchain_openai import ChatOpenAI

    base_url = os.environ.get("OPENAI_BASE_URL")
    local = bool(base_url) and "api.openai.com" not in base_url
    return ChatOpenAI(
        model=str(model), timeout=ctx.llm_timeout_s, max_retries=0, stream_usage=True,
        max_tokens=ctx.llm_max_tokens,
        # llama.cpp, vLLM and Ollama read max_tokens, not OpenAI's newer max_completion_tokens.
        extra_body={"max_tokens": ctx.llm_max_tokens} if local else None,
        api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",  # local servers take any key
    )
