"""The one settings object both graphs read from ``runtime.context``.

Every tunable of memstrata is a field here, grouped in sections (where the data
lives, planning, the light module, the gate, the deep module, the follow-up,
reflection, scoring, packing, ingestion, LLM calls); each field's description
is what LangGraph Studio shows. Precedence is explicit value, then environment
variable, then built-in default. Nothing is created here: the store, the
embedder and the model are built on first use by :mod:`memstrata.runtime`
(but a model name that could not be called, OpenAI's API with no
``OPENAI_API_KEY``, is refused as the context is made).

Example:
    >>> ctx = Context(user_id="alice")
    >>> ctx.level1_k, ctx.coarse_n, ctx.llm_mode
    (10, 30, False)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime
from difflib import SequenceMatcher
from pathlib import Path
from typing import Annotated, Any, Literal

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from pydantic import ConfigDict, Field, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema

DATA_DIR_ENV = "MEMSTRATA_DATA_DIR"
CHROMA_URL_ENV = "MEMSTRATA_CHROMA_URL"
MODEL_ENV = "MEMSTRATA_MODEL"
INGEST_MODEL_ENV = "MEMSTRATA_INGEST_MODEL"
BASE_URL_ENV = "MEMSTRATA_BASE_URL"
# The OpenAI SDK's variable, then LangChain's older one: read after memstrata's, as ChatOpenAI read them before.
OPENAI_BASE_URL_ENVS = ("OPENAI_BASE_URL", "OPENAI_API_BASE")
# What Studio and the API see of a model setting: a name or nothing (a model object is Python-only). Without it, two
# fields of type BaseChatModel make pydantic try, and fail, to build BaseChatModel's JSON schema.
MODEL_JSON_SCHEMA = WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "null"}]})


def default_data_dir() -> Path:
    """``$MEMSTRATA_DATA_DIR``, else ``~/.memstrata``."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path.home() / ".memstrata").expanduser()


def _s(section: str, description: str) -> Any:
    """A field's description and section, as the JSON schema (and Studio) shows them."""
    return Field(description=f"[{section}] {description}", json_schema_extra={"section": section})


def _user_required(schema: dict[str, Any]) -> None:
    """The JSON schema marks ``user_id`` required (Studio asks for it), though the class gives it an empty default."""
    schema["required"] = sorted({*schema.get("required", []), "user_id"})


