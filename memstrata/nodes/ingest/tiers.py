"""Ingestion stage: HMO's initial importance of each newly closed episode, its priority and tier, and the drift gate.

A record (HMO's memory segment, Eq. 1, read as one closed episode rather than one query-response pair) is keyed by
its Level-1 summary (:mod:`memstrata.memory.tiers`). For the write's newly closed episodes this stage

1. reads the current persona of each conversation those records are in (:mod:`memstrata.memory.tiers.persona`):
   its items' text and its embedding (the mean of its speakers' current dimension vectors);
2. scores the initial importance (HMO §3.1, Eq. 3): with a model, one call per ``tier.importance_batch`` records with
our
   own wording of Appendix A's rubric (``IMPORTANCE_PROMPT``), which hears the persona of the batch's conversations
   as bounded data (``<persona>``, or "none yet"), a schema and the offline score as the fallback; offline,
   :func:`memstrata.memory.tiers.importance.offline_importance` (which reads no persona);
3. runs the drift gate per conversation (Eq. 6, :func:`memstrata.memory.tiers.anchor.drift_gate`): a conversation
   whose persona moved past ``tier.drift`` from its own anchor has its active records (tiers 1-2) scored again with
   the new alignment, and its anchor moves; the other active records keep their stored priorities, carried on to
   the write's memory time by Eq. 5's decay (:func:`~memstrata.memory.tiers.priority.priority_at`). A record's
   alignment A is always with its own conversation's persona;
4. ranks the new records with the active ones (:func:`memstrata.memory.tiers.assign.assign_tiers`) and writes what
   moved to the counters store. The archive is never ranked here.

Scoring only writes counters: no search snapshot is rebuilt for it. With ``Context.tiers`` off, this stage does
nothing at all (no read, no counter, no model call). Turned on, a write scores the unscored closed episodes of the
conversations it closes episodes in; :meth:`memstrata.Memstrata.score_tiers` (``memstrata reindex --tiers``) scores
every conversation at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.levels.level2.episode import summary_id
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.counters import UnitCounters
from memstrata.memory.store.reads import by_conversation
from memstrata.memory.tiers.anchor import drift_gate, read_anchor, write_anchor
from memstrata.memory.tiers.assign import Record, assign_tiers, changes
from memstrata.memory.tiers.importance import offline_importance, signals
from memstrata.memory.tiers.persona import ConversationPersona, persona_block, read_personas
from memstrata.memory.tiers.priority import (
    DAY,
    PriorityWeights,
    alignment,
    priority,
    priority_at,
)
from memstrata.nodes.common import progress, touched_conversations
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.node import open_node
from memstrata.runtime.step import Step
from memstrata.state import IngestState

if TYPE_CHECKING:
    from memstrata.memory.store.vectors import Record as StoredRecord


class RecordScore(BaseModel):
    """The score of one record."""

    index: int = Field(description="the record's index")
    score: int = Field(ge=1, le=10, description="1 (transient) to 10 (pivotal)")


class ImportanceScores(BaseModel):
    """One score per record."""

    scores: list[RecordScore] = Field(default_factory=list)


@dataclass
class NewRecord:
    """A newly closed episode as this stage reads it."""

    item: tuple[str, str, str]
    session_key: str
    time: float | None
    text: str
    vector: np.ndarray
    speakers: list[str]


async def rank_tiers(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Score the newly closed episodes, run the drift gate and write the tiers that moved (nothing with tiers off)."""
    if not runtime.context.tiers:  # off costs nothing; turning tiers on scores what is unscored (score_tiers)
        return {}
    check = _to_check(state)
    if not state.get("closed") and not check:
        return {}
    started = time.perf_counter()
    run = await open_node(runtime, "rank_tiers", ingest=True)
    ctx, store, step = run.ctx, run.store, run.step
    closed = [*state.get("closed", []), *await asyncio.to_thread(_unscored, store, ctx.user_id, check)]
    fresh = await asyncio.to_thread(
        _new_records, store, ctx.user_id, [list(p) for p in dict.fromkeys(tuple(p) for p in closed)]
    )
    if not fresh:
        return {}
    personas = await asyncio.to_thread(read_personas, store, ctx.user_id, [r.item[0] for r in fresh])
    scores, fallbacks = await _importance(
        step, ctx, fresh, await asyncio.to_thread(_novelty, store, ctx.user_id, fresh), personas
    )
    vectors = {conv: p.vector for conv, p in personas.items()}
    stats = await asyncio.to_thread(_place, store, ctx, fresh, scores, vectors, run.tier_weights)
    stats.update(
        records_scored=len(fresh),
        importance_fallbacks=fallbacks,
        stage_seconds={"tiers": round(time.perf_counter() - started, 3)},
    )
    if step.model is not None and step.meter.calls:
        stats["llm"] = {"importance": step.meter.summary()}
    progress(
        "tiers",
        f"scored {len(fresh)} records; {stats['tier_moves']} tier changes"
        f"{' (persona drift: the drifted conversations re-ranked)' if stats['tiers_reranked'] else ''}",
        records=len(fresh),
    )
    return {"stats": stats}


