"""Ingestion stage 5: entity linking, H-Mem's entity-relation graph, and knowledge updates, per conversation.

For each conversation with new facts, every fact of the conversation is read
back, names are resolved to entities (:mod:`memstrata.memory.entity_graph.resolution`),
relations and overlap edges are written to the edge store, entities (with their
profiles) are written as units, and supersession is decided: offline by the
conservative rule, with a model by the model on the rule's candidate pairs (at
most ``Context.graph.supersede_pairs`` per conversation, all in one call; the rule
decides the rest and any garbage). Facts whose subject, entities or validity changed are
rewritten with their stored vectors (nothing is re-embedded); entities and edges
the conversation no longer yields are deleted, so re-running adds nothing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.entity_graph.resolution import Linked
from memstrata.memory.entity_graph.resolution import link_entities as resolve
from memstrata.memory.facts.supersession import apply_supersession, candidate_pairs, supersede
from memstrata.memory.levels import Entity, Fact
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import closed_facts, open_episodes
from memstrata.nodes.common import conversations_to_redo, progress
from memstrata.nodes.ingest.facts import drop_orphan_facts
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.node import open_node
from memstrata.runtime.step import Step
from memstrata.state import IngestState


class Replacements(BaseModel):
    """The numbered pairs in which the newer fact replaces the older one as the current value of one attribute."""

    replaced: list[int] = Field(
        default_factory=list, description="numbers of the pairs whose newer fact makes the older one no longer current"
    )


async def link_entities(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Resolve entities, write the graph and decide knowledge updates for the conversations with new facts."""
    ctx = runtime.context
    started = time.perf_counter()
    run = await open_node(runtime, "link_entities", ingest=True)
    store, step = run.store, run.step
    closed = state.get("closed", [])
    touched, missing = await conversations_to_redo(state, store, ctx.user_id, _unlinked)
    new_episodes = {tuple(p) for p in closed}
    totals = {"entities_written": 0, "relations_written": 0, "facts_superseded": 0}
    for conv_id in dict.fromkeys([*touched, *missing]):
        # no closed fact left (a write deleted the only closed episode): an empty graph, and every entity goes
        facts, vectors = await asyncio.to_thread(closed_facts, store, ctx.user_id, conv_id)
        linked = await asyncio.to_thread(
            resolve,
            facts,
            speakers=_speakers(facts),
            typo_ratio=ctx.graph.typo_ratio,
            recent_events=ctx.graph.recent_events,
        )
        fresh = {
            f.id
            for f in facts
            if (conv_id, f.episode_id) in new_episodes or conv_id in missing or conv_id in state.get("repaired", [])
        }
        replaced = await _supersession(step, linked.facts, fresh, ctx.graph.supersede_pairs)
        counts = await asyncio.to_thread(_write, store, ctx.user_id, conv_id, facts, linked, replaced, vectors)
        totals = {k: totals[k] + counts[k] for k in totals}
    progress(
        "entities", f"linked {totals['entities_written']} entities, {totals['relations_written']} relations", **totals
    )
    stats: dict[str, Any] = {**totals, "stage_seconds": {"entities": round(time.perf_counter() - started, 3)}}
    if step.model is not None and step.meter.calls:  # only nodes that called the model report
        stats["llm"] = {"supersede": step.meter.summary()}
    return {"stats": stats}


def _unlinked(store: MemoryStore, user_id: str, conversations: list[str]) -> list[str]:
    """Conversations that hold facts of closed episodes but no entities (an ingest stopped before this stage)."""
    return [
        c
        for c in conversations
        if not store.count("entity", user_id=user_id, conversation_id=c)
        and store.count("fact", user_id=user_id, conversation_id=c) > _open_facts(store, user_id, c)
    ]


def _open_facts(store: MemoryStore, user_id: str, conv_id: str) -> int:
    return sum(len(r.payload.get("fact_ids", [])) for r in open_episodes(store, user_id, conv_id))


def _speakers(facts: list[Fact]) -> list[str]:
    return sorted({name for f in facts for name, kind in f.types.items() if kind == "speaker"})


