"""Scoring one query against the snapshot, and turning rows into :class:`~memstrata.memory.query.Hit` objects.

Shared by HyMem's light and deep modules and the follow-up: the query-only
parts (event scores per kind, each turn's own fused score) are computed once
per query text and memoized on the snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np

from memstrata.memory.entity_graph.expansion import GraphSearch, Reach, graph_reach
from memstrata.memory.index import MemoryIndex, tokenize
from memstrata.memory.levels.entity import ENTITY
from memstrata.memory.levels.level1.fact import FACT
from memstrata.memory.levels.level1.summary import SUMMARY
from memstrata.memory.levels.level1.tree_node import TREE_NODE, TreeNode
from memstrata.memory.query import Hit, Query
from memstrata.memory.search.associative import JOINT_KINDS, joint_top
from memstrata.memory.search.fusion import (
    Weights,
    event_prior,
    fused_events,
    link_prior,
    ranked_events,
    score_events,
    score_turns,
    turn_semantic,
)
from memstrata.memory.search.themes import ThemeReach, ThemeSearch, theme_prior_rows, theme_reach
from memstrata.memory.timeparse import format_date

FACT_KIND = FACT.kind
SUMMARY_KIND = SUMMARY.kind
TREE_KIND = TREE_NODE.kind


def turn_hits(
    index: MemoryIndex,
    rows: Sequence[int] | np.ndarray,
    parts: dict[str, np.ndarray],
    *,
    level: str,
    found_by: str,
    query: Query,
    via: str = "",
    window: str = "",
) -> list[Hit]:
    """The hits of turn rows ``rows``, in order, each with its score breakdown (and the tree window that
    found them, for turns reached through a tree node).

    Each part is read out of its array once for all the rows, not once per hit and part.
    """
    rows = [int(i) for i in rows]
    if not rows:
        return []
    names = [k for k in parts if k != "score"]
    # one rounding call for every part, not one a part
    columns = np.round(np.array([parts[k][rows] for k in names]), 4).tolist() if names else []
    scores = parts["score"][rows].tolist()
    dates = turn_dates(index)
    out = []
    for j, i in enumerate(rows):
        t = index.turns[i]
        out.append(
            Hit(
                kind=index.turns_kind,
                unit_id=t.id,
                conversation_id=t.conversation_id,
                score=scores[j] * query.weight,
                parts={k: column[j] for k, column in zip(names, columns, strict=True)},
                turn_ids=[t.id],
                found_by=found_by,
                level=level,
                query_id=query.id,
                text=t.text,
                time=dates[i],
                session_id=t.session_id,
                position=t.position,
                speaker=t.speaker,
                image_caption=t.image_caption,
                via=via,
                scope=query.scope,
                window=window,
            )
        )
    return out


def turn_dates(index: MemoryIndex) -> list[str | None]:
    """Each turn's date as readers see it (``8 May 2023``, else the raw timestamp), kept through writes."""
    return index.raw.column("shown_date", _shown_date)


def _shown_date(turn: Any) -> str | None:
    return _date_label(turn.timestamp) or turn.timestamp_raw


@lru_cache(maxsize=4096)
def _date_label(when: datetime | None) -> str:
    return format_date(when)  # the turns of a session share one time


def event_hit(index: MemoryIndex, kind: str, row: int, score: float, query: Query) -> Hit:
    """The hit of one event unit (e.g. a Level-1 summary)."""
    unit = index.events[kind].units[row]
    return Hit(
        kind=kind,
        unit_id=unit.id,
        conversation_id=unit.conversation_id,
        score=round(float(score), 4),
        turn_ids=unit.linked_turn_ids(),
        found_by=kind,
        level="level1",
        query_id=query.id,
        text=unit.embed_text(),
        time=format_date(unit.timestamp),
        session_id=getattr(unit, "session_id", ""),
    )


def event_turn_rows(index: MemoryIndex, hits: Sequence[Hit]) -> list[int]:
    """Rows of the raw turns the given event hits link to (hits of unknown units are skipped)."""
    rows: dict[int, None] = {}
    for hit in hits:
        table = index.events.get(hit.kind)
        row = table.by_key.get((hit.conversation_id, hit.unit_id)) if table is not None else None
        if table is not None and row is not None:
            rows.update(dict.fromkeys(table.turn_rows[row]))
    return list(rows)