def _to_check(state: IngestState) -> list[str]:
    """The conversations whose stored records may lack a score: those this write closes episodes in or repairs, and,
    on a write that added no turn (a re-run, which is how a stopped write resumes), every conversation it names.
    A write that adds messages and closes nothing checks nothing, so a chat message costs no scan.
    """
    replay = state.get("conversations", []) if not state.get("stats", {}).get("turns_added") else []
    return list(dict.fromkeys([*touched_conversations(state), *replay]))


def _unscored(store: MemoryStore, user_id: str, conversations: list[str]) -> list[list[str]]:
    """The closed episodes of these conversations whose record has no importance yet (a write stopped before this
    stage): a re-run scores them.
    """
    out = []
    for conv in conversations:
        closed = [r for r in store.get("episode", user_id=user_id, conversation_id=conv) if not r.payload.get("open")]
        items = [(conv, "summary", summary_id(r.unit_id)) for r in closed]
        stored = store.counters.get(user_id, items)
        out += [[conv, r.unit_id] for r, item in zip(closed, items, strict=True) if stored[item].importance is None]
    return out


def _new_records(store: MemoryStore, user_id: str, closed: list[list[str]]) -> list[NewRecord]:
    out = []
    for conv, ids in by_conversation(closed).items():
        summaries = {
            r.unit_id: r
            for r in store.get(
                "summary",
                user_id=user_id,
                conversation_id=conv,
                unit_ids=[summary_id(e) for e in ids],
                with_vectors=True,
            )
        }
        episodes = {r.unit_id: r for r in store.get("episode", user_id=user_id, conversation_id=conv, unit_ids=ids)}
        for ep_id in ids:
            sid = summary_id(ep_id)
            if sid not in summaries or ep_id not in episodes:
                continue  # replaced since (a re-cut): its successor is scored instead
            meta, payload = summaries[sid].metadata, summaries[sid].payload
            out.append(
                NewRecord(
                    item=(conv, "summary", sid),
                    session_key=f"{conv}/{meta.get('session_id')}",
                    time=meta.get("ts"),
                    text=episodes[ep_id].document,
                    vector=np.asarray(meta["_vector"], dtype=float),
                    speakers=list(payload.get("participants") or []),
                )
            )
    return out


def _similarity(hit: StoredRecord) -> float:
    """A hit's cosine similarity (:meth:`~memstrata.memory.store.vectors.VectorStore.nearest` sets it on each)."""
    assert hit.similarity is not None, "nearest gives every hit its similarity"
    return hit.similarity


def _novelty(store: MemoryStore, user_id: str, fresh: list[NewRecord]) -> list[float]:
    """One minus each record's best cosine to another summary of the user (HNSW, under the tenant filter)."""
    if not fresh:
        return []
    found = store.nearest("summary", user_id=user_id, vectors=[r.vector for r in fresh], k=4)
    best = [
        max(
            (_similarity(x) for x in hits if (x.metadata["conversation_id"], "summary", x.unit_id) != r.item),
            default=0.0,
        )
        for r, hits in zip(fresh, found, strict=True)
    ]
    return [1.0 - max(0.0, float(b or 0.0)) for b in best]


async def _importance(
    step: Step, ctx: Context, fresh: list[NewRecord], novelty: list[float], personas: dict[str, ConversationPersona]
) -> tuple[list[float], int]:
    """Each record's 1-10 score: the model's, batch by batch, else (and on a failed batch) the offline one."""
    offline = [
        offline_importance(signals(r.text.splitlines(), novelty=n, speakers=r.speakers))
        for r, n in zip(fresh, novelty, strict=True)
    ]
    if step.model is None:
        return offline, 0
    scores, fallbacks = list(offline), 0
    size = ctx.tier.importance_batch
    for start in range(0, len(fresh), size):
        batch = fresh[start : start + size]
        persona = persona_block(personas[c] for c in dict.fromkeys(r.item[0] for r in batch) if c in personas)
        got = await _llm_batch(step, batch, persona)
        for i, score in got.items():
            scores[start + i] = float(score)
        fallbacks += len(batch) - len(got)
    return scores, fallbacks


