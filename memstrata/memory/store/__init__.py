"""The store: units with vectors, graph and tree edges, and per-unit counters, under one tenant scope.

- :mod:`~memstrata.memory.store.vectors`: the units and their vectors (Chroma);
- :mod:`~memstrata.memory.store.edges`: edges between units (a SQLite file in the data folder in
  embedded mode; a Chroma collection in server mode, so every process and machine sees them);
- :mod:`~memstrata.memory.store.counters`: reinforcement, recall, last access and tier per unit,
  in the same place as the edges. Writing them never invalidates a search snapshot;
- ``items``: the values a LangGraph store user put (:mod:`memstrata.integrations.store`), in the same place.

All three build filters and keys with :mod:`~memstrata.memory.store.tenant`, and
:meth:`MemoryStore.delete_user` clears a user from all three.

Example:
    >>> store = MemoryStore(path="/tmp/memstrata-doc")            # doctest: +SKIP
    >>> store.delete_user("alice")                                # doctest: +SKIP
    {'turn': 0, ..., 'edges': 0, 'counters': 0}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from memstrata.memory.store.counters import CounterStore
from memstrata.memory.store.edges import Edge, EdgeStore
from memstrata.memory.store.tables import open_table
from memstrata.memory.store.tenant import StoreError, stable_hash
from memstrata.memory.store.vectors import EmbedderMismatchError, Record, VectorStore


class MemoryStore(VectorStore):
    """The vector store plus the edge and counter stores of the same location.

    Args:
        path: folder of the embedded store (Chroma files and the SQLite file of edges and counters).
        url: a Chroma server, e.g. ``http://127.0.0.1:8000``; edges and counters then live there too.
        embeddings: any LangChain ``Embeddings``; the packaged MiniLM by default.
        client: an already-built Chroma client (tests, custom settings); edges and counters go to
            ``path`` when given, else into that client.
    """

    def __init__(self, *, path: str | Path | None = None, url: str | None = None,
                 embeddings: Embeddings | None = None, client: Any = None) -> None:
        super().__init__(path=path, url=url, embeddings=embeddings, client=client)
        folder = Path(path) if path is not None and not url else None
        self.edges = EdgeStore(open_table("edges", path=folder, client=self.client))
        self.counters = CounterStore(open_table("counters", path=folder, client=self.client))
        self.items = open_table("items", path=folder, client=self.client)  # what a LangGraph store user put

    def delete_user(self, user_id: str) -> dict[str, int]:
        """Remove every trace of a user: units of every kind, edges and counters; counts per part."""
        removed = super().delete_user(user_id)
        removed["edges"] = self.edges.delete_user(user_id)
        removed["counters"] = self.counters.delete_user(user_id)
        removed["items"] = self.items.delete(user_id=user_id)
        return removed


__all__ = ["CounterStore", "Edge", "EdgeStore", "EmbedderMismatchError", "MemoryStore", "Record", "StoreError",
           "VectorStore", "stable_hash"]
