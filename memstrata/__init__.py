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
    from memstrata.result import Evidence, RetrievalResult
    from memstrata.runtime.llm import AnswerError, LLMError

__all__ = ["AnswerError", "Context", "Evidence", "LLMError", "Memstrata", "RetrievalResult"]
__version__ = "0.1.0"

# Each public name and the module that defines it.
_HOMES = {
    "AnswerError": "memstrata.runtime.llm",
    "Context": "memstrata.context",
    "Evidence": "memstrata.result",
    "LLMError": "memstrata.runtime.llm",
    "Memstrata": "memstrata.client",
    "RetrievalResult": "memstrata.result",
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
