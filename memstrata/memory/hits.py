"""Scoring one query against the snapshot, and turning rows into :class:`~memstrata.memory.query.Hit` objects.

Shared by HyMem's light and deep modules and the follow-up: the query-only
parts (event scores per kind, each turn's own fused score) are computed once
per query text and memoized on the snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np

from memstrata.memory.fusion import Weights, event_prior, ranked_events, score_events, score_turns, turn_semantic
from memstrata.memory.index import MemoryIndex, tokenize
from memstrata.memory.query import Hit, Query
from memstrata.memory.timeparse import format_date


def turn_hit(index: MemoryIndex, i: int, parts: dict[str, np.ndarray], *, level: str, found_by: str,
             query: Query) -> Hit:
    """The hit of turn row ``i`` with its score breakdown."""
    t = index.turns[i]
    return Hit(
        kind=index.turns_kind, unit_id=t.id, conversation_id=t.conversation_id,
        score=float(parts["score"][i]) * query.weight,
        parts={k: round(float(v[i]), 4) for k, v in parts.items() if k != "score"},
        turn_ids=[t.id], found_by=found_by, level=level, query_id=query.id, text=t.text,
        time=format_date(t.timestamp) or t.timestamp_raw, session_id=t.session_id, position=t.position,
        speaker=t.speaker, image_caption=t.image_caption,
    )


def event_hit(index: MemoryIndex, kind: str, row: int, score: float, query: Query) -> Hit:
    """The hit of one event unit (e.g. a Level-1 summary)."""
    unit = index.events[kind].units[row]
    return Hit(kind=kind, unit_id=unit.id, conversation_id=unit.conversation_id, score=round(float(score), 4),
               turn_ids=unit.linked_turn_ids(), found_by=kind, level="level1", query_id=query.id,
               text=unit.embed_text(), time=format_date(unit.timestamp), session_id=getattr(unit, "session_id", ""))


def event_turn_rows(index: MemoryIndex, hits: Sequence[Hit]) -> list[int]:
    """Rows of the raw turns the given event hits link to (hits of unknown units are skipped)."""
    rows: dict[int, None] = {}
    for hit in hits:
        table = index.events.get(hit.kind)
        row = table.by_key.get((hit.conversation_id, hit.unit_id)) if table is not None else None
        if row is not None:
            rows.update(dict.fromkeys(table.turn_rows[row]))
    return list(rows)


def score_query(index: MemoryIndex, query: Query, qvec: np.ndarray, *, event_kinds: Sequence[str],
                top_events: int, weights: Weights,
                now: datetime | None) -> tuple[list[tuple[str, int, float]], dict[str, np.ndarray]]:
    """The query's events of the given kinds, best first, and every turn's fused score with its parts."""
    key = f"{query.text}\x1f{query.dense_text or ''}"
    if key not in index.memo:
        tokens = tokenize([query.text])[0]
        events = {k: score_events(t, qvec, tokens) for k, t in index.events.items()}
        index.remember(key, (events, turn_semantic(index, qvec, tokens)))
    events, own = index.memo[key]
    ranked = ranked_events(events, event_kinds)
    prior = event_prior(index, ranked, top_events)
    return ranked, score_turns(index, query, own, prior, weights=weights, now=now)
