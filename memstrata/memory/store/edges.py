"""Edges between units (graph and tree links), kept per user beside the units.

An edge is (source unit, relation label, destination unit) inside one
conversation, with a weight and the raw turns it comes from. Its storage key is
derived from the tenant and that triple, so adding the same edge again changes
nothing, and two users holding the same unit ids never share an edge.
:meth:`EdgeStore.graph` gives a ``networkx`` multigraph for traversal.

Example:
    >>> from pathlib import Path
    >>> from memstrata.memory.store.tables import open_table
    >>> store = EdgeStore(open_table("edges", path=Path("/tmp/memstrata-doc"), client=None))
    >>> store.add("alice", [Edge("c1", "ent:ann", "lives_in", "ent:porto")])
    1
    >>> [e.dst for e in store.get("alice", src="ent:ann")]
    ['ent:porto']
    >>> store.delete_user("alice")
    1
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memstrata.errors import StoreError
from memstrata.memory.store import tenant
from memstrata.memory.store.tables import MatchValue, Table, TableRow, WriteCounts

if TYPE_CHECKING:
    import networkx as nx


@dataclass(frozen=True)
class Edge:
    """A directed, labelled link between two units of one conversation.

    Attributes:
        conversation_id: the conversation both units belong to.
        src: unit id of the source.
        rel: relation label, e.g. ``"child_of"``, ``"mentions"``, ``"knows"``.
        dst: unit id of the destination.
        src_kind: unit kind of the source (``"turn"``, ``"summary"``, ...), when known.
        dst_kind: unit kind of the destination, when known.
        weight: strength of the link.
        turn_ids: the raw turns the edge comes from (stored as a JSON string field).
        created_at: epoch seconds.
    """

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
        """The storage key of this edge for one user."""
        return tenant.storage_key(
            user_id, self.conversation_id, f"{self.src}\x1f{self.rel}\x1f{self.dst}", namespace="edge"
        )


def source_key(conversation_id: str, src_kind: str) -> str:
    """The key :attr:`EdgeStore.source_writes` counts a conversation's writes of edges from one kind of unit under."""
    return f"{conversation_id}\x1f{src_kind}"


def _row(user_id: str, edge: Edge) -> TableRow:
    for name in ("conversation_id", "src", "rel", "dst"):
        if not isinstance(getattr(edge, name), str) or not getattr(edge, name):
            msg = f"edge {name} must be a non-empty string, got {getattr(edge, name)!r}"
            raise StoreError(msg)
    return TableRow(
        edge.key(user_id),
        user_id,
        edge.conversation_id,
        {
            "src": edge.src,
            "rel": edge.rel,
            "dst": edge.dst,
            "src_kind": edge.src_kind,
            "dst_kind": edge.dst_kind,
            "weight": float(edge.weight),
            "turn_ids": json.dumps(list(edge.turn_ids)),
            "created_at": edge.created_at,
        },
    )


def _edge(row: TableRow) -> Edge:
    f = row.fields
    created_at = f.get("created_at")
    return Edge(
        conversation_id=row.conversation_id,
        src=str(f["src"]),
        rel=str(f["rel"]),
        dst=str(f["dst"]),
        src_kind=str(f.get("src_kind") or ""),
        dst_kind=str(f.get("dst_kind") or ""),
        weight=float(f.get("weight", 1.0)),  # type: ignore[arg-type]
        turn_ids=tuple(json.loads(str(f.get("turn_ids") or "[]"))),
        created_at=float(created_at) if created_at is not None else None,
    )


class EdgeStore:
    """Per-user edges on a :class:`~memstrata.memory.store.tables.Table`.

    Args:
        table: where the edges live (``open_table("edges", ...)``).
    """

    def __init__(self, table: Table) -> None:
        self.table = table
        self.writes = WriteCounts()  # this process's edge writes, for readers that keep edges per conversation
        # the same, per conversation and source kind (``source_key``): a reader that keeps the edges from some kinds
        # of units is not sent back to the store by another stage's edges of the same conversation
        self.source_writes = WriteCounts()

    def add(self, user_id: str, edges: Sequence[Edge]) -> int:
        """Store edges; idempotent (the same source, relation and destination is one edge, the last write wins).

        Returns:
            The number of edges written.
        """
        tenant.check_user(user_id)
        self._count(user_id, edges)
        return self.table.upsert([_row(user_id, e) for e in edges]) if edges else 0

    def get(
        self,
        user_id: str,
        *,
        conversation_id: str | None = None,
        src: str | None = None,
        dst: str | None = None,
        rel: str | None = None,
        src_kind: str | None = None,
        conversations: Sequence[str] | None = None,
    ) -> list[Edge]:
        """The user's edges, optionally only those of a conversation (or any of ``conversations``), source,
        destination, relation or source kind.
        """
        wanted = (("src", src), ("dst", dst), ("rel", rel), ("src_kind", src_kind))
        match: dict[str, MatchValue] = {k: v for k, v in wanted if v is not None}
        rows = self.table.get(
            user_id=user_id, conversation_id=conversation_id, match=match, conversations=conversations
        )
        return [_edge(r) for r in rows]

    def delete(self, user_id: str, edges: Sequence[Edge]) -> int:
        """Delete these edges of the user (matched by conversation, source, relation, destination); the number gone."""
        tenant.check_user(user_id)
        self._count(user_id, edges)
        return self.table.delete(user_id=user_id, keys=[e.key(user_id) for e in edges]) if edges else 0

    def delete_user(self, user_id: str) -> int:
        """Delete every edge of the user; the number gone."""
        self.writes.bump(user_id, ["*"])
        self.source_writes.bump(user_id, ["*"])
        return self.table.delete(user_id=user_id)

    def _count(self, user_id: str, edges: Sequence[Edge]) -> None:
        self.writes.bump(user_id, [e.conversation_id for e in edges])
        self.source_writes.bump(user_id, [source_key(e.conversation_id, e.src_kind) for e in edges])

    def count(self, user_id: str) -> int:
        """The number of edges the user holds."""
        return self.table.count(user_id=tenant.check_user(user_id))

    def graph(self, user_id: str, *, conversation_id: str | None = None) -> nx.MultiDiGraph:
        """The user's edges as a directed multigraph.

        Nodes are unit ids (with a ``kind`` attribute when known). Every stored edge is
        one graph edge, keyed by its relation label and carrying ``rel``, ``weight``,
        ``turn_ids`` and ``conversation_id``. Without ``conversation_id`` the graph spans
        every conversation, so equal unit ids of different conversations are one node,
        and the key also names the conversation (``"<conversation_id>/<rel>"``) so that
        no edge hides another.
        """
        import networkx as nx  # only traversal needs it; importing it costs a fifth of a second

        graph = nx.MultiDiGraph()
        for e in self.get(user_id, conversation_id=conversation_id):
            for node, kind in ((e.src, e.src_kind), (e.dst, e.dst_kind)):
                graph.add_node(node, **({"kind": kind} if kind else {}))
            key = e.rel if conversation_id is not None else f"{e.conversation_id}/{e.rel}"
            graph.add_edge(
                e.src,
                e.dst,
                key=key,
                rel=e.rel,
                weight=e.weight,
                turn_ids=e.turn_ids,
                conversation_id=e.conversation_id,
            )
        return graph
