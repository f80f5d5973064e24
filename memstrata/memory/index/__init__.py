"""The per-process search snapshot of one user's memory, built per registered kind."""

from memstrata.memory.index.bm25 import Bm25, tokenize
from memstrata.memory.index.caches import SearchCaches
from memstrata.memory.index.snapshot import KindTable, MemoryIndex

__all__ = ["Bm25", "KindTable", "MemoryIndex", "SearchCaches", "tokenize"]
