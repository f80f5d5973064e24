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
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import datetime
from difflib import SequenceMatcher
from pathlib import Path
from typing import Annotated, Any, Literal

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from pydantic import ConfigDict, Field, WithJsonSchema
from pydantic.json_schema import SkipJsonSchema

from memstrata.memory.entity_graph.settings import GraphSettings
from memstrata.memory.experimental import Experimental
from memstrata.memory.index.settings import ScaleSettings
from memstrata.memory.persona.settings import PersonaSettings
from memstrata.memory.plan.settings import RetrievalSettings
from memstrata.memory.search.weights import Weights
from memstrata.memory.segmentation import EpisodeSettings
from memstrata.memory.themes.settings import ThemeSettings
from memstrata.memory.tiers.settings import TierSettings
from memstrata.memory.tree.settings import TreeSettings

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


GROUPS: dict[str, type] = {
    "scale": ScaleSettings,
    "retrieval": RetrievalSettings,
    "weights": Weights,
    "episodes": EpisodeSettings,
    "graph": GraphSettings,
    "themes": ThemeSettings,
    "persona": PersonaSettings,
    "tree": TreeSettings,
    "tier": TierSettings,
    "experimental": Experimental,
}
"""Context's groups of settings: the field that holds each, and its class."""


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
    gc_freeze: Annotated[
        bool,
        _s(
            "store",
            "after a whole-memory snapshot is built, freeze the process's objects out of Python's garbage "
            "collector scans (process-wide; unfreezes and collects first): full collections of a large "
            "snapshot cost a query after a write several tenths of a second; opt-in, as it changes the process",
        ),
    ] = False
    blas_threads: Annotated[
        int | None,
        _s(
            "store",
            "numpy BLAS threads of this process, set when a store opens (process-wide; None leaves them "
            "alone). memstrata's matrix products are small, and multi-threaded OpenBLAS spins threads that "
            "slow the embedding model on a few cores; opt-in (1 is what the benches run with)",
        ),
    ] = None
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
    # ---- planning (H-Mem) -----------------------------------------------------------
    max_sub_queries: Annotated[int, _s("planning", "the original query plus sub-queries, at most")] = 4
    now: Annotated[
        datetime | None, _s("planning", "reference time for relative dates and decay; default: the user's latest turn")
    ] = None
    # ---- HyMem light module ---------------------------------------------------------
    level1_k: Annotated[int, _s("light", "Level-1 events the light module reads per query (HyMem k)")] = 10
    # ---- HyMem deep module and reflection -------------------------------------------
    coarse_n: Annotated[int, _s("deep", "Level-1 events the deep module considers (HyMem N)")] = 30
    max_iterations: Annotated[int, _s("reflect", "reflection rounds at most")] = 1
    # ---- packing --------------------------------------------------------------------
    context_budget: Annotated[int, _s("packing", "tokens of the returned context (MiniLM tokenizer)")] = 1500
    exclude_turns: Annotated[
        tuple[str, ...],
        _s("packing", "ids of turns left out of the context (those a chat's thread already shows the model)"),
    ] = ()
    # ---- ingestion ------------------------------------------------------------------
    stamp_untimed: Annotated[
        bool,
        _s(
            "ingestion",
            "a message written without a time gets the write's time (Context.now, else the clock), so it is "
            "dated, matches since/until and the session gap applies; False keeps it untimed",
        ),
    ] = True
    # ---- HMO's tiers (memstrata.memory.tiers) -----------------------------------------
    tiers: Annotated[
        bool,
        _s(
            "tiers",
            "retrieval: a user past scale.max_turns is searched cache first, then buffer, then archive (the bounded "
            "path), going deeper only when the gate says so; ingestion scores and tiers records only when this is on "
            "(off: HMO costs a write nothing; Memstrata.score_tiers or `memstrata reindex --tiers` scores what was "
            "written meanwhile)",
        ),
    ] = False

    # ---- groups of tuning settings, each owned by the module that reads it --------------
    # Pass a group whole or as a dict of the fields to change: Context(themes={"search_k": 0}).
    scale: Annotated[ScaleSettings, _s("groups", ScaleSettings.__doc__ or "")] = field(default_factory=ScaleSettings)
    retrieval: Annotated[RetrievalSettings, _s("groups", RetrievalSettings.__doc__ or "")] = field(
        default_factory=RetrievalSettings
    )
    weights: Annotated[Weights, _s("groups", Weights.__doc__ or "")] = field(default_factory=Weights)
    episodes: Annotated[EpisodeSettings, _s("groups", EpisodeSettings.__doc__ or "")] = field(
        default_factory=EpisodeSettings
    )
    graph: Annotated[GraphSettings, _s("groups", GraphSettings.__doc__ or "")] = field(default_factory=GraphSettings)
    themes: Annotated[ThemeSettings, _s("groups", ThemeSettings.__doc__ or "")] = field(default_factory=ThemeSettings)
    persona: Annotated[PersonaSettings, _s("groups", PersonaSettings.__doc__ or "")] = field(
        default_factory=PersonaSettings
    )
    tree: Annotated[TreeSettings, _s("groups", TreeSettings.__doc__ or "")] = field(default_factory=TreeSettings)
    tier: Annotated[TierSettings, _s("groups", TierSettings.__doc__ or "")] = field(default_factory=TierSettings)
    experimental: Annotated[Experimental, _s("groups", Experimental.__doc__ or "")] = field(
        default_factory=Experimental
    )

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
        for name, kind in GROUPS.items():
            value = getattr(self, name)
            if isinstance(value, Mapping):
                setattr(self, name, settings_group(kind, value, name))
            elif not isinstance(value, kind):
                msg = f"Context.{name} takes a {kind.__name__} or a dict of its fields, got {value!r}"
                raise TypeError(msg)
        for name in ("level1_k", "coarse_n", "context_budget", "max_fanout", "max_sub_queries"):
            if getattr(self, name) < 1:
                msg = f"Context.{name} must be >= 1, got {getattr(self, name)}"
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


