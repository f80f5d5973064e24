"""A node's one call into the runtime: :func:`open_node` returns everything the node reads besides its state.

A node used to ask the runtime for each piece in turn (the store, the model, the snapshot, query
vectors, the scoring settings, the reference time, the entity graph), about 27 round trips on an
offline deep query. Now each node run opens one :class:`NodeRun` and then calls into
:mod:`memstrata.memory` with what it holds. A retrieval node counts its open in its update
(:attr:`NodeRun.opens`, summed by the state's reducer), and the answer's trace reports the counts
(``trace["runtime_opens"]``, per node).

Example:
    >>> run = await open_node(runtime, "lookup_level1", state, queries=queries, graph=True)  # doctest: +SKIP
    >>> light_lookup(run.index, queries, run.vectors, weights=run.weights, now=run.now, ...)  # doctest: +SKIP

The node then only reads the fields of its :class:`NodeRun`; the answer node also hands the query's working set
back through it (:meth:`NodeRun.release`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.entity_graph.expansion import GraphSearch
from memstrata.memory.index import MemoryIndex
from memstrata.memory.query import Query
from memstrata.memory.search.fusion import Weights
from memstrata.memory.search.themes import ThemeSearch
from memstrata.memory.store import MemoryStore
from memstrata.memory.tiers.priority import PriorityWeights
from memstrata.runtime import search
from memstrata.runtime.resolve import aresolve_store
from memstrata.runtime.step import Step


@dataclass
class NodeRun:
    """What one node run reads besides its state.

    Attributes:
        ctx: the run's settings.
        store: the memory store (the app's, when it compiled the graph with a memstrata store).
        step: the metered model call (``step.model`` is ``None`` offline).
        node: the node's name.
        run_key: names the query's search working set (made by its first node; ``""`` in a ``Send`` branch, which
            searches nothing, and in ingestion).
        index: the search snapshot (``search=True``).
        vectors: one vector per query (``queries`` given).
        graph: the entity graph for expansion (``graph=True``; ``None`` when off or empty).
        themes: the theme path's settings (``graph=True``; ``None`` when off).
        now: ``Context.now``, else the snapshot's latest turn: results never depend on the day they run.
        weights: the fusion and Eq. 3 settings.
        scope_kinds: scope -> the unit kinds it searches directly.
        event_k: how many of each Level-1 kind's best units the light module reads.
        pool_size: turns each query brings to the candidates at least (enough to fill the context budget).
        tier: the HMO tier searched (1 the cache, 2 with the buffer, 3 the archive; 0: no tiers).
    """

    ctx: Context
    store: MemoryStore
    step: Step
    node: str
    run_key: str = ""
    index: MemoryIndex | None = None
    vectors: np.ndarray | None = None
    graph: GraphSearch | None = None
    themes: ThemeSearch | None = None
    now: datetime | None = None
    weights: Weights | None = None
    scope_kinds: dict[str, list[str]] = field(default_factory=dict)
    event_k: dict[str, int] = field(default_factory=dict)
    pool_size: int = 0
    tier: int = 0

    @property
    def tier_weights(self) -> PriorityWeights:
        """The coefficients of HMO's priority as read from its prose (Eq. 5), from ``Context``."""
        return search.tier_weights(self.ctx)

    @property
    def opens(self) -> dict[str, int]:
        """This open as the state's ``opens`` counts it: a retrieval node puts it in its update."""
        return {self.node: 1}

    async def probe_archive(self) -> tuple[int, int] | None:
        """In an active HMO tier: how many of the archive's nearest summaries to the queries the tier holds, of how
        many (:func:`memstrata.runtime.search.archive_probe`); ``None`` outside tiers 1-2.
        """
        if not 0 < self.tier < 3 or self.index is None or self.vectors is None:
            return None
        return await search.archive_probe(self.ctx, self.store, self.index, self.vectors)

    async def record_use(self, chosen: Sequence[Any]) -> dict[str, Any] | None:
        """HMO's read-side update for the query's cited turns when tiers are on (:func:`memstrata.runtime.search.
        record_use`); ``None`` when they are off or nothing was cited.
        """
        if not self.ctx.tiers or not chosen:
            return None
        return await search.record_use(self.ctx, self.store, chosen, now=self.now)

    async def query_vectors(self, queries: Sequence[Query]) -> np.ndarray:
        """One vector per query, from the store's cache of query vectors (:func:`memstrata.runtime.search.
        query_vectors`).
        """
        return await search.query_vectors(self.ctx, self.store, list(queries))

    async def release(self) -> None:
        """The query's candidates are chosen: drop a bounded run's working set and hand its heap back."""
        await search.close_index(self.ctx, self.store, run=self.run_key)


async def open_node(
    runtime: Runtime[Context],
    node: str,
    state: Mapping[str, Any] | None = None,
    *,
    search_index: bool = False,
    queries: Sequence[Query] = (),
    graph: bool = False,
    new_query: bool = False,
    ingest: bool = False,
) -> NodeRun:
    """Open what node ``node`` reads, in one call.

    Args:
        runtime: LangGraph's ``Runtime`` (its ``context`` is the :class:`Context`; its ``store``, when the app
            compiled the graph with a memstrata store, is the memory to use).
        node: the node's name, for the count.
        state: the node's input: its ``llm_calls`` (and a branch's ``llm_budget``) make the step's meter, its
            ``run_key`` names the search working set.
        search_index: open the snapshot (bounded runs grow it with ``queries``' candidates).
        queries: embed these (one vector each, ``Query.embed_text``).
        graph: build the entity graph for expansion too, and the theme path's settings.
        new_query: the query's first node: make its run key, unless the state has one.
        ingest: an ingestion stage (no token budget).
    """
    ctx = runtime.context
    if not isinstance(ctx, Context):  # a run started with no context at all (Studio, the API)
        msg = (
            "the run has no context: pass one with the user whose memory it reads or writes, "
            'e.g. context={"user_id": "..."}'
        )
        raise ValueError(msg)
    store = await aresolve_store(ctx, getattr(runtime, "store", None))
    if ingest:
        return NodeRun(ctx, store, Step.for_ingestion(ctx), node)
    state = state or {}
    key = state.get("run_key") or (uuid.uuid4().hex if new_query else "")
    step = Step.for_query(ctx, state.get("llm_calls") or [], ceiling=state.get("llm_budget"))
    run = NodeRun(ctx, store, step, node, run_key=key)
    queries = list(queries)
    if search_index:
        large = None
        if "tier" in state:
            run.tier = state["tier"]
        else:
            run.tier, large = await search.first_tier(ctx, store)
        opening = search.open_index(ctx, store, run=key, queries=queries, tier=run.tier, large=large)
        if queries and large is False:  # a whole-memory snapshot (no tier: not large) needs no query vector to
            # open: a user's first query reads it from the store while the queries are encoded (both leave the GIL)
            run.index, run.vectors = await asyncio.gather(opening, search.query_vectors(ctx, store, queries))
        else:
            run.index = await opening
    if queries and run.vectors is None:
        run.vectors = await search.query_vectors(ctx, store, queries)
    if graph and run.index is not None:
        run.graph = await search.graph_search(ctx, store, run.index)
        run.themes = search.theme_search(ctx, reader=step.model is not None)
    if search_index:
        assert run.index is not None  # opened above
        run.now = search.reference_now(ctx, run.index)
        run.weights, run.scope_kinds = search.weights(ctx), search.scope_kinds(ctx)
        run.event_k, run.pool_size = search.event_k(ctx), search.pool_size(ctx)
    return run
