"""The search side of a retrieval node: the snapshot it reads, query vectors, and the scoring settings.

:func:`memstrata.runtime.node.open_node` calls these once per node run and hands the node a
:class:`~memstrata.runtime.node.NodeRun`; the search itself is pure code in :mod:`memstrata.memory.search`.
A snapshot is kept per user and scope, and query vectors in a small cache, both on the store
(``store.caches``, :mod:`memstrata.memory.index.caches`); every snapshot a node opens marks its user used and
holds the store's users within the run's ``Context.cache_mb``, least recently used user dropped first.
:func:`weights` and :func:`bounds` are the one place the scoring and bounded-path settings are built from
:class:`~memstrata.context.Context`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memstrata.context import Context
from memstrata.memory.entity_graph.expansion import GraphSearch, GraphView
from memstrata.memory.index import MemoryIndex
from memstrata.memory.index.active import active_index
from memstrata.memory.index.bounded import Bounds, release_run, working_set
from memstrata.memory.index.held import PerConversation, moved
from memstrata.memory.index.snapshot import cached_snapshot, forget_snapshot
from memstrata.memory.levels import ENTITY, FACT, SUMMARY, TREE_NODE, Entity, Fact, levels, scope_table
from memstrata.memory.query import Query
from memstrata.memory.search.fusion import Weights
from memstrata.memory.search.themes import ThemeSearch
from memstrata.memory.store import MemoryStore
from memstrata.memory.tiers.priority import PriorityWeights
from memstrata.memory.tree.search import load_reinforcement, reinforcement_current
from memstrata.runtime.process import trim_heap


async def open_index(
    ctx: Context,
    store: MemoryStore,
    *,
    run: str | None = None,
    queries: Sequence[Query] = (),
    tier: int = 0,
    large: bool | None = None,
) -> MemoryIndex:
    """The search snapshot a node reads.

    Up to ``Context.scale.max_turns`` raw turns: the user's whole memory, loaded once per
    process and updated after writes. Above it: with ``tier`` 1 or 2, HMO's active tiers (the cache, or the
    cache and the buffer, :mod:`memstrata.memory.index.active`); else (the archive) the bounded snapshot of one
    retrieval ``run`` (:mod:`memstrata.memory.index.bounded`), grown with the candidates of ``queries`` the run
    has not searched before. ``large``: the size check's answer, when the caller has just made it.

    Whichever it opens, the user is marked used on the store's caches, which then drop the least recently used
    other users beyond ``Context.cache_mb`` (:func:`keep_within_budget`).
    """
    index = await _open(ctx, store, run=run, queries=queries, tier=tier, large=large)
    await keep_within_budget(ctx, store)
    return await _reinforced(store, ctx, index)


async def keep_within_budget(ctx: Context, store: MemoryStore) -> None:
    """Mark the run's user used on the store's caches and drop the least recently used other users while the
    store's users hold more than ``Context.cache_mb`` (read from the run's context: one store serves runs of
    many contexts). The users are dropped on a worker thread: dropping waits for the active tiers' lock, held
    through reads from the store, and freeing a large snapshot takes time, neither of which the event loop may.
    """
    caches = store.caches
    victims = caches.touch(ctx.user_id, budget_mb=ctx.cache_mb)
    for user in victims:
        await asyncio.to_thread(caches.drop_user, user)


async def _open(
    ctx: Context, store: MemoryStore, *, run: str | None, queries: Sequence[Query], tier: int, large: bool | None
) -> MemoryIndex:
    if tier in (1, 2) and (index := await _active(ctx, store, tier)) is not None:
        return index
    if large if large is not None else await _is_large(store, ctx):
        ws = working_set(
            store,
            user_id=ctx.user_id,
            conversation_id=ctx.conversation_id,
            run=run or "",
            bounds=bounds(ctx),
            window_widths=ctx.retrieval.window_widths,
        )
        vectors = await query_vectors(ctx, store, list(queries)) if queries else None
        return await asyncio.to_thread(ws.ensure, [q.text for q in queries], vectors)
    cached = MemoryIndex.fresh(
        store, user_id=ctx.user_id, conversation_id=ctx.conversation_id, refresh_seconds=ctx.scale.refresh_s
    )
    if cached is not None and cached.window_widths == ctx.retrieval.window_widths:
        return cached
    return await asyncio.to_thread(
        MemoryIndex.load,
        store,
        user_id=ctx.user_id,
        conversation_id=ctx.conversation_id,
        refresh_seconds=ctx.scale.refresh_s,
        window_widths=ctx.retrieval.window_widths,
        freeze=ctx.gc_freeze,
    )


async def first_tier(ctx: Context, store: MemoryStore) -> tuple[int, bool]:
    """Where a query starts, and whether the scope is past ``scale.max_turns``: the cache (1) for such a user
    with records in it and ``Context.tiers`` on; else 0, no tiers (the whole-memory snapshot holds everything the
    cache would).
    """
    large = await _is_large(store, ctx)
    if not ctx.tiers or not large:
        return 0, large
    return (1 if await _active(ctx, store, 1) is not None else 0), large


async def _active(ctx: Context, store: MemoryStore, depth: int) -> MemoryIndex | None:
    return await asyncio.to_thread(
        active_index,
        store,
        user_id=ctx.user_id,
        conversation_id=ctx.conversation_id,
        depth=depth,
        bounds=bounds(ctx),
        refresh_seconds=ctx.tier.refresh_s,
        window_widths=ctx.retrieval.window_widths,
    )


async def archive_probe(ctx: Context, store: MemoryStore, index: MemoryIndex, vectors: np.ndarray) -> tuple[int, int]:
    """Of the archive's ``tier.probe_k`` nearest summaries to each query vector (Chroma's HNSW, under the tenant
    filter), how many the tier's snapshot ``index`` holds, and of how many: the offline check that a tier holds
    what the archive would rank first (:func:`memstrata.nodes.retrieve.gate.offline_confidence`).
    """
    if ctx.tier.probe_k <= 0 or not len(vectors):
        return 0, 0
    found = await asyncio.to_thread(
        store.nearest,
        "summary",
        user_id=ctx.user_id,
        vectors=list(vectors),
        k=ctx.tier.probe_k,
        conversation_id=ctx.conversation_id,
    )
    keys = {(r.metadata["conversation_id"], r.unit_id) for hits in found for r in hits}
    table = index.events.get("summary")
    held = sum(1 for key in keys if table is not None and key in table.by_key)
    return held, len(keys)


async def record_use(
    ctx: Context, store: MemoryStore, chosen: Sequence[Any], *, now: datetime | None
) -> dict[str, Any]:
    """HMO's read-side update for a query's cited turns when tiers are on, tiered or not
    (:mod:`memstrata.memory.tiers.use`), off the loop.
    """
    from memstrata.memory.index.active import held_active, note_moves
    from memstrata.memory.tiers.anchor import read_anchor
    from memstrata.memory.tiers.use import record_use as use
    from memstrata.memory.tiers.use import used_records

    def run() -> dict[str, Any]:
        items = used_records(store, ctx.user_id, [(h.conversation_id, h.session_id, h.unit_id) for h in chosen])
        done = use(
            store,
            ctx.user_id,
            items,
            # as this process holds them: read every tier_refresh_s, with its own moves since
            active=held_active(
                store, user_id=ctx.user_id, conversation_id=ctx.conversation_id, refresh_seconds=ctx.tier.refresh_s
            ),
            persona=read_anchor(store, ctx.user_id, sorted({conv for conv, _, _ in items})),
            now=now.timestamp() if now else time.time(),
            weights=tier_weights(ctx),
            recent_sessions=ctx.tier.recent_sessions,
            pivotal=ctx.tier.pivotal,
            buffer=ctx.tier.buffer,
        )
        written = done.pop("written")
        if written:  # the counters as use() wrote them, not read back from the store
            note_moves(store, ctx.user_id, written)
        return done

    return await asyncio.to_thread(run)


async def close_index(ctx: Context, store: MemoryStore, *, run: str | None) -> None:
    """End of a retrieval run: drop its bounded working set, if it had one, and hand the freed heap back.

    A working set of a large user holds tens of megabytes of parsed records and vectors; once dropped,
    glibc keeps most of those pages in its per-thread arenas (the candidates are read on several
    threads), so the process would grow with every query until :func:`trim_heap` returns them.
    A run on the whole-memory snapshot holds nothing of its own and costs nothing here. The trim runs on a
    worker thread (6-14 ms at 100k turns), so other runs on the event loop do not wait for it.
    """
    if release_run(store, user_id=ctx.user_id, conversation_id=ctx.conversation_id, run=run or ""):
        await asyncio.to_thread(trim_heap)


def tier_weights(ctx: Context) -> PriorityWeights:
    """The coefficients of HMO's priority as read from its prose (Eq. 5), from ``tier_*``."""
    return PriorityWeights(alpha=ctx.tier.alpha, beta=ctx.tier.beta, tau_days=ctx.tier.decay_days)


