"""HMO's tiers (when ``Context.tiers`` is on): their sizes, Eq. 5's priority and Eq. 6's drift gate.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.tier``): pass it whole, or as a dict of
the fields to change (``tier={"recent_sessions": ...}``); a field's description is what LangGraph Studio shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class TierSettings:
    """HMO's tiers (when ``Context.tiers`` is on): their sizes, Eq. 5's priority and Eq. 6's drift gate."""

    recent_sessions: Annotated[int, setting("the cache holds every record of this many latest sessions")] = 8
    pivotal: Annotated[
        int,
        setting("the cache also holds this many records of highest priority (HMO's top-k pivotal memories)"),
    ] = 64
    buffer: Annotated[int, setting("records of high priority in the buffer (tier 2)")] = 256
    probe_k: Annotated[
        int,
        setting(
            "offline: a tier answers only if it holds the archive's this many nearest summaries to each query "
            "(one HNSW read per tier); 0 leaves the decision to the retrieval confidence alone"
        ),
    ] = 3
    refresh_s: Annotated[
        float,
        setting(
            "seconds a process searches an active tier's held sessions before reading its membership again: use "
            "moves records at once, searches see it after this (a promoted record stays findable in the archive)"
        ),
    ] = 120.0
    alpha: Annotated[float, setting("HMO Eq. 5: weight of the initial importance")] = 0.6
    beta: Annotated[float, setting("HMO Eq. 5: weight of the persona alignment")] = 0.4
    decay_days: Annotated[
        float,
        setting("HMO Eq. 5: the base decay constant tau in days (more recalls flatten it)"),
    ] = 30.0
    drift: Annotated[
        float,
        setting(
            "HMO Eq. 6: a conversation's records in tiers 1-2 are re-ranked when its persona's cosine distance "
            "from its own anchor passes this"
        ),
    ] = 0.05
    importance_batch: Annotated[
        int,
        setting("with a model: records scored per importance call (one call per this many newly closed episodes)"),
    ] = 8

    def __post_init__(self) -> None:
        if min(self.recent_sessions, self.pivotal, self.buffer, self.refresh_s) < 0 or self.decay_days <= 0:
            msg = (
                "Context.tier.recent_sessions, pivotal, buffer and refresh_s must be >= 0 "
                "and Context.tier.decay_days > 0"
            )
            raise ValueError(msg)
        if self.importance_batch < 1:
            msg = f"Context.tier.importance_batch must be >= 1, got {self.importance_batch}"
            raise ValueError(msg)
