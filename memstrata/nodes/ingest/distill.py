"""Ingestion stage 4: per batch of new episodes, HyMem's Level-1 summaries and the atomic facts, then the writes.

A closed episode is distilled once, with the model in LLM mode; an open one (its session's tail,
:mod:`.episodes`) gets the offline summary and facts, so it is searchable at once at no model cost.

Fanned out over episode batches with ``Send``. Each branch summarizes its episodes
(:mod:`.summaries`) and extracts their facts (:mod:`.facts`), then stores, in one
thread, summaries, then episodes (each listing its fact ids), then facts. A unit is
stored only after the unit it points up to, so the store never holds an episode
without its summary or a fact without its episode, even after a crash; and an
episode whose facts are not all stored counts as unfinished, so a re-run redoes it.
The branches take turns to write, and each reports progress before it lets the
next one write: at a progress event no batch is half-written, so a reader paused
there sees every session before or after its episodes, never in between.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Send

from memstrata.context import Context
from memstrata.memory.late_chunking import unit_vectors
from memstrata.memory.levels import Episode, EventSummary, Fact, Turn
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import read_episode_turns
from memstrata.nodes.common import progress
from memstrata.nodes.ingest.facts import episode_facts, replace_facts
from memstrata.nodes.ingest.summaries import episode_summary
from memstrata.runtime.node import open_node
from memstrata.state import EpisodeBatch, IngestState


def route_episodes(state: IngestState, runtime: Runtime[Context]) -> list[Send] | str:
    """Fan the new episodes out to at most ``Context.max_fanout`` branches."""
    drafts = state.get("drafts", [])
    if not drafts:
        return "link_entities"
    return episode_sends("distill_batch", drafts, runtime.context.max_fanout)


async def distill_batch(batch: EpisodeBatch, runtime: Runtime[Context]) -> dict[str, Any]:
    """Summarize one batch of episodes and extract their facts; store summaries, episodes, facts in that order."""
    ctx = runtime.context
    run = await open_node(runtime, "distill_batch", ingest=True)
    store = run.store
    episodes = [Episode.model_validate(d["episode"]) for d in batch["drafts"]]
    vectors = [d["vector"] for d in batch["drafts"]]
    turns = await asyncio.to_thread(read_episode_turns, store, ctx.user_id, episodes)
    of = {  # by conversation too: two conversations may hold episodes of the same id
        (e.conversation_id, e.id): [
            turns[(e.conversation_id, t)] for t in e.turn_ids if (e.conversation_id, t) in turns
        ]
        for e in episodes
    }
    fact_step, summary_step = run.step, run.step.sibling()
    offline = run.step.sibling(offline=True)  # an open episode's summary and facts are the offline ones until it closes
    started = time.perf_counter()
    facts: list[Fact] = []
    fallbacks = 0
    for i, ep in enumerate(episodes):
        got, ok = await episode_facts(offline if ep.open else fact_step, ep, of[(ep.conversation_id, ep.id)])
        facts += got
        fallbacks += not ok
        episodes[i] = ep.model_copy(update={"fact_ids": [f.id for f in got]})
    facts_s = time.perf_counter() - started
    summaries = [
        (await episode_summary(offline if ep.open else summary_step, ep, of[(ep.conversation_id, ep.id)])).model_copy(
            update={"open": ep.open}
        )
        for ep in episodes
    ]
    summaries_s = time.perf_counter() - started - facts_s
    quoted: dict[str, dict[str, Turn]] = {}  # conversation -> turn id -> turn
    for (conv_id, _), ts in of.items():
        quoted.setdefault(conv_id, {}).update((t.id, t) for t in ts)
    async with _write_lock():  # a progress event is a moment when no branch is half-way through its writes
        spent = await asyncio.to_thread(
            _write,
            store,
            ctx.user_id,
            (summaries, episodes, facts),
            vectors,
            quoted,
            ctx.episodes.embed_batch,
            pooled=ctx.episodes.span_vectors,
        )
        progress("facts", f"extracted {len(facts)} facts from {len(episodes)} episodes", done=len(episodes))
        progress("summaries", f"summarized and stored {len(summaries)} episodes (Level-1)", done=len(summaries))
    stats: dict[str, Any] = {
        "summaries_written": len(summaries),
        "facts_written": len(facts),
        "facts_fallbacks": fallbacks,
        "vectors_pooled": spent.pop("pooled"),
        "stage_seconds": {
            "summaries": round(summaries_s + spent["summaries"], 3),
            "facts": round(facts_s + spent["facts"], 3),
        },
    }
    llm = {
        name: step.meter.summary()
        for name, step in (("facts", fact_step), ("summarize", summary_step))
        if step.model is not None and step.meter.calls
    }  # only steps that called the model report
    if llm:
        stats["llm"] = llm
    return {"stats": stats}


_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _write_lock() -> asyncio.Lock:
    """One lock per event loop: the branches' writes (not their model calls) take turns."""
    loop = asyncio.get_running_loop()
    lock = _LOCKS.get(loop)
    if lock is None:
        lock = _LOCKS[loop] = asyncio.Lock()
    return lock