async def _llm_batch(step: Step, batch: list[NewRecord], persona: str) -> dict[int, int]:
    """The model's scores of one batch by index ({} when its output was unusable); ``persona`` is the ``<persona>``
    block of the batch's conversations (:func:`~memstrata.memory.tiers.persona.persona_block`).
    """
    listing = "\n\n".join(f'<record index="{i}">\n{r.text[:1500]}\n</record>' for i, r in enumerate(batch))

    def valid(value: ImportanceScores) -> ImportanceScores:
        if sorted(s.index for s in value.scores) != list(range(len(batch))):
            msg = f"score every index 0..{len(batch) - 1} exactly once"
            raise ValueError(msg)
        return value

    value, how = await step.decide(
        ImportanceScores,
        "IMPORTANCE_PROMPT",
        f"{persona}\n\n{listing}",
        node="importance",
        fallback=ImportanceScores,
        validate=valid,
    )
    return {s.index: s.score for s in value.scores} if how in GOOD_OUTCOMES else {}


def _place(
    store: MemoryStore,
    ctx: Context,
    fresh: list[NewRecord],
    importance: list[float],
    personas: dict[str, np.ndarray | None],
    weights: PriorityWeights,
) -> dict[str, Any]:
    """Drift gate, priorities, tiers; the counters written (HMO's record header, Eq. 4). Returns the stage's stats.

    ``personas``: the persona vector of each conversation of ``fresh``; every alignment is with the record's own.
    """
    active = store.counters.active(ctx.user_id)
    gate = drift_gate(personas, read_anchor(store, ctx.user_id, list(personas)), threshold=ctx.tier.drift)
    times = [r.time for r in fresh if r.time is not None] + [c.record_time for c in active if c.record_time]
    now = max(times, default=0.0)
    new = {
        r.item: (
            r,
            imp,
            priority(
                imp,
                alignment(r.vector, personas.get(r.item[0])),
                recalls=0,
                age_days=(now - (r.time or now)) / DAY,
                weights=weights,
            ),
        )
        for r, imp in zip(fresh, importance, strict=True)
    }
    stale = [c for c in active if c.item not in new and c.conversation_id in gate.rerank]
    rescored = rescore(store, ctx.user_id, stale, personas, now, weights) if stale else {}
    pool = [Record(item, r.session_key, r.time, p) for item, (r, _, p) in new.items()]
    pool += [
        Record(
            c.item,
            c.session_key or "",
            c.record_time,
            rescored[c.item]
            if c.item in rescored
            else priority_at(
                c.priority, scored_at=c.scored_at, now=now, recalls=c.recall_count, tau_days=weights.tau_days
            ),
        )
        for c in active
        if c.item not in new
    ]
    tiers = assign_tiers(
        pool, recent_sessions=ctx.tier.recent_sessions, pivotal=ctx.tier.pivotal, buffer=ctx.tier.buffer
    )
    moves = changes({c.item: c.tier for c in active}, tiers)
    writes: dict[tuple[str, str, str], dict[str, Any]] = {
        item: {
            "importance": imp,
            "priority": round(p, 6),
            "scored_at": now,
            "session_key": r.session_key,
            "record_time": r.time,
            "tier": tiers[item],
        }
        for item, (r, imp, p) in new.items()
    }
    for item, p in rescored.items():
        writes[item] = {"priority": round(p, 6), "scored_at": now, "tier": tiers[item]}
    for item, tier in moves.items():
        writes.setdefault(item, {})["tier"] = tier
    store.counters.set_scores(ctx.user_id, writes)
    write_anchor(store, ctx.user_id, gate.anchors)
    return {
        "tier_moves": len(moves),
        "tiers_reranked": bool(gate.rerank),
        "persona_drift": round(max(gate.drift.values(), default=0.0), 4),
    }


def rescore(
    store: MemoryStore,
    user_id: str,
    records: list[UnitCounters],
    personas: Mapping[str, np.ndarray | None],
    now: float,
    weights: PriorityWeights,
) -> dict[tuple[str, str, str], float]:
    """Eq. 5 again for stored records (their vectors read by key): recalls, last use and alignment (with the persona
    of the record's own conversation, in ``personas``) as they are now.
    """
    found = {
        (r.metadata["conversation_id"], r.unit_id): np.asarray(r.metadata["_vector"], dtype=float)
        for r in store.get_keys(
            "summary", user_id=user_id, keys=[(c.conversation_id, c.unit_id) for c in records], with_vectors=True
        )
    }
    out = {}
    for c in records:
        used = max(t for t in (c.last_access, c.record_time, 0.0) if t is not None)
        out[c.item] = priority(
            c.importance if c.importance is not None else 5.0,
            alignment(found.get((c.conversation_id, c.unit_id)), personas.get(c.conversation_id)),
            recalls=c.recall_count,
            age_days=max(0.0, now - used) / DAY,
            weights=weights,
        )
    return out