def settings_group(kind: type[Any], changes: Mapping[str, Any], name: str, base: Any = None) -> Any:
    """A group of settings: ``base`` (default: the group's defaults) with ``changes`` applied.

    Raises:
        TypeError: a key of ``changes`` is no field of the group (the message names the closest).

    Example:
        >>> settings_group(ThemeSettings, {"search_k": 0}, "themes").search_k
        0
        >>> settings_group(ThemeSettings, {"serch_k": 0}, "themes")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        TypeError: unknown setting 'themes.serch_k'; did you mean 'themes.search_k'? ...
    """
    known = [f.name for f in fields(kind)]
    unknown = [k for k in changes if k not in known]
    if unknown:
        raise TypeError(unknown_settings([f"{name}.{k}" for k in unknown], [f"{name}.{k}" for k in known]))
    return replace(base if base is not None else kind(), **changes)


def with_settings(ctx: Context, **overrides: Any) -> Context:
    """``ctx`` with some settings changed; a group given as a dict changes only those fields of ``ctx``'s group.

    Example:
        >>> ctx = with_settings(Context(user_id="u", themes={"pick": 3}), themes={"search_k": 0}, level1_k=5)
        >>> ctx.themes.pick, ctx.themes.search_k, ctx.level1_k
        (3, 0, 5)
    """
    changes = {
        name: settings_group(GROUPS[name], value, name, base=getattr(ctx, name))
        if name in GROUPS and isinstance(value, Mapping)
        else value
        for name, value in overrides.items()
    }
    return replace(ctx, **changes)


def nested(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Settings named ``field`` or ``group.field`` (a command line's ``--set themes.search_k=0``), as keywords of
    :class:`Context`: each group's fields in one dict.

    Example:
        >>> nested({"level1_k": 5, "themes.search_k": 0, "themes.pick": 3})
        {'level1_k': 5, 'themes': {'search_k': 0, 'pick': 3}}
    """
    out: dict[str, Any] = {}
    for key, value in settings.items():
        group, dot, name = key.partition(".")
        if dot and group in GROUPS:
            out.setdefault(group, {})[name] = value
        elif key in GROUPS and isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = dict(value) if key in GROUPS and isinstance(value, Mapping) else value
    return out


def default(name: str) -> Any:
    """The built-in default of the setting ``name`` (``"level1_k"``, or ``"group.field"`` such as
    ``"retrieval.window_widths"``), so that code taking the setting as an argument writes the value down once.

    Example:
        >>> default("level1_k"), default("retrieval.window_widths")
        (10, (0, 1, 2, 4, 8))
    """
    group, dot, member = name.partition(".")
    if dot and group in GROUPS:
        kind, name = GROUPS[group], member
    else:
        kind = Context
    for f in fields(kind):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            msg = f"the setting {name!r} has no default"  # none such today: every setting has one
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
