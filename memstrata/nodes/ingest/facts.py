"""The atomic facts of one episode, and how a batch's facts are stored (used by :mod:`.distill`).

Offline, the clause extractor (:mod:`memstrata.memory.facts.clauses`); with a
model, one extraction call per episode (Bi-Mem §4.2.1's operator of Eq. 4, per
episode rather than per interaction, and xMemory §3.2, in our own wording) with a
schema, retries, and the offline facts of that episode when the
model's output is unusable (counted as ``facts_fallbacks``). Facts are stored
with their episode id; an episode's facts that its new extraction no longer
yields are deleted, so re-extracting never duplicates. A writer that stores facts
reads their episodes back and deletes the facts of any episode another writer
deleted meanwhile (:func:`drop_orphan_facts`), so no fact outlives its episode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, Field

from memstrata.memory.facts.clauses import extract_facts as offline_facts
from memstrata.memory.levels import Episode, Fact, Turn
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import by_conversation
from memstrata.memory.timeparse import format_date, parse_timestamp
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.step import Step

ENTITY_TYPES = ("person", "pet", "place", "org", "thing")

logger = logging.getLogger("memstrata")


class ExtractedFact(BaseModel):
    """One fact as the model states it."""

    statement: str = Field(description="one self-contained sentence, names instead of pronouns")
    subject: str = Field(description="who or what the fact is about, by name")
    relation: str = Field(default="", description="a short verb label, e.g. adopt, live_in, like")
    object: str = Field(default="", description="the object of the relation, if any")
    messages: list[int] = Field(default_factory=list, description="indices of the messages it comes from")
    date: str | None = Field(default=None, description="absolute date it happened, if the text says")


class ExtractedEntity(BaseModel):  # noqa: D101 - a docstring would join the tool schema the model reads
    name: str
    type: str = Field(default="thing", description="person, pet, place, org or thing")


class EpisodeFacts(BaseModel):
    """The model's facts and entities of one episode."""

    facts: list[ExtractedFact] = Field(default_factory=list)
    entities: list[ExtractedEntity] = Field(default_factory=list)


async def episode_facts(step: Step, ep: Episode, turns: list[Turn]) -> tuple[list[Fact], bool]:
    """The episode's facts: the clauses offline; with a model its facts, or the clauses (and ``False``).

    The turns an episode repeats from its predecessor (:attr:`Episode.repeated`) are read for context only: their
    facts are the predecessor's, so overlapping episodes never write one fact twice.
    """
    repeated = set(ep.turn_ids[: ep.repeated])
    own = [t for t in turns if t.id not in repeated]
    # on a worker thread: the first call reads lemminflect's dictionary from disk (no blocking I/O on the event loop)
    offline = await asyncio.to_thread(
        offline_facts, own, episode_id=ep.id, speakers=_speakers(turns), session_time=ep.timestamp
    )
    if step.model is None:
        return offline, True
    return await _llm_facts(step, ep, turns, offline)


def _speakers(turns: list[Turn]) -> list[str]:
    return list(dict.fromkeys(t.speaker for t in turns))


def replace_facts(
    store: MemoryStore,
    user_id: str,
    episodes: list[Episode],
    facts: list[Fact],
    batch: int,
    vectors: Sequence[Sequence[float]] | None = None,
) -> int:
    """Store the episodes' facts (with ``vectors``, else their texts encoded); delete their earlier facts the new
    extraction no longer yields, and the facts of an episode another writer deleted meanwhile
    (:func:`drop_orphan_facts`). Returns how many stay stored.
    """
    keep = {(f.conversation_id, f.id) for f in facts}
    grouped = by_conversation([[e.conversation_id, e.id] for e in episodes])
    for conv_id, ids in grouped.items():
        old = store.get("fact", user_id=user_id, conversation_id=conv_id, where={"episode_id": {"$in": ids}})
        store.delete(
            "fact",
            user_id=user_id,
            conversation_id=conv_id,
            unit_ids=[r.unit_id for r in old if (conv_id, r.unit_id) not in keep],
        )
    for start in range(0, len(facts), batch):
        part = facts[start : start + batch]
        store.upsert(
            "fact",
            part,
            documents=[f.embed_text() for f in part],
            vectors=vectors[start : start + batch] if vectors is not None else None,
            extra=[f.metadata() for f in part],
        )
    dropped = sum(drop_orphan_facts(store, user_id, conv_id, ids) for conv_id, ids in grouped.items())
    return len(facts) - dropped


