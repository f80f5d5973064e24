"""H-Mem's entity profiles in retrieval (Table 5) and its tree searched bottom-up from the graph (§3.3 step 2).

``experimental.graph_profile_facts`` puts each seed's profile facts first among the facts the graph brings;
``experimental.graph_tree_walk`` adds the week, month and year nodes above the leaves the graph reached to the coarse
pool.
Both run on a real store of the bundled example (Priya and Tom, three sessions, a full temporal tree).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLE, HashEmbeddings

from memstrata import Memstrata
from memstrata.context import Context
from memstrata.memory.entity_graph.expansion import (
    GraphSearch,
    GraphView,
    expand,
    graph_reach,
    profile_facts,
    reached_facts,
)
from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels import Entity, TreeNode
from memstrata.memory.query import Hit, Query, Scope
from memstrata.memory.search.light import LightResult, light_lookup
from memstrata.memory.search.scoring import graph_ancestors, query_graph
from memstrata.runtime import search

CONV = "priya-tom"
TOM, PRIYA = (CONV, "ent:tom"), (CONV, "ent:priya")
QUESTIONS = ["What does Tom like?", "Where did Priya and Tom go?", "What is the cat called?", "Who is Rui?"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Memstrata, MemoryIndex, GraphView]]:
    mem = Memstrata(path=tmp_path_factory.mktemp("store"), embeddings=HashEmbeddings())
    mem.ingest(EXAMPLE, user_id="demo", close=True)
    index = MemoryIndex.load(mem.store, user_id="demo")
    yield mem, index, search.graph_view(mem.store, Context(user_id="demo"), index)
    mem.close()


def fact_scores(index: MemoryIndex) -> np.ndarray:
    """Fixed, distinct match scores per fact row: the order they give is known in advance."""
    return np.random.default_rng(7).permutation(len(index.events["fact"])).astype(np.float32) / 100


def lookup(
    mem: Memstrata,
    index: MemoryIndex,
    view: GraphView,
    text: str,
    *,
    scope: Scope = "Mixed",
    coarse_n: int = 1,
    **graph: Any,
) -> LightResult:
    """The light lookup of one query, with a small coarse pool so that what the graph adds is not already in it."""
    ctx = Context(user_id="demo")
    vec = np.asarray(mem.store.embeddings.embed_documents([text]), dtype=np.float32)
    return light_lookup(
        index,
        [Query(id="q0", text=text, scope=scope)],
        vec,
        level1_k=1,
        coarse_n=coarse_n,
        weights=search.weights(ctx),
        now=None,
        scope_kinds=search.scope_kinds(ctx),
        raw_per_query=75,
        superseded=0.8,
        level1_rank="fused",
        window_k=3,
        graph=GraphSearch(view, **graph),
    )


def as_data(reached: list) -> list[tuple[int, float, str]]:
    return [(row, round(score, 6), how.describe()) for row, score, how in reached]


# ---- settings ----------------------------------------------------------------------------------------
def test_the_run_context_sets_both_and_both_are_off_by_default(demo) -> None:
    mem, index, _ = demo
    off = asyncio.run(search.graph_search(Context(user_id="demo"), mem.store, index))
    on = asyncio.run(
        search.graph_search(
            Context(
                user_id="demo",
                experimental={"graph_profile_facts": 10, "graph_tree_walk": True},
            ),
            mem.store,
            index,
        )
    )
    assert off is not None and (off.profile, off.tree_walk) == (0, False)
    assert on is not None and (on.profile, on.tree_walk) == (10, True)


# ---- entity profiles -----------------------------------------------------------------------------------
def test_with_no_profile_facts_the_graph_brings_exactly_the_plain_ranking(demo) -> None:
    mem, index, view = demo
    scores = fact_scores(index)
    for text in QUESTIONS:
        plain = reached_facts(view, expand(view, view.seeds(text), hops=2, decay=0.5), scores, top=30)
        assert as_data(graph_reach(GraphSearch(view, profile=0), text, scores)) == as_data(plain)
        turns = lookup(mem, index, view, text, profile=0).turns
        assert not any("(profile" in h.via for h in turns)


def test_a_named_entitys_attributes_then_events_come_first_best_match_first(demo) -> None:
    _, index, view = demo
    scores = fact_scores(index)
    attributes, events = view.profile_rows(TOM)
    assert len(attributes) == 2 and len(events) > 3  # the example gives Tom two attributes and many events
    reached = graph_reach(GraphSearch(view, profile=3), "What does Tom like?", scores)
    best = sorted(attributes, key=lambda r: -scores[r]) + sorted(events, key=lambda r: -scores[r])[:1]
    assert [row for row, _, _ in reached[:3]] == best
    assert [how.describe() for _, _, how in reached[:3]] == ["Tom (profile attribute)"] * 2 + ["Tom (profile event)"]
    assert [score for _, score, _ in reached[:3]] == pytest.approx([float(scores[r]) for r in best])
    plain = reached_facts(view, expand(view, [TOM], hops=2, decay=0.5), scores, top=30)
    rest = [f for f in plain if f[0] not in best][: 30 - 3]
    assert as_data(reached[3:]) == as_data(rest) and len(reached) <= 30  # the plain ranking fills the other slots
    assert not any("(profile" in how.describe() for _, _, how in reached[3:])  # entities reached by hops: none


def test_profile_facts_take_slots_of_the_graphs_facts_seed_by_seed(demo) -> None:
    _, index, view = demo
    scores = fact_scores(index)
    both = "What do Priya and Tom like?"
    assert view.seeds(both) == [PRIYA, TOM]
    reached = graph_reach(GraphSearch(view, profile=3, top=4), both, scores)
    assert [how.describe() for _, _, how in reached] == [
        "Priya (profile event)",  # Priya has no attributes
        "Tom (profile attribute)",
        "Priya (profile event)",
        "Tom (profile attribute)",
    ]  # four slots, so each seed keeps its two best; Tom's event, Priya's third and the plain ranking are left out
    alone = profile_facts(view, {TOM: expand(view, [TOM], hops=0, decay=0.5)[TOM]}, scores, k=1)
    plain = graph_reach(GraphSearch(view, top=2), "What does Tom like?", scores)
    with_profile = graph_reach(GraphSearch(view, profile=1, top=2), "What does Tom like?", scores)
    assert alone[0][0] not in [row for row, _, _ in plain]  # the plain ranking would not bring it
    assert [row for row, _, _ in with_profile] == [alone[0][0], plain[0][0]]


def test_profile_facts_bring_their_turns_with_the_profile_in_their_path(demo) -> None:
    mem, index, view = demo
    facts, text = index.events["fact"], "What does Tom like?"
    found = lookup(mem, index, view, text, profile=3)
    query = Query(id="q0", text=text, scope="Mixed")
    reached = query_graph(index, query, GraphSearch(view, profile=3), superseded=0.8)  # as the lookup kept it
    profile = [(row, how.describe()) for row, _, how in reached if "(profile" in how.describe()]
    assert [path for _, path in profile] == ["Tom (profile attribute)"] * 2 + ["Tom (profile event)"]
    graph_turns = {(h.unit_id, h.via) for h in found.turns if h.found_by == "entity_graph"}
    for row, path in profile:
        for turn in facts.turn_rows[row]:
            assert (index.turns[turn].id, f"{path} -> {facts.units[row].id}") in graph_turns
    result = mem.retrieve(
        text,
        user_id="demo",
        context_budget=2000,
        experimental={"graph_profile_facts": 3},
    )
    assert any("(profile attribute)" in e.via for e in result.evidence)  # through the graph, from the run's context


# ---- the tree walked up ------------------------------------------------------------------------------------
def test_the_walk_adds_each_ancestor_of_the_reached_leaves_once_with_its_path(demo) -> None:
    mem, index, view = demo
    parent = {(n.conversation_id, c): n.id for n in index.events["tree_node"].units_as(TreeNode) for c in n.children}
    text = "What does Tom like?"
    off, on = lookup(mem, index, view, text), lookup(mem, index, view, text, tree_walk=True)
    walked = [h for h in on.coarse if h.kind == "tree_node" and h.found_by == "entity_graph"]
    assert {h.unit_id.split(":")[1] for h in walked} == {"week", "month", "year"}
    assert len({h.key for h in on.coarse}) == len(on.coarse)  # each node once
    assert [h.key for h in on.coarse if h not in walked] == [h.key for h in off.coarse]  # it only adds
    assert [h.key for h in on.turns] == [h.key for h in off.turns]
    leaves = {key.split("/", 1)[1] for key in on.graph_events if "/sum:" in key}  # newly coarse or not
    for hit in walked:
        start, *up = hit.via.split(" -up-> ")
        assert start.rsplit(" -> ", 1)[1] in leaves and up[-1] == hit.unit_id
        chain = [start.rsplit(" -> ", 1)[1], *up]
        assert all(parent[(CONV, a)] == b for a, b in pairwise(chain))
    ranked = [h for h in off.coarse if h.kind == "tree_node"]  # coarse_n=1: one ranked node, the floor
    assert len(ranked) == 1 and all(h.score == ranked[0].score for h in walked)
    assert all(on.graph_events[h.key] for h in walked)


def test_the_walk_adds_nothing_where_the_scope_reads_no_tree_or_the_pool_holds_it_already(demo) -> None:
    mem, index, view = demo
    text = "What does Tom like?"
    short = lookup(mem, index, view, text, scope="Short", tree_walk=True)
    assert not any(h.kind == "tree_node" for h in short.coarse)
    assert [h.key for h in short.coarse] == [h.key for h in lookup(mem, index, view, text, scope="Short").coarse]
    full_off = lookup(mem, index, view, text, coarse_n=100)
    full_on = lookup(mem, index, view, text, coarse_n=100, tree_walk=True)
    assert [(h.key, h.found_by) for h in full_on.coarse] == [(h.key, h.found_by) for h in full_off.coarse]
    walked = {k for k in full_on.graph_events if "/tree:" in k}
    assert walked and not any(full_on.graph_events[k] for k in walked)  # reached, but ranked already


# ---- nothing to use ------------------------------------------------------------------------------------------
def test_an_empty_user_and_entities_without_profiles_break_nothing(demo, tmp_path: Path) -> None:
    mem, index, _ = demo
    result = mem.retrieve(
        "What does Tom like?",
        user_id="nobody",
        context_budget=500,
        experimental={"graph_profile_facts": 10, "graph_tree_walk": True},
    )
    assert result.evidence == []
    empty = MemoryIndex.load(mem.store, user_id="nobody")
    leaf = Hit(kind="summary", unit_id="sum:s1:0-4", conversation_id=CONV, score=1.0, via="Tom -> f")
    assert graph_ancestors(empty, Query(id="q0", text="x"), [leaf], []) == []
    assert graph_ancestors(index, Query(id="q0", text="x"), [], []) == []
    ann = Entity(user_id="u", conversation_id="c", name="Ann", fact_ids=["f0", "f1"])
    bare = GraphView.build([ann], [], [], fact_row={("c", "f0"): 0, ("c", "f1"): 1})
    scores = np.array([0.2, 0.9], dtype=np.float32)
    plain = graph_reach(GraphSearch(bare), "Where is Ann?", scores)
    assert as_data(graph_reach(GraphSearch(bare, profile=5), "Where is Ann?", scores)) == as_data(plain)
    assert [row for row, _, _ in plain] == [1, 0]