def bounds(ctx: Context) -> Bounds:
    """The bounded path's candidate counts, from the ``bounded_*`` settings."""
    return Bounds(
        dense_k=ctx.scale.dense_k,
        event_k=ctx.scale.event_k,
        lexical_k=ctx.scale.lexical_k,
        lexical_terms=ctx.scale.lexical_terms,
        sessions=ctx.scale.sessions,
        entity_facts=ctx.scale.entity_facts,
        cached_units=ctx.scale.cache_units,
        # the bounded path serves large scopes only: their latest time is trusted as long as their size is
        latest_seconds=max(ctx.scale.refresh_s, ctx.scale.large_recheck_s),
    )


async def _is_large(store: MemoryStore, ctx: Context) -> bool:
    """Whether the searched scope holds more than ``scale.max_turns`` raw turns (re-checked every
    ``scale.refresh_s``); a scope that grew past it drops its whole-memory snapshot.
    """
    caches, key = store.caches, (ctx.user_id, ctx.conversation_id, ctx.scale.max_turns)
    with caches.sizes_lock:
        seen = caches.sizes.get(key)
    # A large scope is re-checked less often: the check reads up to snapshot_max_turns ids (from the word index
    # when embedded, 25 ms at 1M turns; from Chroma on a server, 12 s at 100k),
    # and the bounded path is correct at any size, so a scope that shrank only costs speed for a while.
    trust = max(ctx.scale.refresh_s, ctx.scale.large_recheck_s) if seen is not None and seen[1] else ctx.scale.refresh_s
    if seen is not None and time.monotonic() - seen[0] < trust:
        return seen[1]
    held = cached_snapshot(store, ctx.user_id, ctx.conversation_id)
    if seen is not None and not seen[1] and held is not None and len(held.turns) <= ctx.scale.max_turns:
        # the whole-memory snapshot is kept up to date (this process's writes in place, other processes'
        # by its own count check), so its size answers without reading ids from the store
        with caches.sizes_lock:
            caches.sizes[key] = (time.monotonic(), False)
        return False
    large = await asyncio.to_thread(
        store.holds_more_than,
        levels(role="raw")[0].kind,
        ctx.scale.max_turns,
        user_id=ctx.user_id,
        conversation_id=ctx.conversation_id,
    )
    with caches.sizes_lock:
        caches.sizes[key] = (time.monotonic(), large)
    if large:
        forget_snapshot(store, ctx.user_id, ctx.conversation_id)
    return large


