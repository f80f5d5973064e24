"""memstrata: long-term hierarchical memory for LLM agents.

The public names are loaded on first use (PEP 562), so ``import memstrata`` stays
cheap and a submodule such as ``memstrata.memory.tree`` can be imported without
the client, LangChain and LangGraph behind it.

Example:
    >>> from memstrata import Memstrata
    >>> mem = Memstrata(path="/tmp/memstrata-demo")  # doctest: +SKIP
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memstrata.client import Memstrata
    from memstrata.context import Context
    from memstrata.errors import (
        AnswerError,
        DeploymentError,
        EmbedderMismatchError,
        EmptyReplyError,
        IngestError,
        LLMError,
        ModelConfigError,
        PartialReadError,
        StoreError,
        StoreFormatError,
        UserIdError,
    )
    from memstrata.result import Evidence, RetrievalResult

__all__ = [
    "AnswerError",
    "Context",
    "DeploymentError",
    "EmbedderMismatchError",
    "EmptyReplyError",
    "Evidence",
    "IngestError",
    "LLMError",
    "Memstrata",
    "ModelConfigError",
    "PartialReadError",
    "RetrievalResult",
    "StoreError",
    "StoreFormatError",
    "UserIdError",
]
__version__ = "0.1.0"

# Each public name and the module that defines it (every error lives in memstrata.errors).
_HOMES = {
    "AnswerError": "memstrata.errors",
    "Context": "memstrata.context",
    "DeploymentError": "memstrata.errors",
    "EmbedderMismatchError": "memstrata.errors",
    "EmptyReplyError": "memstrata.errors",
    "Evidence": "memstrata.result",
    "IngestError": "memstrata.errors",
    "LLMError": "memstrata.errors",
    "Memstrata": "memstrata.client",
    "ModelConfigError": "memstrata.errors",
    "PartialReadError": "memstrata.errors",
    "RetrievalResult": "memstrata.result",
    "StoreError": "memstrata.errors",
    "StoreFormatError": "memstrata.errors",
    "UserIdError": "memstrata.errors",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module 'memstrata' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
