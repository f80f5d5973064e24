"""The chat model a context names, and the call options every call sends it.

:func:`chat_model` turns ``Context.model`` (or, for ingestion, ``Context.ingest_model``) into a chat model: a
name becomes a ``ChatOpenAI`` at ``Context.base_url``; a name that would go to OpenAI's API with no
``OPENAI_API_KEY`` is a :class:`~memstrata.errors.ModelConfigError`. :func:`_cap_kwargs` caps a
reply's length the way the server reads it; internal calls carry :data:`INTERNAL_TAGS`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from langchain_core.language_models import BaseChatModel

from memstrata.errors import ModelConfigError

if TYPE_CHECKING:
    from memstrata.context import Context

INTERNAL_TAGS = ["nostream", "memstrata:internal"]
OPENAI_KEY_ENV = "OPENAI_API_KEY"
PLACEHOLDER_KEY = "not-needed"  # OpenAI-compatible servers (llama.cpp, vLLM, Ollama) take any key


def _is_openai(base_url: str | None) -> bool:
    """Whether a model name is called at OpenAI's own API (no base URL, or api.openai.com)."""
    return not base_url or "api.openai.com" in base_url


def check_model_name(name: str, base_url: str | None, *, source: str = "model") -> None:
    """Refuse a model name that would be called at OpenAI's API with no ``OPENAI_API_KEY``.

    Args:
        name: the model name.
        base_url: the server it is called at (``None``: OpenAI's API).
        source: the setting it came from, for the message (``model``, ``$MEMSTRATA_MODEL``...).

    Raises:
        ModelConfigError: the name goes to OpenAI's API and ``OPENAI_API_KEY`` is not set.

    Example:
        >>> check_model_name("smollm2", "http://localhost:8080/v1")  # a local server needs no key
    """
    if os.environ.get(OPENAI_KEY_ENV) or not _is_openai(base_url):
        return
    msg = (
        f"{source}={name!r} names a model that memstrata calls through OpenAI's API, but OPENAI_API_KEY is not "
        "set. Set OPENAI_API_KEY; or, for an OpenAI-compatible server (llama.cpp, vLLM, Ollama...), set "
        "base_url (Memstrata(base_url=...), Context.base_url) or $MEMSTRATA_BASE_URL to its address, e.g. "
        "http://localhost:8080/v1; or pass a LangChain chat model object instead of a name."
    )
    raise ModelConfigError(msg)


def chat_model(ctx: Context, *, ingest: bool = False) -> BaseChatModel | None:
    """The chat model retrieval (or, with ``ingest``, ingestion) calls, or ``None`` offline.

    A model object is used as is. A name (see :meth:`Context.model_setting`) becomes a ``ChatOpenAI`` at
    ``Context.resolved_base_url``, with ``OPENAI_API_KEY`` or, at another server, a placeholder key.

    Raises:
        ModelConfigError: a name that would go to OpenAI's API with no ``OPENAI_API_KEY``.

    Example:
        >>> from memstrata.context import Context
        >>> chat_model(Context(user_id="u")) is None  # offline unless a model is configured
        True
    """
    source, spec = ctx.model_setting(ingest=ingest)
    if spec is None or isinstance(spec, BaseChatModel):
        return spec
    base_url = ctx.resolved_base_url
    check_model_name(str(spec), base_url, source=source)
    from langchain_openai import ChatOpenAI

    local = not _is_openai(base_url)
    return ChatOpenAI(
        model=str(spec),
        base_url=base_url,
        timeout=ctx.llm_timeout_s,
        max_retries=0,
        stream_usage=True,
        max_tokens=ctx.llm_max_tokens,
        # llama.cpp, vLLM and Ollama read max_tokens, not OpenAI's newer max_completion_tokens.
        extra_body={"max_tokens": ctx.llm_max_tokens} if local else None,
        api_key=os.environ.get(OPENAI_KEY_ENV) or PLACEHOLDER_KEY,
    )


def _cap_kwargs(model: BaseChatModel, max_tokens: int | None) -> dict[str, Any]:
    """Call options that cap the reply at ``max_tokens`` (a smaller cap set on the model itself is kept).

    ``ChatOpenAI`` sends the cap as ``max_completion_tokens``; llama.cpp, vLLM and Ollama read
    ``max_tokens``, so a model pointed anywhere but api.openai.com gets that too (in ``extra_body``).
    Without a cap a small model can fill a schema's grammar with whitespace until the context ends.
    """
    own = getattr(model, "max_tokens", None)
    cap = min(max_tokens, own) if max_tokens is not None and isinstance(own, int) else max_tokens or own
    if cap is None or not hasattr(model, "max_tokens"):  # a model without the field takes no such option
        return {}
    base = str(getattr(model, "openai_api_base", None) or "")
    if not base or "api.openai.com" in base:
        return {"max_tokens": cap}
    return {"max_tokens": cap, "extra_body": {**(getattr(model, "extra_body", None) or {}), "max_tokens": cap}}