async def _reinforced(store: MemoryStore, ctx: Context, index: MemoryIndex) -> MemoryIndex:
    """The snapshot with the temporal tree's reinforcement counts (read again only where they moved): the event
    summaries', and with ``Context.weights.events="eq3"`` the tree nodes' too.
    """
    for kind in (SUMMARY.kind, TREE_NODE.kind) if ctx.weights.events == "eq3" else (SUMMARY.kind,):
        if not reinforcement_current(index, store.counters, ctx.user_id, kind=kind):
            await asyncio.to_thread(
                load_reinforcement, index, store.counters, ctx.user_id, ctx.conversation_id, kind=kind
            )
    return index


async def embed_texts(store: MemoryStore, texts: list[str], *, keep: int) -> np.ndarray:
    """Query vectors in one batch; repeated texts come from the store's cache of the latest ``keep``
    (``store.caches.vectors``: a store has one embedder).
    """
    caches = store.caches
    with caches.vectors_lock:
        missing = [t for t in dict.fromkeys(texts) if t not in caches.vectors]
    if missing:
        vecs = await asyncio.to_thread(store.embeddings.embed_documents, missing)
        with caches.vectors_lock:
            for text, vec in zip(missing, vecs, strict=True):
                caches.vectors[text] = np.asarray(vec, dtype=np.float32)
            while len(caches.vectors) > keep:
                caches.vectors.popitem(last=False)
    with caches.vectors_lock:
        return np.stack([caches.vectors[t] for t in texts]) if texts else np.zeros((0, 1))