async def _supersession(step: Step, facts: list[Fact], fresh: set[str], max_pairs: int) -> dict[str, str]:
    """Fact id -> id of the fact that replaces it: the rule offline, the model's verdict on candidates otherwise.

    The model is asked only about pairs with a fact of this write (``fresh``): earlier pairs were
    decided when their facts were written, so a write's calls do not grow with the conversation. Its first
    ``max_pairs`` pairs go to the model in one call, numbered; a pair it does not list keeps its older fact current.
    When the call fails, the rule's verdicts stand.
    """
    rule = {old.id: new for old, new in supersede(facts)}
    if step.model is None:
        return rule
    pairs = [p for p in candidate_pairs(facts, by_label=True) if fresh & {p[0].id, p[1].id}][:max_pairs]
    # earlier facts keep the verdicts stored when they were written; the rule decides the new pairs the model does not
    decided = {f.id: f.superseded_by for f in facts if f.superseded_by and f.id not in fresh}
    decided |= {old: new for old, new in rule.items() if old in fresh or new in fresh}
    if not pairs:
        return decided
    listing = "\n".join(
        f'<pair n="{i}"><older>{older.text}</older><newer>{newer.text}</newer></pair>'
        for i, (older, newer) in enumerate(pairs)
    )

    def valid(value: Replacements) -> Replacements:
        if any(i < 0 or i >= len(pairs) for i in value.replaced):
            msg = f"pair numbers must be between 0 and {len(pairs) - 1}"
            raise ValueError(msg)
        return value

    verdict, how = await step.decide(
        Replacements,
        "SUPERSEDE_PROMPT",
        f"<pairs>\n{listing}\n</pairs>",
        node="supersede",
        fallback=Replacements,  # not read: a failed call leaves the rule's verdicts
        validate=valid,
    )
    if how not in GOOD_OUTCOMES:
        return decided  # the rule's verdicts stand
    said = set(verdict.replaced)
    for i, (older, newer) in enumerate(pairs):
        if i in said:
            decided[older.id] = newer.id
        else:
            decided.pop(older.id, None)
    return decided


def _write(
    store: MemoryStore,
    user_id: str,
    conv_id: str,
    stored: list[Fact],
    linked: Linked,
    replaced: dict[str, str],
    vectors: dict[str, list[float]],
) -> dict[str, int]:
    """Rewrite changed facts, entities and entity edges, delete those the conversation no longer yields;
    counts of what was written.

    One new message changes a few entities of a conversation, so only those are written: a chat app
    that remembers every turn does not rewrite the conversation's whole graph after each one.
    """
    before = {f.id: f for f in stored}
    facts = {f.id: f for f in linked.facts}
    facts.update({f.id: f for f in apply_supersession(linked.facts, replaced)})
    changed = [f for f in facts.values() if f != before.get(f.id)]
    if changed:
        store.upsert(
            "fact",
            changed,
            documents=[f.embed_text() for f in changed],
            vectors=[vectors[f.id] for f in changed],
            extra=[f.metadata() for f in changed],
        )
        # another writer may have deleted one of their episodes since they were read: that fact must not come back
        drop_orphan_facts(store, user_id, conv_id, [f.episode_id for f in changed])
    old_edges = store.edges.get(user_id, conversation_id=conv_id, src_kind="entity")
    new_keys = {(e.src, e.rel, e.dst) for e in linked.relations}
    store.edges.delete(user_id, [e for e in old_edges if (e.src, e.rel, e.dst) not in new_keys])
    kept = set(old_edges)
    edges = [e for e in linked.relations if e not in kept]
    store.edges.add(user_id, edges)
    old_entities = {
        r.unit_id: Entity.model_validate(r.payload)
        for r in store.get("entity", user_id=user_id, conversation_id=conv_id)
    }
    store.delete(
        "entity",
        user_id=user_id,
        conversation_id=conv_id,
        unit_ids=sorted(old_entities.keys() - {e.id for e in linked.entities}),
    )
    ents = [e for e in linked.entities if old_entities.get(e.id) != e]
    if ents:
        store.upsert(
            "entity",
            ents,
            documents=[e.embed_text() for e in ents],
            vectors=[_mean([vectors[i] for i in e.fact_ids if i in vectors]) for e in ents],
            extra=[e.metadata() for e in ents],
        )
    return {
        "entities_written": len(ents),
        "relations_written": len(edges),
        "facts_superseded": sum(1 for f in facts.values() if f.superseded_by),
    }


def _mean(rows: list[list[float]]) -> list[float]:
    mean = np.asarray(rows, dtype=float).mean(axis=0)
    return (mean / (float(np.linalg.norm(mean)) or 1.0)).tolist()