def drop_orphan_facts(store: MemoryStore, user_id: str, conv_id: str, episode_ids: Sequence[str]) -> int:
    """Delete the facts of those of ``episode_ids`` that are not stored; how many went.

    Called right after facts are stored. Another writer of the conversation (two processes through one Chroma
    server) may have deleted their episode meanwhile: it deletes the episode, then reads its facts and deletes
    them (:func:`memstrata.nodes.ingest.episodes._drop_stale`); this writer stores the facts, then reads the
    episode. Whichever of the two reads comes second sees the other's write, so no fact outlives its episode.
    """
    wanted = sorted(set(episode_ids))
    if not wanted:
        return 0
    stored = {r.unit_id for r in store.get("episode", user_id=user_id, conversation_id=conv_id, unit_ids=wanted)}
    gone = [e for e in wanted if e not in stored]
    if not gone:
        return 0
    found = store.get("fact", user_id=user_id, conversation_id=conv_id, where={"episode_id": {"$in": gone}})
    store.delete("fact", user_id=user_id, conversation_id=conv_id, unit_ids=[r.unit_id for r in found])
    logger.info("%s/%s: dropped %d facts whose episode another writer deleted", user_id, conv_id, len(found))
    return len(found)


async def _llm_facts(step: Step, ep: Episode, turns: list[Turn], fallback: list[Fact]) -> tuple[list[Fact], bool]:
    """The model's facts of one episode, or the offline ones (and ``False``) when its output is unusable."""
    when = format_date(ep.timestamp) or (ep.timestamp_raw or "unknown")
    listing = "\n".join(f"[{i}] {t.render()}" for i, t in enumerate(turns))
    user = f'<episode session_date="{when}">\n{listing}\n</episode>'

    def valid(value: EpisodeFacts) -> EpisodeFacts:
        if any(i < 0 or i >= len(turns) for f in value.facts for i in f.messages):
            msg = f"message indices must be between 0 and {len(turns) - 1}"
            raise ValueError(msg)
        return value

    value, outcome = await step.decide(
        EpisodeFacts, "FACT_PROMPT", user, node="facts", fallback=lambda: EpisodeFacts(), validate=valid
    )
    usable = [f for f in value.facts if f.statement.strip() and f.subject.strip()]
    if outcome not in GOOD_OUTCOMES or (not usable and fallback):
        return fallback, False  # garbage, or nothing where the clauses found statements
    repeated = set(ep.turn_ids[: ep.repeated])  # a fact only of these is the predecessor's
    usable = [f for f in usable if not (f.messages and all(turns[i].id in repeated for i in f.messages))]
    types = {e.name.strip(): e.type if e.type in ENTITY_TYPES else "thing" for e in value.entities if e.name.strip()}
    types.update({t.speaker: "speaker" for t in turns})
    return [_fact(ep, turns, f, n, types) for n, f in enumerate(usable)], True


def _fact(ep: Episode, turns: list[Turn], f: ExtractedFact, n: int, types: dict[str, str]) -> Fact:
    source = [turns[i] for i in dict.fromkeys(f.messages)] or turns[:1]
    date = parse_timestamp(f.date) if f.date else None
    statement = f.statement.strip()[:500]
    mentions = [name for name in types if name != f.subject.strip() and name.casefold() in statement.casefold()]
    return Fact(
        user_id=ep.user_id,
        conversation_id=ep.conversation_id,
        episode_id=ep.id,
        session_id=ep.session_id,
        n=n,
        text=statement,
        subject=f.subject.strip()[:100],
        relation=f.relation.strip().lower()[:40],
        object=f.object.strip()[:200],
        mentions=mentions,
        types={k: v for k, v in types.items() if k in (f.subject.strip(), *mentions)},
        turn_ids=[t.id for t in source],
        timestamp=ep.timestamp,
        timestamp_raw=ep.timestamp_raw,
        event_date=date if isinstance(date, datetime) else None,
        method="llm",
    )
