"""What a retrieval's use does to HMO's records (§3.2-3.3): recall counts, lazy scoring, promotion and demotion.

The records whose turns a retrieval cited are *used*: their recall count grows by one and their last access is the
memory time of the query. Each is scored now (Eq. 5: its importance, its alignment with its own conversation's
persona anchor (:mod:`~memstrata.memory.tiers.anchor`), its new recall count and no decay since it was just used),
an archive record lazily, for the first time since it left the active tiers; then all are ranked alongside the
active records, whose stored priorities are carried on to the same time
(:func:`~memstrata.memory.tiers.priority.priority_at`) (:func:`~memstrata.memory.tiers.assign.place_recalled`): an
archive record that outranks the buffer's last is promoted, and what it displaces is demoted.

Only the counters store is written, so a promotion never invalidates a search snapshot; the active tiers' snapshots
take the change at their next refresh (:mod:`memstrata.memory.index.active`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from memstrata.memory.levels.level2.episode import summary_id
from memstrata.memory.store.counters import UnitCounters
from memstrata.memory.tiers.assign import ARCHIVE, Record, place_recalled
from memstrata.memory.tiers.priority import PriorityWeights, alignment, priority, priority_at

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore


def used_records(store: MemoryStore, user_id: str, turns: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The records (closed episodes' summaries) holding these ``(conversation, session, turn id)`` turns."""
    if not turns:
        return []
    used = {(c, t) for c, _, t in turns}
    keys = sorted({f"{c}/{s}" for c, s, _ in turns})
    # selective: a few sessions' keys match few records, so Chroma reads them without a user clause over all of the
    # user's episodes, and the tenant is checked on what comes back
    episodes = store.get("episode", user_id=user_id, where={"session_key": {"$in": keys}}, selective=True)
    return [
        (r.metadata["conversation_id"], "summary", summary_id(r.unit_id))
        for r in episodes
        if not r.payload.get("open")
        and any((r.metadata["conversation_id"], t) in used for t in r.payload.get("turn_ids", []))
    ]


def record_use(
    store: MemoryStore,
    user_id: str,
    items: list[tuple[str, str, str]],
    *,
    active: Sequence[UnitCounters],
    persona: Mapping[str, np.ndarray],
    now: float,
    weights: PriorityWeights,
    recent_sessions: int,
    pivotal: int,
    buffer: int,
) -> dict[str, Any]:
    """Count the use, score the used records, move what ranks in or out; what happened, for the trace, and the
    counters it wrote, as they now stand (``written``: each used or moved record's, without a read back).

    ``active``: the counters of the active tiers' records the used ones are ranked against; ``persona``: each
    conversation's persona anchor (:func:`~memstrata.memory.tiers.anchor.read_anchor`), a record's alignment is
    with its own conversation's.
    """
    if not items:
        return {"written": [], "recalled": 0, "scored_lazily": 0, "promoted": 0, "demoted": 0}
    store.counters.record_recall(user_id, items, at=now)
    stored = store.counters.get(user_id, items)
    known = {i: c for i, c in stored.items() if c.session_key}  # scored at ingestion (else written before tiers)
    vectors = {
        (r.metadata["conversation_id"], "summary", r.unit_id): r.metadata["_vector"]
        for r in store.get_keys("summary", user_id=user_id, keys=[(i[0], i[2]) for i in known], with_vectors=True)
    }
    fresh = {
        i: priority(
            c.importance if c.importance is not None else 5.0,
            alignment(vectors.get(i), persona.get(i[0])),
            recalls=c.recall_count,
            age_days=0.0,
            weights=weights,
        )
        for i, c in known.items()
    }
    recalled = [Record(i, c.session_key or "", c.record_time, fresh[i]) for i, c in known.items()]
    others = [
        Record(
            c.item,
            c.session_key or "",
            c.record_time,
            priority_at(c.priority, scored_at=c.scored_at, now=now, recalls=c.recall_count, tau_days=weights.tau_days),
        )
        for c in active
        if c.item not in known and c.session_key
    ]
    tiers = {c.item: c.tier for c in active} | {i: c.tier for i, c in known.items()}
    moves = place_recalled(others, recalled, tiers, recent_sessions=recent_sessions, pivotal=pivotal, buffer=buffer)
    writes: dict[tuple[str, str, str], dict[str, Any]] = {
        i: {"priority": round(p, 6), "scored_at": now} for i, p in fresh.items()
    }
    for item, tier in moves.items():
        writes.setdefault(item, {})["tier"] = tier
    store.counters.set_scores(user_id, writes)
    before = {c.item: c for c in active} | known  # every written record is a used or an active one
    return {
        "written": [before[i].with_scores(writes[i]) for i in sorted(writes)],
        "recalled": len(items),
        "scored_lazily": sum(1 for c in known.values() if not c.tier),
        "promoted": sum(1 for i, t in moves.items() if t and not tiers.get(i)),
        "demoted": sum(1 for t in moves.values() if t == ARCHIVE),
        "moves": len(moves),
    }