@dataclass(kw_only=True)
class Context:
    """Every setting of an ingestion or retrieval run; see each field's description."""

    # Studio and the LangGraph API build a JSON schema of this class; the embedder is Python-only.
    __pydantic_config__ = ConfigDict(arbitrary_types_allowed=True, json_schema_extra=_user_required)

    # ---- where the memory lives -------------------------------------------------
    # Required, but given an empty default so that a run without it (Studio, the API) gets the clear error below
    # rather than the dataclass's TypeError.
    user_id: Annotated[str, _s("tenant", "the user whose memory this run reads or writes; required")] = ""
    conversation_id: Annotated[
        str | None,
        _s("tenant", "retrieval: search only this conversation; ingestion: the id of inputs that carry none"),
    ] = None
    data_dir: Annotated[
        str | None,
        _s(
            "store",
            "embedded store folder (default $MEMSTRATA_DATA_DIR or ~/.memstrata); ignored when chroma_url is set",
        ),
    ] = None
    chroma_url: Annotated[str | None, _s("store", "a Chroma server URL instead of the embedded store")] = None
    embeddings: SkipJsonSchema[
        Annotated[
            Embeddings | None,
            _s(
                "store",
                "Python only: the embedder (default the packaged all-MiniLM-L6-v2); a store remembers which one "
                "wrote it",
            ),
        ]
    ] = None
    snapshot_refresh_s: Annotated[
        float,
        _s("store", "seconds a search snapshot is trusted before a count check looks for other processes' writes"),
    ] = 5.0
    snapshot_max_turns: Annotated[
        int,
        _s(
            "store",
            "above this many raw turns of the searched scope, a query reads its candidates from the store (HNSW "
            "and the word index) and builds a snapshot of those alone, instead of holding the whole memory in "
            "memory; 0 always does so",
        ),
    ] = 20000
    bounded_dense_k: Annotated[
        int, _s("store", "bounded path: turns and turn views each query reads through Chroma's HNSW index")
    ] = 200
    bounded_event_k: Annotated[
        int, _s("store", "bounded path: units of every other searched kind each query reads through the HNSW index")
    ] = 60
    bounded_lexical_k: Annotated[
        int,
        _s(
            "store",
            "bounded path: units per kind read for each content word of a query (the word index's best BM25 "
            "matches of the words together: the word index embedded, the units' tagged terms on a server)",
        ),
    ] = 40
    bounded_lexical_terms: Annotated[
        int, _s("store", "bounded path: content words of a query (its longest) whose matches are read")
    ] = 6
    bounded_entity_facts: Annotated[int, _s("store", "bounded path: facts read for the entities a query names")] = 200
    snapshot_large_recheck_s: Annotated[
        float,
        _s(
            "store",
            "seconds a scope found larger than snapshot_max_turns is trusted to stay so, and its latest memory time "
            "(the bounded path's time anchor) to stay put (the size check "
            "reads up to snapshot_max_turns ids: from the word index embedded, 25 ms at 1M turns; from Chroma on a "
            "server, 12 s at 100k turns; "
            "the bounded path is right at any size, so a scope that shrank meanwhile only costs speed)",
        ),
    ] = 600.0
    query_vector_cache: Annotated[int, _s("store", "query vectors this process keeps for repeated texts")] = 2048
    # A LoCoMo conversation's user (419 turns, 2,113 searched units) holds about 16 MB with MiniLM: 12.1 MB measured
    # with tracemalloc after eight queries besides the vectors, and 3.9 MB of 384-dim vectors; 512 MB keeps about 30
    # such users warm beside the model, within a serving process of 1.5 GB.
    cache_mb: Annotated[
        float,
        _s(
            "store",
            "megabytes of search state (snapshots, working sets, active tiers) a process keeps per store, "
            "estimated; beyond it the least recently used user's is dropped and read again at its next query",
        ),
    ] = 512.0
    bounded_sessions: Annotated[
        int, _s("store", "bounded path: whole sessions (turns and views) loaded for one retrieval")
    ] = 80
    bounded_cache_units: Annotated[
        int,
        _s(
            "store",
            "bounded path: turns and views of recently read sessions this process keeps for later "
            "retrievals (checked against the store before use; 0 keeps none)",
        ),
    ] = 50_000
    gc_freeze: Annotated[
        bool,
        _s(
            "store",
            "after a whole-memory snapshot is built, freeze the process's objects out of Python's garbage "
            "collector scans (process-wide; unfreezes and collects first): full collections of a large "
            "snapshot cost a query after a write several tenths of a second",
        ),
    ] = True
    blas_threads: Annotated[
        int | None,
        _s(
            "store",
            "numpy BLAS threads of this process, set when a store opens (process-wide; None leaves them "
            "alone). memstrata's matrix products are small, and multi-threaded OpenBLAS spins threads that "
            "slow the embedding model on a few cores",
        ),
    ] = 1
    # ---- the model ------------------------------------------------------------------
    model: Annotated[
        BaseChatModel | str | None,
        MODEL_JSON_SCHEMA,
        _s(
            "llm",
            "a chat model or model name (default $MEMSTRATA_MODEL) for retrieval and the answer, and for "
            "ingestion unless ingest_model is set; LLM mode is on only when a model is set. A name is called "
            "through OpenAI's API (it needs $OPENAI_API_KEY) or at base_url",
        ),
    ] = None
    ingest_model: Annotated[
        BaseChatModel | str | None,
        MODEL_JSON_SCHEMA,
        _s(
            "llm",
            "a chat model or model name for every model call of ingestion (episodes, summaries, facts, "
            "entities, themes, personas, the tree, importance) (default $MEMSTRATA_INGEST_MODEL, else model); "
            "set without model, only ingestion runs in LLM mode and retrieval stays offline",
        ),
    ] = None
    base_url: Annotated[
        str | None,
        _s(
            "llm",
            "the OpenAI-compatible server (llama.cpp, vLLM, Ollama...) that a model given by name is called at, "
            "e.g. http://localhost:8080/v1 (default $MEMSTRATA_BASE_URL, then $OPENAI_BASE_URL or "
            "$OPENAI_API_BASE, else OpenAI's API); such a server needs no $OPENAI_API_KEY",
        ),
    ] = None
    llm_token_budget: Annotated[int, _s("llm", "LLM tokens (prompt + completion) one query may spend")] = 20000
    llm_timeout_s: Annotated[float, _s("llm", "per-call timeout of a model call")] = 60.0
    llm_retries: Annotated[int, _s("llm", "transport retries of a model call")] = 2
    llm_max_tokens: Annotated[int, _s("llm", "cap on the completion tokens of one model call")] = 1024
    max_fanout: Annotated[int, _s("llm", "the most parallel Send branches (summaries, selection batches)")] = 4
    prompts: Annotated[
        dict[str, str], _s("llm", 'overrides of prompt constants by name, e.g. {"REFLECT_PROMPT": "..."}')
    ] = field(default_factory=dict)
    generate_answer: Annotated[bool, _s("llm", "with a model, write an answer (retrieve turns this off)")] = True
    llm_retrieval: Annotated[
        Literal["full", "chat"],
        _s(
            "llm",
            "with a model: 'full' lets it plan, self-check, select and follow up during retrieval; 'chat' "
            "retrieves offline and makes one streamed answer call (the chat preset)",
        ),
    ] = "full"
    llm_depth: Annotated[
        int | None,
        _s(
            "llm",
            "sequential model calls one query makes up to its first answer token, at most (parallel branches "
            "count once); a step that would leave no room for the answer runs its offline method (None: no bound)",
        ),
    ] = 4
    # ---- planning (H-Mem) -------------------------------------------------------------
    max_sub_queries: Annotated[int, _s("planning", "the original query plus sub-queries, at most")] = 4
    sub_query_weight: Annotated[float, _s("planning", "score weight of a sub-query relative to the original")] = 0.95
    scope_kinds: Annotated[
        dict[str, list[str]] | None,
        _s("planning", "scope -> unit kinds it searches directly; default: each kind's declared scopes"),
    ] = None
    now: Annotated[
        datetime | None, _s("planning", "reference time for relative dates and decay; default: the user's latest turn")
    ] = None
    # ---- HyMem light module ---------------------------------------------------------------
    level1_k: Annotated[int, _s("light", "Level-1 events the light module reads per query (HyMem k)")] = 10
    level1_rank: Annotated[
        Literal["own", "turns", "fused"],
        _s(
            "light",
            "how the light module orders summaries: by their own text match, by their best linked raw "
            "turn, or both fused by rank",
        ),
    ] = "fused"
    direct_turns: Annotated[
        int, _s("light", "raw turns a Short or Mixed query reads directly, besides those reached through events")
    ] = 30
    window_turns: Annotated[
        int,
        _s(
            "light",
            "for a query whose time hint selects tree windows: its best turns inside them, which join the "
            "candidates and enter the context first (H-Mem: evidence inside the window is preferred; "
            "0 leaves it to the temporal score)",
        ),
    ] = 3
    # ---- the gate ---------------------------------------------------------------------------
    gate_threshold: Annotated[
        float, _s("gate", "offline: the best light turn's own similarity (0-1) needed to stay on the light path")
    ] = 0.55
    gate_coverage: Annotated[
        float, _s("gate", "offline: share of the question's words the light evidence must cover")
    ] = 0.999
    gate_texts: Annotated[int, _s("gate", "offline: best light turns whose words count for coverage")] = 15
    light_check: Annotated[
        Literal["streamed", "structured"],
        _s(
            "gate",
            "with a model and an answer to write: 'streamed' makes the light self-check and the light answer one "
            "streamed call, which ends the query; 'structured' is HyMem's Algorithm 1 as published (a structured "
            "verdict whose light answer reflection grades)",
        ),
    ] = "streamed"
    # ---- HyMem deep module ------------------------------------------------------------------
    coarse_n: Annotated[int, _s("deep", "Level-1 events the deep module considers (HyMem N)")] = 30
    llm_batch_size: Annotated[int, _s("deep", "Level-1 entries per parallel LLM selection branch (HyMem d)")] = 10
    select_fallback: Annotated[int, _s("deep", "entries a failed LLM selection keeps from its batch")] = 3
    selection_priority: Annotated[
        float,
        _s(
            "deep",
            "with a model: score added to the turns of the episodes it selected, so they enter the context "
            "first (0 ranks by score alone)",
        ),
    ] = 1.0
    backtrack_raw_top: Annotated[int, _s("deep", "best raw turns per query added to the backtracked ones")] = 60
    backtrack_keep: Annotated[int, _s("deep", "candidates kept per query, at least")] = 120
    backtrack_keep_per_token: Annotated[
        float, _s("deep", "candidates kept per token of context budget, when that is more")
    ] = 0.125
    duplicate_threshold: Annotated[
        float, _s("deep", "cosine above which a lower-ranked turn counts as a near-duplicate and is skipped")
    ] = 0.95
    # ---- follow-up (H-Mem) ----------------------------------------------------------------------
    follow_up_weight: Annotated[float, _s("follow_up", "score weight of the missing-info query")] = 0.9
    follow_up_texts: Annotated[int, _s("follow_up", "best candidates the missing-info check reads")] = 10
    follow_up_turns: Annotated[int, _s("follow_up", "raw turns the missing-info query adds")] = 10
    follow_up_evidence: Annotated[int, _s("follow_up", "best candidates a sub-query's reasoning branch carries")] = 80
    anchor_names: Annotated[
        int,
        _s(
            "follow_up",
            "offline: names and places of the best evidence a missing-info query or a dependent "
            "rewrite is anchored on, at most",
        ),
    ] = 4
    anchor_hits: Annotated[
        int,
        _s(
            "follow_up",
            "offline: best evidence whose names anchor a missing-info query or a dependent sub-query's rewrite",
        ),
    ] = 3
    reason_tokens: Annotated[
        int, _s("follow_up", "with a model: evidence tokens each sub-query's answer and missing-info call reads")
    ] = 800
    # ---- reflection (HyMem) ---------------------------------------------------------------------
    max_iterations: Annotated[int, _s("reflect", "reflection rounds at most")] = 1
    reflect_coverage: Annotated[
        float,
        _s(
            "reflect",
            "offline: share of a sub-query's words the evidence must cover to count as answered; below it "
            "a rewrite round runs (it comes after the follow-up has already searched for the missing "
            "words, so it is kept for evidence that misses much of the question)",
        ),
    ] = 0.6
    reflect_texts: Annotated[int, _s("reflect", "offline: best candidates the coverage check reads")] = 20
    rewrite_terms: Annotated[
        int, _s("reflect", "offline: feedback terms from the evidence a rewrite adds to an uncovered sub-query")
    ] = 4
    rewrite_decay: Annotated[float, _s("reflect", "score weight of a rewrite, to the power of its round")] = 0.9
    # ---- scoring (H-Mem Eq. 1-3 and the turn views) -------------------------------------------
    w_semantic: Annotated[float, _s("scoring", "H-Mem Eq. 3 weight of the semantic score")] = 0.70
    w_temporal: Annotated[float, _s("scoring", "H-Mem Eq. 3 weight of temporal relevance")] = 0.15
    w_robustness: Annotated[float, _s("scoring", "H-Mem Eq. 3 weight of robustness (decay)")] = 0.15
    temporal_lambda: Annotated[float, _s("scoring", "H-Mem Eq. 1: overlap share against centre distance")] = 0.5
    decay_tau_days: Annotated[float, _s("scoring", "H-Mem Eq. 2 time constant of the decay, in days")] = 365.0
    event_fusion: Annotated[
        Literal["rank", "eq3"],
        _s(
            "scoring",
            "how summaries, tree nodes and facts are scored: 'rank' (dense and BM25 fused by rank), or 'eq3' "
            "(H-Mem's Eq. 3 on them too: that score as S, with T from their time span and R from their "
            "reinforcement)",
        ),
    ] = "rank"
    decay_eta: Annotated[
        float,
        _s(
            "scoring",
            "H-Mem Eq. 2 reinforcement strength: how much each consolidation the temporal tree records "
            "(n_m) slows the decay of the turns it holds",
        ),
    ] = 0.5
    episode_prior: Annotated[
        float, _s("scoring", "share of a turn's semantic score taken from the best Level-1 event linking to it")
    ] = 0.15
    neighbour_share: Annotated[
        float, _s("scoring", "a turn scores at least this share of its best neighbour (answers follow questions)")
    ] = 0.4
    speaker_prior: Annotated[float, _s("scoring", "relative boost of turns spoken by a speaker the query names")] = 0.7
    when_prior: Annotated[
        float, _s("scoring", "relative boost, for a question asking for a time, of turns that tell one")
    ] = 0.3
    window_widths: Annotated[
        tuple[int, ...], _s("scoring", "neighbours each side of the BM25 window views of a turn")
    ] = (0, 1, 2, 4, 8)
    # ---- packing ----------------------------------------------------------------------------------
    context_budget: Annotated[int, _s("packing", "tokens of the returned context (MiniLM tokenizer)")] = 1500
    exclude_turns: Annotated[
        tuple[str, ...],
        _s("packing", "ids of turns left out of the context (those a chat's thread already shows the model)"),
    ] = ()
    diversity: Annotated[
        float, _s("packing", "MMR penalty on turns similar to ones already ranked; 0 ranks by score alone")
    ] = 0.15
    mmr_head: Annotated[int, _s("packing", "candidates MMR looks at")] = 300
    mmr_tokens_per_pick: Annotated[
        int, _s("packing", "MMR reorders context_budget / this many slots (a turn costs about 20 tokens at least)")
    ] = 20
    # ---- ingestion ---------------------------------------------------------------------------------
    max_episode_turns: Annotated[int, _s("ingestion", "offline segmentation: longest episode")] = 12
    min_episode_turns: Annotated[int, _s("ingestion", "offline segmentation: shortest episode")] = 3
    episode_overlap: Annotated[int, _s("ingestion", "turns an episode repeats from its predecessor")] = 1
    episode_max_gap_minutes: Annotated[float, _s("ingestion", "a longer silence always starts an episode")] = 30.0
    segment_window: Annotated[int, _s("ingestion", "turns each side of a gap the topic-shift score compares")] = 2
    segment_depth: Annotated[
        float, _s("ingestion", "a topic cut needs similarity this many std below the session mean")
    ] = 0.5
    stamp_untimed: Annotated[
        bool,
        _s(
            "ingestion",
            "a message written without a time gets the write's time (Context.now, else the clock), so it is "
            "dated, matches since/until and the session gap applies; False keeps it untimed",
        ),
    ] = True
    session_gap_hours: Annotated[
        float,
        _s(
            "ingestion",
            "messages without a session: a longer silence since the conversation's latest message starts "
            "a new session (across calls too)",
        ),
    ] = 6.0
    episode_quiet_minutes: Annotated[
        float,
        _s(
            "ingestion",
            "a session's open tail closes into episodes once its latest message is this much older than "
            "the write's present (Context.now, else the write's newest message time, else the clock); messages "
            "without a time never go quiet. Closing also "
            "happens at a boundary, at max_episode_turns, when a later session starts, or on request",
        ),
    ] = 30.0
    context_width: Annotated[int, _s("ingestion", "neighbours each side in a turn's contextual view")] = 1
    context_vectors: Annotated[
        Literal["encoded", "pooled"],
        _s(
            "ingestion",
            "a contextual view's vector: its text encoded by the embedder, or its turns' vectors pooled "
            "(no model call; neighbours weigh half)",
        ),
    ] = "pooled"
    span_vectors: Annotated[
        Literal["encoded", "facts", "pooled"],
        _s(
            "ingestion",
            "the vector of an offline fact or extractive summary (a quote of its turns): 'pooled' from the token "
            "vectors of the pass that encoded its turns (late chunking; no encoder call) for both, 'facts' for "
            "facts only (summaries encoded), 'encoded' for neither. Off by default: the cosine floors that build "
            "the persona, supersessions, themes and the tree were set on encoded vectors, and pooled ones move them",
        ),
    ] = "encoded"
    summary_max_sentences: Annotated[int, _s("ingestion", "extractive summary: sentences at most")] = 5
    summary_max_words: Annotated[int, _s("ingestion", "extractive summary: words at most")] = 90
    embed_batch: Annotated[int, _s("ingestion", "units embedded and written per batch")] = 256
    # ---- facts and H-Mem's entity graph --------------------------------------------------------------
    entity_typo_ratio: Annotated[
        float, _s("entities", "rapidfuzz ratio at or above which two names of compatible type are one entity")
    ] = 90.0
    supersede_pairs: Annotated[
        int,
        _s(
            "entities",
            "with a model: supersession pairs put to the model per conversation and write, all in one call (the "
            "rule decides the rest)",
        ),
    ] = 20
    fact_k: Annotated[int, _s("entities", "facts the light module reads per query, beside the Level-1 summaries")] = 20
    graph_hops: Annotated[int, _s("entities", "hops of expansion from the entities a query names (0 turns it off)")] = 2
    graph_facts: Annotated[
        int, _s("entities", "facts reached through the entity graph that add their turns to the candidates, per query")
    ] = 30
    graph_hop_decay: Annotated[float, _s("entities", "weight kept per hop of graph expansion")] = 0.5
    graph_vector_seeds: Annotated[
        int,
        _s(
            "entities",
            "entities nearest the query's vector (the mean of their facts') that also seed the graph expansion, "
            "beside those the query names (H-Mem's seeds by vector; 0: by name only)",
        ),
    ] = 0
    graph_seed_floor: Annotated[
        float, _s("entities", "the least cosine to the query of an entity that seeds by vector")
    ] = 0.35
    entity_recent_events: Annotated[int, _s("entities", "latest facts an entity's profile lists")] = 20
    graph_profile_facts: Annotated[
        int,
        _s(
            "entities",
            "H-Mem's entity profiles in retrieval: up to this many facts of each named entity's profile (its "
            "attributes, then its recent events, best match first) take the first of the graph_facts slots; 0: "
            "unused",
        ),
    ] = 0
    graph_tree_walk: Annotated[
        bool,
        _s(
            "entities",
            "H-Mem §3.3: from the leaf summaries the graph reaches, walk up the temporal tree; their week, month "
            "and year nodes join the deep module's coarse pool",
        ),
    ] = False
    superseded_weight: Annotated[
        float, _s("entities", "score factor of a superseded fact, unless the query asks about the past")
    ] = 0.8
    # ---- themes (xMemory's themes, Bi-Mem's scenes) ---------------------------------------------------
    theme_tau: Annotated[
        float,
        _s(
            "themes",
            "the first grouping links two facts whose cosine similarity exceeds this (Bi-Mem Eq. 5; the "
            "paper's 0.2 with the same encoder), among each fact's theme_knn nearest",
        ),
    ] = 0.2
    theme_attach: Annotated[
        float,
        _s(
            "themes",
            "a new fact joins the theme whose centroid is most similar if the cosine reaches this, else it "
            "starts a theme (xMemory's attach); the same bar as an edge of the first grouping",
        ),
    ] = 0.2
    theme_cap: Annotated[
        int,
        _s(
            "themes",
            "a theme with more facts is split by the candidate that maximises f(P) (xMemory's cap, its Table 8: 12)",
        ),
    ] = 12
    theme_floor: Annotated[
        int, _s("themes", "a theme with fewer facts is merged into the neighbour that maximises f(P)")
    ] = 2
    theme_scale_floor: Annotated[
        float,
        _s(
            "themes",
            "xMemory Eq. 3's epsilon: the least spread of nearest-theme similarities that counts (with few "
            "themes their median absolute deviation can be nearly 0)",
        ),
    ] = 0.05
    theme_max_steps: Annotated[int, _s("themes", "splits and merges of one conversation per ingest, at most")] = 1000
    theme_words: Annotated[int, _s("themes", "words of a theme's text, at most")] = 80
    theme_knn: Annotated[
        int,
        _s(
            "themes",
            "similarity edges kept per fact and per theme in the edge store (xMemory's kNN graph), the "
            "neighbours per fact the first grouping propagates over, and the neighbours per candidate of Eq. 4 "
            "at query time",
        ),
    ] = 5
    theme_llm_calls: Annotated[
        int,
        _s("themes", "with a model: theme summaries put to the model per ingest (the extractive text does the rest)"),
    ] = 40
    # ---- theme retrieval (xMemory's Stage I and II, Bi-Mem's spreading) ----------------------------------
    theme_llm_per_episode: Annotated[
        int,
        _s(
            "themes",
            "with a model: theme summaries per newly closed episode of the write, at most (a message's cost "
            "stays flat however many themes there are)",
        ),
    ] = 2
    theme_search_k: Annotated[
        int, _s("theme retrieval", "best-matching themes a query starts from (0 turns the theme path off)")
    ] = 8
    theme_fact_seeds: Annotated[
        int,
        _s(
            "theme retrieval",
            "best-matching facts whose themes join the candidates (Bi-Mem's spreading: a fact evokes its "
            "scene; only with theme_spread > 0 and theme_joint_k 0)",
        ),
    ] = 10
    theme_joint_k: Annotated[
        int,
        _s(
            "theme retrieval",
            "with k > 0, Bi-Mem's Eq. 9: the k best facts, themes and persona dimensions ranked together (half "
            "cosine, half BM25) replace the separate theme and fact-seed rankings; its facts are admitted, evoke "
            "their themes, and its best persona dimension is the one the persona path takes; 0 keeps them apart",
        ),
    ] = 0
    theme_select: Annotated[
        Literal["eq4", "top"],
        _s(
            "theme retrieval",
            "how themes and facts are chosen among the candidates: 'eq4' (xMemory Eq. 4, coverage "
            "and relevance on a kNN graph built among the candidates) or 'top' (best match only)",
        ),
    ] = "top"
    theme_alpha: Annotated[
        float, _s("theme retrieval", "xMemory Eq. 4's alpha: the weight of new coverage against relevance")
    ] = 0.5
    theme_coverage: Annotated[
        float, _s("theme retrieval", "Eq. 4 stops once its picks cover this share of the candidates")
    ] = 0.8
    theme_pick: Annotated[int, _s("theme retrieval", "themes Stage I picks per query, at most")] = 8
    theme_fact_pick: Annotated[int, _s("theme retrieval", "facts Stage I picks per query, at most")] = 24
    theme_spread: Annotated[
        int,
        _s(
            "theme retrieval",
            "Bi-Mem's m: a picked theme brings m of its facts (the paper's range 1-3; which ones: "
            "theme_fact_order); 0 turns spreading off (a picked theme offers all its facts, no fact evokes a "
            "theme)",
        ),
    ] = 3
    theme_fact_order: Annotated[
        Literal["query", "scene"],
        _s(
            "theme retrieval",
            "which m facts a picked theme brings: 'query' (those that best match the query) or 'scene' "
            "(Bi-Mem's Eq. 10: those nearest the scene's centroid)",
        ),
    ] = "query"
    theme_stage2: Annotated[
        bool,
        _s(
            "theme retrieval",
            "Stage II: from the picked themes' lines (the coarse context), admit the picked facts' episodes, in "
            "order of support, only while they lower the uncertainty: with a model, the reader's own (one "
            "self-check on the themes, then one per episode offered); offline, a proxy (the share of the query's "
            "words neither the themes nor an admitted episode says)",
        ),
    ] = False
    theme_stage2_expand: Annotated[
        bool,
        _s(
            "theme retrieval",
            "xMemory Stage II: an admitted episode's other messages join it only when they lower the "
            "uncertainty further (with a model one more self-check each; offline the proxy)",
        ),
    ] = False
    theme_stage2_checks: Annotated[
        int,
        _s(
            "theme retrieval",
            "with a model, Stage II's self-checks per lookup, at most (each is one model call on the "
            "query's budget; the episodes never offered are not admitted)",
        ),
    ] = 4
    theme_share: Annotated[
        float,
        _s(
            "theme retrieval",
            "share of the context budget the theme path's admitted turns take first (counted at "
            "mmr_tokens_per_pick a turn; the rest is filled in score order; 0: they only lend a "
            "prior and join the candidates)",
        ),
    ] = 0.0
    theme_patience: Annotated[
        int, _s("theme retrieval", "Stage II stops after this many episodes in a row that say nothing new")
    ] = 2
    # ---- persona (Bi-Mem's five dimensions and reflective calibration) -----------------------------------
    persona_cues: Annotated[
        tuple[str, str, str, str, str],
        _s(
            "persona",
            "offline: what each dimension is about (basic_info, interests, personality, values, "
            "relationships, in that order); a speaker's fact joins the dimension whose cue it is nearest",
        ),
    ] = (
        "name, age, job, occupation, work, studies, school, where they live, home town, country, moving house",
        "hobbies, what they like, love or enjoy doing, dislikes, favourite activities, sports, music, books, art",
        "personality traits, feelings, emotions, mood, temperament, being shy, outgoing, kind, anxious, brave",
        "what they believe in, value and care about, goals, dreams, motivation, faith, principles, causes",
        "family, friends, partner, husband, wife, children, parents, siblings, colleagues, mentor, pets",
    )
    persona_floor: Annotated[
        float, _s("persona", "offline: the similarity a fact needs to its nearest dimension cue to join that dimension")
    ] = 0.15
    persona_same: Annotated[
        float, _s("persona", "facts at least this similar count as one item said again (its recurrence)")
    ] = 0.85
    persona_items: Annotated[int, _s("persona", "items per dimension, at most")] = 5
    persona_min_facts: Annotated[
        int, _s("persona", "a speaker gets a persona once this many of their current facts are in closed episodes")
    ] = 3
    persona_llm_calls: Annotated[
        int,
        _s(
            "persona", "with a model: speakers distilled by the model per ingest (Eq. 7; the offline items do the rest)"
        ),
    ] = 4
    persona_llm_growth: Annotated[
        float,
        _s(
            "persona",
            "with a model: the persona is rebuilt once the speaker's current facts reach this many times the "
            "count it was built from (or when a fact it cites stops being current), not at every write",
        ),
    ] = 1.5
    persona_llm_facts: Annotated[
        int, _s("persona", "with a model: a speaker's facts shown to the distillation, at most (most recurrent first)")
    ] = 60
    persona_calibrations: Annotated[
        int,
        _s(
            "persona",
            "with a model: calibration calls per ingest, at most, each checking up to persona_calibration_batch "
            "scenes (themes) against their speaker's persona (Eq. 8: a compensatory condition appended, never a "
            "rewrite); offline there is no calibration",
        ),
    ] = 8
    persona_calibrations_per_episode: Annotated[
        int,
        _s(
            "persona",
            "with a model: calibration calls per newly closed episode of the write, at most (the rest stay due)",
        ),
    ] = 2
    persona_calibration_batch: Annotated[
        int, _s("persona", "with a model: scene checks one calibration call makes, at most (of one speaker or several)")
    ] = 8
    persona_search: Annotated[
        bool,
        _s(
            "persona",
            "retrieval: a question that asks to infer something about a named speaker (would, likely, "
            "might...) gets the best-matching persona dimension as one cited line, and its items' turns "
            "as candidates",
        ),
    ] = True
    persona_share: Annotated[
        float,
        _s(
            "persona",
            "retrieval: the largest share of the context budget the persona line may take (else it is left "
            "out, and the trace says so)",
        ),
    ] = 0.25
    persona_similarity: Annotated[
        float, _s("persona", "retrieval: the similarity the question needs to a dimension's text for its line")
    ] = 0.2
    scene_lines: Annotated[
        int,
        _s(
            "theme retrieval",
            "reader: the themes (Bi-Mem's scenes) the theme path picked that the context opens with, one cited line "
            "each, at most (Bi-Mem's Eq. 11: the reader gets the retrieved scenes); 0: none, the context is turns",
        ),
    ] = 0
    scene_share: Annotated[
        float, _s("theme retrieval", "reader: the largest share of the context budget the scene lines may take")
    ] = 0.15
    # ---- H-Mem's temporal-semantic tree -------------------------------------------------------------
    tree_alphas: Annotated[
        tuple[float, float, float],
        _s(
            "tree",
            "H-Mem alpha: the similarity a child needs to join a week, month or year cluster of its own "
            "window (else it gets a new parent)",
        ),
    ] = (0.8, 0.7, 0.6)
    tree_token_caps: Annotated[
        tuple[int, int, int], _s("tree", "tokens of a week, month and year node's consolidated summary, at most")
    ] = (120, 160, 200)
    tree_node_leaves: Annotated[
        int, _s("tree", "a tree node reaches the raw turns of this many of its most central event summaries")
    ] = 3
    tree_k: Annotated[int, _s("tree", "tree nodes the light module reads per Long or Mixed query")] = 5
    tree_llm_calls: Annotated[
        int,
        _s("tree", "with a model: node consolidations put to the model per ingest (the extractive one does the rest)"),
    ] = 40

    # ---- HMO's tiers (memstrata.memory.tiers) ---------------------------------------------------------
    tiers: Annotated[
        bool,
        _s(
            "tiers",
            "retrieval: a user past snapshot_max_turns is searched cache first, then buffer, then archive "
            "(the bounded path), going deeper only when the gate says so; off by default: on planted questions "
            "spread evenly over a 10k- and a 100k-turn user it found as much as the archive alone but was slower, "
            "since almost every question went on to the archive (BENCHMARKS history); "
            "ingestion scores and tiers records only when this is on (off: HMO costs a write nothing; "
            "Memstrata.score_tiers or `memstrata reindex --tiers` scores what was written meanwhile)",
        ),
    ] = False
    tier_recent_sessions: Annotated[int, _s("tiers", "the cache holds every record of this many latest sessions")] = 8
    tier_pivotal: Annotated[
        int, _s("tiers", "the cache also holds this many records of highest priority (HMO's top-k pivotal memories)")
    ] = 64
    tier_buffer: Annotated[int, _s("tiers", "records of high priority in the buffer (tier 2)")] = 256
    tier_probe_k: Annotated[
        int,
        _s(
            "tiers",
            "offline: a tier answers only if it holds the archive's this many nearest summaries to each query "
            "(one HNSW read per tier); 0 leaves the decision to the retrieval confidence alone",
        ),
    ] = 3
    tier_refresh_s: Annotated[
        float,
        _s(
            "tiers",
            "seconds a process searches an active tier's held sessions before reading its membership again: use "
            "moves records at once, searches see it after this (a promoted record stays findable in the archive)",
        ),
    ] = 120.0
    tier_alpha: Annotated[float, _s("tiers", "HMO Eq. 5: weight of the initial importance")] = 0.6
    tier_beta: Annotated[float, _s("tiers", "HMO Eq. 5: weight of the persona alignment")] = 0.4
    tier_decay_days: Annotated[
        float, _s("tiers", "HMO Eq. 5: the base decay constant tau in days (more recalls flatten it)")
    ] = 30.0
    tier_drift: Annotated[
        float,
        _s(
            "tiers",
            "HMO Eq. 6: a conversation's records in tiers 1-2 are re-ranked when its persona's cosine distance from "
            "its own anchor passes this",
        ),
    ] = 0.05
    importance_batch: Annotated[
        int,
        _s("tiers", "with a model: records scored per importance call (one call per this many newly closed episodes)"),
    ] = 8

    def __post_init__(self) -> None:
        if isinstance(self.now, str):  # Studio and the API send JSON strings
            from memstrata.memory.timeparse import parse_timestamp

            parsed = parse_timestamp(self.now)
            if parsed is None:
                msg = f"Context.now: cannot parse {self.now!r} as a time"
                raise ValueError(msg)
            self.now = parsed
        if not isinstance(self.user_id, str) or not self.user_id.strip():
            msg = (
                "Context.user_id is required: pass the user whose memory this run reads or writes "
                '(in Studio or the API, as the run\'s context: {"user_id": "..."})'
            )
            raise ValueError(msg)
        if isinstance(self.exclude_turns, str) or not all(isinstance(t, str) for t in self.exclude_turns):
            msg = f"Context.exclude_turns takes a list of turn ids (strings), got {self.exclude_turns!r}"
            raise ValueError(msg)
        self.exclude_turns = tuple(self.exclude_turns)
        self.window_widths = tuple(self.window_widths)
        self.tree_alphas = tuple(self.tree_alphas)  # type: ignore[assignment]
        self.tree_token_caps = tuple(self.tree_token_caps)  # type: ignore[assignment]
        self.persona_cues = tuple(self.persona_cues)  # type: ignore[assignment]
        if len(self.persona_cues) != 5:
            msg = (
                "Context.persona_cues: one cue per dimension "
                "(basic_info, interests, personality, values, relationships)"
            )
            raise ValueError(msg)
        for name in (
            "level1_k",
            "coarse_n",
            "context_budget",
            "max_fanout",
            "llm_batch_size",
            "max_sub_queries",
            "embed_batch",
            "max_episode_turns",
            "min_episode_turns",
            "importance_batch",
        ):
            if getattr(self, name) < 1:
                msg = f"Context.{name} must be >= 1, got {getattr(self, name)}"
                raise ValueError(msg)
        if (
            min(self.tier_recent_sessions, self.tier_pivotal, self.tier_buffer, self.tier_refresh_s) < 0
            or self.tier_decay_days <= 0
        ):
            msg = (
                "Context.tier_recent_sessions, tier_pivotal, tier_buffer and tier_refresh_s must be >= 0 "
                "and tier_decay_days > 0"
            )
            raise ValueError(msg)
        if self.max_iterations < 0 or self.llm_token_budget < 0:
            msg = "Context.max_iterations and Context.llm_token_budget must be >= 0"
            raise ValueError(msg)
        self._check_model_names()

    def _check_model_names(self) -> None:
        """Refuse a model name that cannot be called (OpenAI's API with no key) now, before any work, rather
        than after every node's call has failed into its fallback. A model object is never checked.
        """
        from memstrata.runtime.llm import check_model_name

        for ingest in (False, True):
            source, spec = self.model_setting(ingest=ingest)
            if isinstance(spec, str):
                check_model_name(spec, self.resolved_base_url, source=source)

    @property
    def llm_mode(self) -> bool:
        """True when retrieval and the answer call a model: ``model`` (or ``$MEMSTRATA_MODEL``) is set."""
        return self.model_setting()[1] is not None

    @property
    def ingest_llm_mode(self) -> bool:
        """True when ingestion calls a model: ``ingest_model`` or ``model`` (or their environment variables) is set."""
        return self.model_setting(ingest=True)[1] is not None

    def model_setting(self, *, ingest: bool = False) -> tuple[str, BaseChatModel | str | None]:
        """The model retrieval (or, with ``ingest``, ingestion) calls, and the setting it came from.

        Retrieval: ``model``, else ``$MEMSTRATA_MODEL``. Ingestion: ``ingest_model``, else
        ``$MEMSTRATA_INGEST_MODEL``, else what retrieval uses. A value set here wins over the environment;
        an empty name means no model (``model=""`` keeps a run offline whatever ``$MEMSTRATA_MODEL`` says).

        Example:
            >>> ctx = Context(user_id="u", model="small", ingest_model="big", base_url="http://localhost:8080/v1")
            >>> ctx.model_setting(), ctx.model_setting(ingest=True)
            (('model', 'small'), ('ingest_model', 'big'))
        """
        chain = [("ingest_model", self.ingest_model, INGEST_MODEL_ENV)] if ingest else []
        for name, value, env in [*chain, ("model", self.model, MODEL_ENV)]:
            if value is not None:
                return name, None if isinstance(value, str) and not value else value
            if os.environ.get(env):
                return f"${env}", os.environ[env]
        return "model", None

    @property
    def resolved_base_url(self) -> str | None:
        """``base_url``, else ``$MEMSTRATA_BASE_URL``, else ``$OPENAI_BASE_URL`` (or LangChain's older
        ``$OPENAI_API_BASE``); ``None`` means OpenAI's own API.
        """
        if self.base_url is not None:
            return self.base_url or None
        return next((os.environ[e] for e in (BASE_URL_ENV, *OPENAI_BASE_URL_ENVS) if os.environ.get(e)), None)

    def prompt(self, name: str) -> str:
        """A prompt constant of :mod:`memstrata.prompts` by name, or its override from ``prompts``."""
        if name in self.prompts:
            return self.prompts[name]
        from memstrata.prompts import PROMPTS

        try:
            return PROMPTS[name]
        except KeyError:
            msg = f"unknown prompt {name!r}; known prompts: {sorted(PROMPTS)}"
            raise KeyError(msg) from None


