"""Edges between units (graph and tree links), kept per user beside the units.

An edge is (source unit, relation label, destination unit) inside one
conversation, with a weight and the raw turns it comes from. Adding the same
edge again changes nothing. :meth:`EdgeStore.graph` gives a ``networkx``
multigraph for traversal.

Example:
    >>> store = EdgeStore(open_table("edges", path=Path("/tmp/memstrata-doc"), client=None))   # doctest: +SKIP
    >>> store.add("alice", [Edge("c1", "ent:ann", "lives_in", "ent:porto")])                  # doctest: +SKIP
    1
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx

from memstrata.memory.store import tenant
from memstrata.memory.store.tables import Table, TableRow


@dataclass(frozen=True)
class Edge:
    """A directed, labelled link between two units of one conversation."""

    conversation_id: str
    src: str
    rel: str
    dst: str
    src_kind: str = ""
    dst_kind: str = ""
    weight: float = 1.0
    turn_ids: tuple[str, ...] = ()
    created_at: float | None = None

    def key(self, user_id: str) -> str:
        return tenant.storage_key(user_id, self.conversation_id, f"{self.src}\x1f{self.rel}\x1f{self.dst}",
                                  namespace="edge")


def _row(user_id: str, edge: Edge) -> TableRow:
    return TableRow(edge.key(user_id), user_id, edge.conversation_id, {
        "src": edge.src, "rel": edge.rel, "dst": edge.dst, "src_kind": edge.src_kind, "dst_kind": edge.dst_kind,
        "weight": float(edge.weight), "turn_ids": json.dumps(list(edge.turn_ids)), "created_at": edge.created_at})


def _edge(row: TableRow) -> Edge:
    f = row.fields
    return Edge(conversation_id=row.conversation_id, src=str(f["src"]), rel=str(f["rel"]), dst=str(f["dst"]),
                src_kind=str(f.get("src_kind") or ""), dst_kind=str(f.get("dst_kind") or ""),
                weight=float(f.get("weight", 1.0) or 0.0), turn_ids=tuple(json.loads(str(f.get("turn_ids") or "[]"))),
                created_at=float(f["created_at"]) if f.get("created_at") is not None else None)


class EdgeStore:
    """Per-user edges on a :class:`~memstrata.memory.store.tables.Table`."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def add(self, user_id: str, edges: Sequence[Edge]) -> int:
        """Store edges (idempotent: the same source, relation and destination is one edge)."""
        return self.table.upsert([_row(user_id, e) for e in edges]) if edges else 0

    def get(self, user_id: str, *, conversation_id: str | None = None, src: str | None = None,
            dst: str | None = None, rel: str | None = None) -> list[Edge]:
        """Edges of one user, optionally by conversation, source, destination or relation."""
        match: dict[str, Any] = {k: v for k, v in (("src", src), ("dst", dst), ("rel", rel)) if v is not None}
        return [_edge(r) for r in self.table.get(user_id=user_id, conversation_id=conversation_id, match=match)]

    def delete(self, user_id: str, edges: Sequence[Edge]) -> int:
        return self.table.delete(user_id=user_id, keys=[e.key(user_id) for e in edges]) if edges else 0

    def delete_user(self, user_id: str) -> int:
        """Every edge of one user."""
        return self.table.delete(user_id=user_id)

    def count(self, user_id: str) -> int:
        return self.table.count(user_id=user_id)

    def graph(self, user_id: str, *, conversation_id: str | None = None) -> nx.MultiDiGraph:
        """The user's edges as a multigraph: nodes are unit ids, edges carry ``rel``, ``weight``, ``turn_ids``."""
        graph = nx.MultiDiGraph()
        for e in self.get(user_id, conversation_id=conversation_id):
            graph.add_edge(e.src, e.dst, key=e.rel, rel=e.rel, weight=e.weight, turn_ids=e.turn_ids,
                           conversation_id=e.conversation_id)
        return graph