def score_query(
    index: MemoryIndex,
    query: Query,
    qvec: np.ndarray,
    *,
    event_kinds: Sequence[str],
    top_events: int | Mapping[str, int],
    weights: Weights,
    now: datetime | None,
    graph: GraphSearch | None = None,
    superseded: float = 1.0,
    depth: Mapping[str, int] | None = None,
    themes: ThemeSearch | None = None,
) -> tuple[list[tuple[str, int, float]], dict[str, np.ndarray]]:
    """The query's events of the given kinds, best first, and every turn's fused score with its parts.

    Each kind's events are ranked as deep as ``top_events`` needs, or as ``depth`` asks when deeper
    (a kind ``depth`` names with no limit: ``len`` of its table). Without ``depth``, every event is ranked.

    With ``graph``, the facts reached through the entity graph add a prior of their own to the turns they
    reach (H-Mem: an entity path gives its fragments relevance). Units that are no longer current (a
    superseded fact) score ``superseded`` times their match, unless the query asks about the past.
    With ``themes``, the facts the theme path admits (:mod:`~memstrata.memory.search.themes`) lend their turns
    the same kind of prior. Events are ranked as ``weights.events`` says (:func:`fused_events`: their own match, or
    H-Mem's Eq. 3); the entity graph and the theme path seed from their own match.
    """
    key = query_key(query, superseded)
    if key not in index.memo:
        tokens = tokenize([query.text])[0]
        events = {
            k: score_events(t, qvec, tokens) * _validity(index, k, superseded, query.text)
            for k, t in index.events.items()
        }
        index.remember(key, (events, turn_semantic(index, qvec, tokens)))
    events, own = index.memo[key]
    ranked = ranked_events(
        fused_events(index, events, event_kinds, query.hint, weights=weights, now=now),
        event_kinds,
        None
        if depth is None
        else {
            k: max(depth.get(k, 0), top_events if isinstance(top_events, int) else top_events.get(k, 0))
            for k in event_kinds
        },
    )
    prior = event_prior(index, ranked, top_events)
    reached = query_graph(index, query, graph, events, qvec, superseded=superseded)
    if reached:
        facts = index.events[FACT_KIND]
        prior = np.maximum(prior, link_prior(index, [(facts.turn_rows[row], s) for row, s, _ in reached]))
    through_themes, _ = theme_reach(
        index, query, events, themes, key=key, joint=lambda: _joint(index, query, qvec, themes, superseded)
    )
    if through_themes:
        prior = np.maximum(prior, link_prior(index, theme_prior_rows(index, through_themes)))
    return ranked, score_turns(index, query, own, prior, weights=weights, now=now)


def _joint(
    index: MemoryIndex, query: Query, qvec: np.ndarray, themes: ThemeSearch | None, superseded: float
) -> list[tuple[str, int, float]]:
    """Bi-Mem's Eq. 9 top-k for the theme path, when it asks for one (``joint_k``)."""
    if themes is None or themes.joint_k <= 0:
        return []
    validity = {k: _validity(index, k, superseded, query.text) for k in JOINT_KINDS if k in index.events}
    return joint_top(index, qvec, tokenize([query.text])[0], themes.joint_k, validity=validity)


def query_key(query: Query, superseded: float) -> str:
    """What one query's memoized scores depend on: its text, its dense text and the validity factor."""
    return f"{query.text}\x1f{query.dense_text or ''}\x1f{superseded}"


def query_graph(
    index: MemoryIndex,
    query: Query,
    graph: GraphSearch | None,
    events: dict[str, np.ndarray] | None = None,
    qvec: np.ndarray | None = None,
    *,
    superseded: float = 1.0,
) -> list[tuple[int, float, Reach]]:
    """The facts the query reaches through the entity graph, memoized on the snapshot per what its fact scores
    depend on (:func:`query_key`: the query's text, its dense text and the validity factor ``superseded``) and the
    graph settings.

    :func:`score_query` computes it from the query's fact scores (and, with ``graph.vector_seeds``, its vector);
    later calls with the same key read the memo.
    """
    if graph is None or graph.hops < 0:
        return []
    settings = (graph.hops, graph.decay, graph.top, graph.vector_seeds, graph.seed_floor, graph.profile)
    key = "\x1f".join(["graph", query_key(query, superseded), *map(str, settings)])
    if key not in index.memo:
        if events is None or FACT_KIND not in events:
            return []
        near = nearest_entities(index, qvec, graph.vector_seeds, graph.seed_floor) if qvec is not None else []
        index.remember(key, graph_reach(graph, query.text, events[FACT_KIND], near))
    return index.memo[key]


def nearest_entities(index: MemoryIndex, qvec: np.ndarray, n: int, floor: float) -> list[tuple[str, str]]:
    """The ``n`` entities whose vector is nearest ``qvec`` with a cosine of at least ``floor``, as graph nodes."""
    table = index.tables.get(ENTITY.kind)
    if n <= 0 or table is None or not len(table.units):
        return []
    sims = table.vecs @ np.asarray(qvec, dtype=np.float32)
    rows = [int(r) for r in np.argsort(-sims, kind="stable")[:n] if sims[r] >= floor]
    return [(table.units[r].conversation_id, table.units[r].id) for r in rows]


def graph_hits(
    index: MemoryIndex, query: Query, reached: Sequence[tuple[int, float, Reach]], parts: dict[str, np.ndarray]
) -> list[Hit]:
    """The raw turns of the facts reached through the graph, each naming the entity path that found it."""
    facts = index.events[FACT_KIND]
    out = []
    for row, _, how in reached:
        out += turn_hits(
            index,
            facts.turn_rows[row],
            parts,
            level="level1",
            found_by="entity_graph",
            query=query,
            via=f"{how.describe()} -> {facts.units[row].id}",
        )
    return out