async def query_vectors(ctx: Context, store: MemoryStore, queries: list[Query]) -> np.ndarray:
    """One vector per query; a query may name another text to embed (``dense_text``).

    Offline rewrites (pseudo-relevance-feedback terms, the missing-info keywords)
    are bags of words: they search BM25 with their own words and the dense index
    with the question they came from, whose vector is already cached. That saves a
    model call per rewrite without losing what the rewrite adds.
    """
    return await embed_texts(store, [q.embed_text for q in queries], keep=ctx.scale.query_vectors)


def weights(ctx: Context) -> Weights:
    """The fusion settings of a run (``Context.weights``)."""
    return ctx.weights


def theme_search(ctx: Context, *, reader: bool = False) -> ThemeSearch | None:
    """The theme path's settings of a run (``None`` when ``themes.search_k`` is 0). With a ``reader`` (a model),
    Stage II is the reader's own (:mod:`memstrata.nodes.retrieve.stage2`), so the path leaves out its offline proxy.
    """
    if ctx.themes.search_k <= 0:
        return None
    return ThemeSearch(
        themes=ctx.themes.search_k,
        facts=ctx.themes.fact_seeds,
        select=ctx.themes.select,
        alpha=ctx.themes.alpha,
        coverage=ctx.themes.coverage,
        theme_budget=ctx.themes.pick,
        fact_budget=ctx.themes.fact_pick,
        spread=ctx.themes.spread,
        stage2=ctx.experimental.theme_stage2 and not reader,
        patience=ctx.themes.patience,
        knn=ctx.themes.knn,
        fact_order=ctx.themes.fact_order,
        joint_k=ctx.experimental.theme_joint_k,
    )


def scope_kinds(ctx: Context) -> dict[str, list[str]]:
    """Scope -> the unit kinds it searches directly (``Context.retrieval.scope_kinds``, else each kind's
    declaration).
    """
    return {k: list(v) for k, v in ctx.retrieval.scope_kinds.items()} if ctx.retrieval.scope_kinds else scope_table()


def reference_now(ctx: Context, index: MemoryIndex) -> datetime | None:
    """``Context.now``, else the namespace's latest turn, so results never depend on the day they run."""
    return ctx.now or index.latest


def event_k(ctx: Context) -> dict[str, int]:
    """How many of each event kind's best units the light module reads: ``graph.fact_k`` for facts, ``tree.k`` for
    tree nodes, else ``level1_k``.
    """
    return {
        lv.kind: ctx.graph.fact_k if lv.kind == FACT.kind else ctx.tree.k if lv.kind == TREE_NODE.kind else ctx.level1_k
        for lv in levels(role="event")
    }