def _write(
    store: MemoryStore,
    user_id: str,
    units: tuple[list[EventSummary], list[Episode], list[Fact]],
    vectors: list[list[float]],
    turns: dict[str, dict[str, Turn]],
    batch: int,
    *,
    pooled: str,
) -> dict[str, float]:
    """Summaries, then episodes, then facts (parents first); the seconds each part took, and how many summaries
    and facts got their vectors pooled from their turns' tokens (:mod:`memstrata.memory.late_chunking`; ``pooled``
    is ``Context.episodes.span_vectors``).
    """
    summaries, episodes, facts = units
    started = time.perf_counter()
    # the texts encoded below (not pooled), in one encoder call: the calls below then find them held; its seconds
    # are shared between the two parts by their characters
    texts = (
        [s.embed_text() for s in summaries] if pooled != "pooled" else [],
        [f.embed_text() for f in facts] if pooled not in ("pooled", "facts") else [],
    )
    if len(texts[0]) + len(texts[1]) <= store.encoded.max_texts:  # else the second would evict the first
        store.encoded.embed([*texts[0], *texts[1]])
    chars = [sum(map(len, part)) for part in texts]
    summary_share = chars[0] / sum(chars) if sum(chars) else 0.0
    encoding = time.perf_counter() - started
    summary_vectors, pooled_summaries = unit_vectors(
        summaries, turns, store.encoded.tokens_of, store.encoded.embed, pooled=pooled == "pooled"
    )
    store.upsert(
        "summary",
        summaries,
        documents=[s.embed_text() for s in summaries],
        vectors=summary_vectors,
        extra=[s.metadata() for s in summaries],
    )
    store.upsert(
        "episode",
        episodes,
        documents=[e.embed_text() for e in episodes],
        vectors=vectors,
        extra=[e.metadata() for e in episodes],
    )
    middle = time.perf_counter()
    fact_vectors, pooled_facts = unit_vectors(
        facts, turns, store.encoded.tokens_of, store.encoded.embed, pooled=pooled in ("pooled", "facts")
    )
    replace_facts(store, user_id, episodes, facts, batch, fact_vectors)
    return {
        "summaries": middle - started - encoding * (1 - summary_share),
        "facts": time.perf_counter() - middle + encoding * (1 - summary_share),
        "pooled": pooled_summaries + pooled_facts,
    }


def episode_sends(node: str, drafts: list[dict[str, Any]], max_fanout: int) -> list[Send]:
    """New episodes cut into at most ``max_fanout`` batches, one ``Send`` to ``node`` per batch."""
    size = math.ceil(len(drafts) / min(max_fanout, len(drafts)))
    return [Send(node, {"drafts": drafts[i : i + size]}) for i in range(0, len(drafts), size)]