def theme_hits(
    index: MemoryIndex, query: Query, reached: Sequence[ThemeReach], parts: dict[str, np.ndarray]
) -> list[Hit]:
    """The raw turns of the facts the theme path admitted, each naming its theme and fact."""
    facts = index.events[FACT_KIND]
    out = []
    for r in reached:
        out += turn_hits(
            index, facts.turn_rows[r.fact_row], parts, level="level1", found_by=r.found_by, query=query, via=r.via
        )
    return out


def graph_events(
    index: MemoryIndex,
    query: Query,
    reached: Sequence[tuple[int, float, Reach]],
    ranked: Sequence[tuple[str, int, float]],
) -> list[Hit]:
    """H-Mem's entity seeds mapped through their fragments to tree events (§3.3).

    For each fact the graph reached, the Level-1 event summary holding its raw turns (a leaf of the
    temporal tree) becomes a candidate the deep module can backtrack into, so the whole episode around the
    fact is read, not only the fact's own turns. Each keeps its own score for the query (``ranked``, the
    summaries' fused scores; the lowest of them when it is not ranked), so the coarse pool stays ordered
    by one scale, and names the path: ``<entity path> -> <fact> -> <summary>``.
    """
    summaries, facts = index.events.get(SUMMARY_KIND), index.events.get(FACT_KIND)
    if not reached or summaries is None or facts is None or not len(summaries):
        return []
    key = "summary_of_turn"
    if key not in index.memo:
        index.remember(key, {t: row for row, turns in enumerate(summaries.turn_rows) for t in turns})
    holder: dict[int, int] = index.memo[key]
    own = {row: score for kind, row, score in ranked if kind == SUMMARY_KIND}
    floor = min(own.values(), default=0.0)
    out: dict[int, Hit] = {}
    for fact_row, _, how in reached:
        for turn_row in facts.turn_rows[fact_row]:
            row = holder.get(turn_row)
            if row is not None and row not in out:
                hit = event_hit(index, SUMMARY_KIND, row, own.get(row, floor) * query.weight, query)
                out[row] = hit.with_(
                    found_by="entity_graph", via=f"{how.describe()} -> {facts.units[fact_row].id} -> {hit.unit_id}"
                )
    return list(out.values())


def graph_ancestors(
    index: MemoryIndex, query: Query, leaves: Sequence[Hit], ranked: Sequence[tuple[str, int, float]]
) -> list[Hit]:
    """H-Mem's bottom-up tree search (§3.3 step 2): the week, month and year nodes above the leaves the graph reached.

    From each leaf summary in ``leaves`` (the hits of :func:`graph_events`), the walk climbs the temporal tree one
    parent at a time (a node's parent is the node that lists it among its children) up to its root, and every
    node it passes becomes a candidate for the deep module's coarse pool. Each node comes once per query: a walk
    stops at a node an earlier walk passed, whose ancestors are already in, so there are at most as many as the
    tree has nodes above those leaves (one per level above each). Each keeps its own score for the query as
    :func:`graph_events` does (``ranked``, the tree nodes' fused scores; the lowest of them when it is not ranked),
    and continues its leaf's path: ``<leaf's path> -up-> <week> -up-> <month> -up-> <year>``.
    """
    tree = index.events.get(TREE_KIND)
    if not leaves or tree is None or not len(tree):
        return []
    key = "tree_parent_of"
    if key not in index.memo:
        nodes = tree.units_as(TreeNode)
        index.remember(key, {(n.conversation_id, c): row for row, n in enumerate(nodes) for c in n.children})
    parent: dict[tuple[str, str], int] = index.memo[key]
    own = {row: score for kind, row, score in ranked if kind == TREE_KIND}
    floor = min(own.values(), default=0.0)
    out: dict[int, Hit] = {}
    for leaf in leaves:
        via, row = leaf.via, parent.get((leaf.conversation_id, leaf.unit_id))
        while row is not None and row not in out:
            hit = event_hit(index, TREE_KIND, row, own.get(row, floor) * query.weight, query)
            via = f"{via} -up-> {hit.unit_id}"
            out[row] = hit.with_(found_by="entity_graph", via=via)
            row = parent.get((hit.conversation_id, hit.unit_id))
    return list(out.values())


_PAST = re.compile(r"\b(before|used to|previous(?:ly)?|former(?:ly)?|originally|earlier|at first|past)\b", re.I)


def _validity(index: MemoryIndex, kind: str, factor: float, text: str) -> np.ndarray | float:
    """Per unit: 1, or ``factor`` for a unit that is no longer current (unless the text asks about the past)."""
    units = index.events[kind].units
    replaceable = bool(units) and isinstance(getattr(type(units[0]), "current", None), property)
    if factor == 1.0 or not replaceable or _PAST.search(text):
        return 1.0  # only units with a ``current`` property (facts) are ever replaced
    key = f"validity\x1f{kind}\x1f{factor}"
    if key not in index.memo:
        current = np.array(index.events[kind].column("current", _current), dtype=bool)
        index.remember(key, np.where(current, 1.0, factor))
    return index.memo[key]


def _current(unit: Any) -> bool:
    return unit.current