def pool_size(ctx: Context) -> int:
    """Turns each query brings to the candidates at least: enough to fill the context budget.

    A turn costs about ``retrieval.mmr_tokens_per_pick`` tokens at least, so a pool of
    ``context_budget / mmr_tokens_per_pick`` turns can fill the budget; a fixed pool
    runs dry at large budgets and leaves context unused.
    """
    return max(ctx.retrieval.direct_turns, ctx.context_budget // ctx.retrieval.mmr_tokens_per_pick)


async def graph_search(ctx: Context, store: MemoryStore, index: MemoryIndex) -> GraphSearch | None:
    """The entity graph of the snapshot's scope, for expansion (``None`` when it is off or empty)."""
    facts = index.events.get(FACT.kind)
    entities = index.tables.get(ENTITY.kind)
    if ctx.graph.hops < 0 or facts is None or entities is None or not len(entities):
        return None
    view: GraphView | None = index.memo.get("graph_view")
    if view is None:
        view = await asyncio.to_thread(graph_view, store, ctx, index)
        index.remember("graph_view", view)
    return GraphSearch(
        view,
        hops=ctx.graph.hops,
        decay=ctx.graph.hop_decay,
        top=ctx.graph.facts,
        vector_seeds=ctx.graph.vector_seeds,
        seed_floor=ctx.graph.seed_floor,
        profile=ctx.experimental.graph_profile_facts,
        tree_walk=ctx.experimental.graph_tree_walk,
    )


def graph_view(store: MemoryStore, ctx: Context, index: MemoryIndex) -> GraphView:
    """The entity graph of the snapshot's scope: its entities and facts, and the edge store's entity edges.

    The bounded path reads the entity edges of the conversations a query seeds, in one read, when the search
    needs them (a conversation the query seeds nothing in is not read). The whole-memory
    snapshot keeps it through in-place updates (``index.held``) with the edges it read: after this
    process's writes, only the conversations whose entities, facts or entity edges changed are read
    and redone (``MemoryIndex.writes``, ``EdgeStore.writes``); a removal that moved fact or entity rows
    rebuilds the view, and a snapshot rebuilt after another process's writes reads everything.
    """
    facts, entities = index.events[FACT.kind], index.tables[ENTITY.kind]
    bounded = index.bounded  # set once, when the bounded path builds the snapshot
    if bounded is not None:

        def edges_of(convs: Sequence[str]) -> list[Any]:
            held = [c for c in convs if c in bounded and ctx.conversation_id in (None, c)]
            return store.edges.get(ctx.user_id, conversations=held, src_kind=ENTITY.kind) if held else []

        return GraphView.build(
            entities.units_as(Entity), facts.units_as(Fact), [], fact_row=facts.by_key, edges_of=edges_of
        )

    def read(conv: str | None) -> dict[str, list[Any]]:
        by_conv: dict[str, list[Any]] = {}
        for e in store.edges.get(ctx.user_id, conversation_id=conv, src_kind=ENTITY.kind):
            by_conv.setdefault(e.conversation_id, []).append(e)
        return by_conv

    with index.lock:  # one query at a time brings the held view up to date; old views are never changed
        edge_stamp = store.edges.writes.get(ctx.user_id, {})
        unit_stamp = index.stamp((ENTITY.kind, FACT.kind))
        held = index.held.get("entity_graph")
        if held is None:
            edges, changed = PerConversation.read(edge_stamp, read, scope=ctx.conversation_id), None
        else:
            edges, seen, view = held
            changed = edges.refresh(edge_stamp, read, scope=ctx.conversation_id)
            units_changed = moved(seen, unit_stamp)
            changed = None if changed is None or units_changed is None else changed | units_changed
        if changed is None:
            view = GraphView.build(
                entities.units_as(Entity),
                facts.units_as(Fact),
                [e for part in edges.parts.values() for e in part],
                fact_row=facts.by_key,
            )
        else:
            for conv in changed - {"*"}:
                view = view.replace(conv, entities.units_as(Entity), edges.parts.get(conv, []))
        index.held["entity_graph"] = (edges, unit_stamp, view)
        return view