def default(name: str) -> Any:
    """The built-in default of the setting ``name``: for pure code that takes the setting as an argument and
    has a default of its own (tree alphas, window widths), so the value is written down once, here.
    """
    for f in fields(Context):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            msg = f"the setting {name!r} has no default"  # none such today: every field of Context has one
            raise TypeError(msg)
    msg = f"Context has no setting {name!r}"
    raise KeyError(msg)


def unknown_settings(names: Iterable[str], known: Iterable[str] | None = None) -> str:
    """The message refusing settings that are no field of :class:`Context`, with the closest valid names.

    Args:
        names: the unknown names.
        known: the valid names (default: every field of :class:`Context`).

    Example:
        >>> print(unknown_settings(["contxt_budget"]))  # doctest: +ELLIPSIS
        unknown setting 'contxt_budget'; did you mean 'context_budget'? (every setting is a field of ...)
    """
    valid = sorted(known if known is not None else (f.name for f in fields(Context)))
    hints = [(name, _closest(name, valid)) for name in sorted(names)]
    where = "every setting is a field of memstrata.Context"
    if len(hints) == 1:
        name, close = hints[0]
        return f"unknown setting {name!r}" + (f"; did you mean {_either(close)}?" if close else "") + f" ({where})"
    parts = [f"{name!r}" + (f" (did you mean {_either(close)}?)" if close else "") for name, close in hints]
    return f"unknown settings {', '.join(parts)}; {where}"


def _closest(name: str, valid: list[str]) -> list[str]:
    """The valid names nearest ``name`` (at most three): those alike enough, and nearly as alike as the nearest."""
    scored = sorted(((SequenceMatcher(None, name, v).ratio(), v) for v in valid), key=lambda rv: (-rv[0], rv[1]))
    best = scored[0][0] if scored else 0.0
    return [v for ratio, v in scored[:3] if ratio >= max(0.6, best - 0.1)]


def _either(names: list[str]) -> str:
    """``'a'``, ``'a' or 'b'``, ``'a', 'b' or 'c'``."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
