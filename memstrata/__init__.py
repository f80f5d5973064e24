"""memstrata: long-term hierarchical memory for LLM agents.

Example:
    >>> from memstrata import Memstrata
    >>> mem = Memstrata(path="/tmp/memstrata-demo")  # doctest: +SKIP
"""

from memstrata.client import Memstrata
from memstrata.context import Context
from memstrata.result import Evidence, RetrievalResult
from memstrata.runtime.llm import AnswerError, LLMError

__all__ = ["AnswerError", "Context", "Evidence", "LLMError", "Memstrata", "RetrievalResult"]
__version__ = "0.1.0"
