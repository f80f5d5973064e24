"""What a read of the vector store gives back: :class:`Record`, and Chroma's answers turned into records.

Every read of :class:`~memstrata.memory.store.vectors.VectorStore` keeps what Chroma returns to its tenant
(:func:`_owned`), joins the answers of several reads (:func:`_concat`) and turns them into records
(:func:`_records`).

Example:
    >>> Record("turn", "s1:t0", "hi", {"payload": '{"id": "s1:t0"}'}).payload
    {'id': 's1:t0'}
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from memstrata.memory.store.terms import TERMS


@dataclass(frozen=True)
class Record:
    """One stored unit as read back: its id, text, metadata and, for queries, a similarity."""

    kind: str
    unit_id: str
    document: str
    metadata: dict[str, Any]
    similarity: float | None = None

    @property
    def payload(self) -> dict[str, Any]:
        """The full unit as it was written (lists and nested fields included)."""
        return json.loads(self.metadata.get("payload", "{}"))


def _owned(res: dict[str, Any], user_id: str, conversation_id: str | None) -> dict[str, Any]:
    """A by-key read, kept to the tenant: keys are derived from the user, and the stored stamp must agree.

    Reads by key pass no ``where`` to Chroma (1.5 scans every record per key when both come together);
    this check keeps the tenant guarantee without it.
    """
    keep = [
        i
        for i, m in enumerate(res.get("metadatas") or [])
        if m.get("user_id") == user_id and (conversation_id is None or m.get("conversation_id") == conversation_id)
    ]
    out = {"ids": [res["ids"][i] for i in keep]}
    for name in ("documents", "metadatas", "embeddings", "distances"):
        values = res.get(name)
        if values is not None and len(values) == len(res["ids"]):  # a field not read comes back empty or None
            out[name] = [values[i] for i in keep]
    return out


def _concat(parts: Iterable[dict[str, Any]]) -> dict[str, list[Any]]:
    """Chroma ``get`` results of several reads (batches, pages) as one."""
    out: dict[str, list[Any]] = {"ids": [], "documents": [], "metadatas": [], "embeddings": []}
    for part in parts:
        for name in out:
            values = part.get(name)
            out[name] += list(values) if values is not None else []
    return out


def _records(kind: str, res: dict[str, Any], with_vectors: bool) -> list[Record]:
    out = []
    vectors = res.get("embeddings") if with_vectors else None
    for i, (doc, meta) in enumerate(zip(res["documents"], res["metadatas"], strict=True)):
        meta = dict(meta)
        meta.pop(TERMS, None)  # the lexical index's, not the unit's
        if vectors is not None:
            meta["_vector"] = np.asarray(vectors[i], dtype=np.float32)
        out.append(Record(kind, meta["unit_id"], doc or "", meta))
    return out
