"""memstrata: long-term hierarchical memory for LLM agents.

Example:
    >>> from memstrata import Memstrata
    >>> mem = Memstrata(path="/tmp/memstrata-demo")   # doctest: +SKIP
"""

from memstrata.client import Memstrata
from memstrata.context import Context
from memstrata.result import Evidence, RetrievalResult

__all__ = ["Context", "Evidence", "Memstrata", "RetrievalResult"]
__version__ = "0.1.0"
