"""HMO's persona anchor (§3.4): the persona embedding the last re-ranking of tiers 1-2 was made against.

One row per user in the store's ``tier_state`` table (cleared by ``forget``).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from memstrata.memory.store import tenant
from memstrata.memory.store.tables import TableRow


def _anchor_key(user_id: str) -> str:
    return tenant.storage_key(user_id, "*", "persona_anchor", namespace="tiers")


def read_anchor(store: Any, user_id: str) -> np.ndarray | None:
    """The persona embedding the last re-ranking of tiers 1-2 was made against (HMO's anchor)."""
    rows = store.tier_state.get(user_id=user_id, keys=[_anchor_key(user_id)])
    return np.asarray(json.loads(str(rows[0].fields["vector"])), dtype=float) if rows else None


def write_anchor(store: Any, user_id: str, vector: np.ndarray | None) -> None:
    """Move the anchor to ``vector``."""
    if vector is None or not all(math.isfinite(x) for x in vector):
        return
    store.tier_state.upsert(
        [TableRow(_anchor_key(user_id), user_id, "*", {"vector": json.dumps([round(float(x), 6) for x in vector])})]
    )
