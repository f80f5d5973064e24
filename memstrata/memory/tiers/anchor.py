"""HMO's persona anchor and drift gate (§3.4, Eq. 6), one anchor per conversation.

The anchor of a conversation is its persona embedding (:mod:`memstrata.memory.tiers.persona`) as it was when its
active records (tiers 1-2) were last scored against it. HMO keeps one profile per conversational role and memstrata
one persona per speaker of a conversation, so the gate runs per conversation: a write compares the persona of each
conversation it closes episodes in with that conversation's anchor, and only a conversation whose persona moved past
the threshold has its active records scored again (and its anchor moved). Writes that alternate between two
conversations whose personas stay put re-rank nothing, as they would if each conversation were alone.

One row per user and conversation in the store's ``tier_state`` table, cleared with the user by ``forget``
(:meth:`memstrata.memory.store.MemoryStore.delete_user`).

Example:
    >>> same, other = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    >>> gate = drift_gate({"a": same, "b": same, "c": None}, {"a": same, "b": other}, threshold=0.05)
    >>> sorted(gate.rerank), {c: round(d, 2) for c, d in gate.drift.items()}
    (['b'], {'a': 0.0, 'b': 1.0})
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from memstrata.memory.store import tenant
from memstrata.memory.store.tables import TableRow
from memstrata.memory.tiers.priority import drift

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore


def _anchor_key(user_id: str, conversation_id: str) -> str:
    return tenant.storage_key(user_id, conversation_id, "persona_anchor", namespace="tiers")


def read_anchor(store: MemoryStore, user_id: str, conversations: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Each conversation's anchor, of ``conversations`` (``None``: of every conversation of the user)."""
    rows = (
        store.tier_state.get(user_id=user_id, keys=[_anchor_key(user_id, c) for c in dict.fromkeys(conversations)])
        if conversations is not None
        else store.tier_state.get(user_id=user_id)
    )
    return {
        row.conversation_id: np.asarray(json.loads(str(row.fields["vector"])), dtype=float)
        for row in rows
        if "vector" in row.fields
    }


def write_anchor(store: MemoryStore, user_id: str, vectors: Mapping[str, np.ndarray]) -> None:
    """Move the anchors of these conversations to their vectors (one that is not finite is skipped)."""
    rows = [
        TableRow(
            _anchor_key(user_id, conv), user_id, conv, {"vector": json.dumps([round(float(x), 6) for x in vector])}
        )
        for conv, vector in vectors.items()
        if all(math.isfinite(x) for x in vector)
    ]
    if rows:
        store.tier_state.upsert(rows)


@dataclass(frozen=True)
class Gate:
    """The drift gate's verdict for the conversations of a write."""

    drift: dict[str, float] = field(default_factory=dict)  # Eq. 6 per conversation that has a persona
    rerank: frozenset[str] = frozenset()  # conversations whose active records are scored again
    anchors: dict[str, np.ndarray] = field(default_factory=dict)  # the anchors to write


def drift_gate(
    personas: Mapping[str, np.ndarray | None], anchors: Mapping[str, np.ndarray], *, threshold: float
) -> Gate:
    """Eq. 6 per conversation: the conversations whose persona moved more than ``threshold`` from their anchor (or
    that have none yet) are re-ranked and their anchors move; a first anchor is taken even when nothing is re-ranked.
    """
    moved = {c: drift(p, anchors.get(c)) for c, p in personas.items() if p is not None}
    rerank = frozenset(c for c, d in moved.items() if d > threshold)
    return Gate(
        moved,
        rerank,
        {c: p for c, p in personas.items() if p is not None and (c in rerank or c not in anchors)},
    )
