"""HyMem's light module (§3.2), offline: the top-k Level-1 events of each query, and the turns they reach.

The Level-1 lookup ranks every ``event`` kind the query's scope searches (the
event summaries, and any later event kind), orders the summaries by their own
match fused with their turns' (:func:`rerank_summaries`), keeps the top ``level1_k`` as this
round's light evidence and the top ``coarse_n`` as the deep module's pool, and
turns the light events into candidate raw turns. Following H-Mem's scopes, a
query whose scope also searches the raw kind reads the best raw turns directly
(original fragments); a Long query reads only through events.

Example:
    >>> q = Query(id="q0", text="Where does Ann live?")
    >>> light_lookup(
    ...     index,
    ...     [q],
    ...     vectors,
    ...     level1_k=10,
    ...     coarse_n=30,
    ...     weights=weights(ctx),
    ...     now=None,
    ...     scope_kinds={"Mixed": ["summary", "turn"]},
    ...     raw_per_query=75,
    ...     superseded=0.8,
    ...     level1_rank="fused",
    ...     window_k=3,
    ... )  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from memstrata.memory.entity_graph.expansion import GraphSearch
from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels.level1.persona import PERSONA
from memstrata.memory.levels.level1.summary import SUMMARY
from memstrata.memory.levels.level1.theme import THEME
from memstrata.memory.levels.level1.tree_node import TREE_NODE
from memstrata.memory.query import Hit, Query
from memstrata.memory.search.fusion import RRF_K, Weights
from memstrata.memory.search.persona import PERSONA_FOUND_BY, PersonaMatch, persona_match, ranked_persona
from memstrata.memory.search.scoring import (
    event_hit,
    graph_ancestors,
    graph_events,
    graph_hits,
    query_graph,
    query_key,
    score_query,
    theme_hits,
    turn_hits,
)
from memstrata.memory.search.themes import ThemeSearch, ThemeTrace, theme_reach
from memstrata.memory.tree.search import WINDOW_FOUND_BY, node_window, tag_hits, window_rows


@dataclass
class LightResult:
    """What the light lookup found: ``level1`` (top-k events), ``coarse`` (top-N events), candidate ``turns``."""

    level1: list[Hit] = field(default_factory=list)
    coarse: list[Hit] = field(default_factory=list)
    turns: list[Hit] = field(default_factory=list)
    kinds: dict[str, int] = field(default_factory=dict)  # hits per kind that found them, for the trace
    graph_events: dict[str, bool] = field(default_factory=dict)  # events the entity seeds reached: newly coarse?
    themes: dict[str, ThemeTrace] = field(default_factory=dict)  # per query: what the theme path did
    persona: dict[str, PersonaMatch] = field(default_factory=dict)  # per query: the persona dimension it takes

    def scenes(self) -> list[list[str]]:
        """``[conversation_id, theme id]`` of every theme the theme path picked, query by query, each once."""
        return [list(k) for k in dict.fromkeys(tuple(k) for how in self.themes.values() for k in how.scenes or [])]


def light_lookup(
    index: MemoryIndex,
    queries: Sequence[Query],
    vectors: np.ndarray,
    *,
    level1_k: int | Mapping[str, int],
    coarse_n: int,
    weights: Weights,
    now: datetime | None,
    scope_kinds: Mapping[str, Sequence[str]],
    raw_per_query: int,
    superseded: float,
    level1_rank: str,
    window_k: int,
    graph: GraphSearch | None = None,
    themes: ThemeSearch | None = None,
    persona: float | None = None,
) -> LightResult:
    """Top-k events of each kind per query, the coarse top-``coarse_n``, and their turns (plus direct raw turns).

    ``level1_k`` is k for every kind, or k per kind (a kind not named gets none). ``raw_per_query`` is
    how many turns each query brings at least: the best raw turns for scopes that search them
    directly, else the turns of further events beyond the top k. With ``graph``, the facts reached
    through the entity graph bring their turns too (``found_by="entity_graph"``), and the event summaries
    holding those turns join the coarse pool (:func:`~memstrata.memory.search.scoring.graph_events`), and with
    ``graph.tree_walk``, for a query whose scope searches the tree nodes, the week, month and year nodes above them
    (:func:`~memstrata.memory.search.scoring.graph_ancestors`). ``retrieval.level1_rank``
    orders the summaries (see :func:`rerank_summaries`). A query whose time hint selects tree windows also
    brings its ``window_k`` best turns inside them, whatever its scope (``found_by="tree_window"``). With
    ``themes``, a query whose scope searches the theme kind takes the theme path: the facts it admits bring their
    turns (``found_by="theme"``, ``"spread"`` or, with Bi-Mem's Eq. 9, ``"associative"``, see
    :mod:`~memstrata.memory.search.themes`); themes are never ranked as Level-1 events themselves. With
    ``persona`` (a similarity), a query that asks to infer something about a named speaker takes that speaker's
    nearest persona dimension: its items' turns join the candidates (``found_by="persona"``, see
    :mod:`~memstrata.memory.search.persona`). When the theme path runs Eq. 9 (``joint_k``), the dimension is
    instead the best one Eq. 9 ranked among its top k, or none.
    """
    level1: dict[str, Hit] = {}
    coarse: dict[str, Hit] = {}
    out = LightResult()
    for query, qvec in zip(queries, vectors, strict=True):
        searched = scope_kinds.get(query.scope, ())
        kinds = [k for k in searched if k in index.events and k != THEME.kind]  # themes: through the theme path
        by_themes = themes if THEME.kind in searched else None
        reads_raw = index.turns_kind in scope_kinds.get(query.scope, ())
        ks = {k: level1_k if isinstance(level1_k, int) else level1_k.get(k, 0) for k in kinds}
        deep = {
            k: len(index.events[k]) if k == SUMMARY.kind and level1_rank != "own" else max(coarse_n, ks[k])
            for k in kinds
        }
        ranked, parts = score_query(
            index,
            query,
            qvec,
            event_kinds=kinds,
            top_events=ks,
            weights=weights,
            now=now,
            graph=graph,
            superseded=superseded,
            depth=deep,
            themes=by_themes,
        )
        ranked = rerank_summaries(index, ranked, parts["score"], level1_rank)
        found: list[Hit] = []
        seen: dict[str, int] = {}
        for kind, row, score in ranked:
            rank = seen[kind] = seen.get(kind, -1) + 1
            if rank >= max(coarse_n, ks[kind]):
                continue
            hit = event_hit(index, kind, row, score * query.weight, query)
            coarse.setdefault(hit.key, hit)
            if rank < ks[kind]:
                level1.setdefault(hit.key, hit)
            elif reads_raw or len(found) >= raw_per_query:
                continue  # beyond the top k, events bring turns only to fill a scope that reads no raw turns
            found += turn_hits(
                index,
                index.events[kind].turn_rows[row],
                parts,
                level="level1",
                found_by=kind,
                query=query,
                window=node_window(index.events[kind].units[row]),
            )
        reached = query_graph(index, query, graph, superseded=superseded)
        found += graph_hits(index, query, reached, parts)  # before the theme path's: a tie keeps the entity path
        through_themes, how = theme_reach(index, query, None, by_themes, key=query_key(query, superseded))
        found += theme_hits(index, query, through_themes, parts)
        if how.themes is not None:
            out.themes[query.id] = how
        match = None
        if persona is not None and by_themes is not None and by_themes.joint_k > 0:  # Eq. 9 picked it, or none
            match = ranked_persona(index, qvec, *how.persona) if how.persona is not None else None
        elif persona is not None:
            match = persona_match(index, query, qvec, similarity=persona)
        if match is not None:  # the dimension's items bring their turns; the answer opens with the dimension
            out.persona[query.id] = match
            found += turn_hits(
                index,
                index.events[PERSONA.kind].turn_rows[match.row],
                parts,
                level="level1",
                found_by=PERSONA_FOUND_BY,
                query=query,
                via=match.unit_id,
            )
        tree_events = graph_events(index, query, reached, ranked)  # entity seeds -> fragments -> tree events
        if graph is not None and graph.tree_walk and TREE_NODE.kind in kinds:
            tree_events += graph_ancestors(index, query, tree_events, ranked)  # and up the tree from them
        for hit in tree_events:
            out.graph_events[hit.key] = coarse.setdefault(hit.key, hit) is hit
        if reads_raw and len(parts["score"]):
            found += turn_hits(
                index,
                np.argsort(-parts["score"])[:raw_per_query],
                parts,
                level="level2",
                found_by=index.turns_kind,
                query=query,
            )
        found += turn_hits(
            index,
            window_rows(index, query.hint, parts["score"], window_k),
            parts,
            level="level2",
            found_by=WINDOW_FOUND_BY,
            query=query,
        )
        waiting = pending_rows(index)
        if len(waiting) and len(parts["score"]):  # no summary stands for them yet: they are read raw
            best = waiting[np.argsort(-parts["score"][waiting])[:raw_per_query]]
            found += turn_hits(index, best, parts, level="level2", found_by=PENDING_FOUND_BY, query=query)
        out.turns += tag_hits(index, query, found)  # the scope and tree window that led to each turn
    out.level1 = list(level1.values())
    out.coarse = sorted(coarse.values(), key=lambda h: -h.score)
    for hit in out.turns:
        out.kinds[hit.found_by] = out.kinds.get(hit.found_by, 0) + 1
    return out


PENDING_FOUND_BY = "open_tail"  # ``Hit.found_by`` of turns waiting raw in an open tail (:func:`pending_rows`)


def pending_rows(index: MemoryIndex) -> np.ndarray:
    """Rows of the turns appended after a session's open episode: no summary stands for them until the tail
    closes or fills (:func:`memstrata.memory.store.reads.appended_to_open_tail`), so every query weighs them as raw
    turns. They follow the turns of an open summary in its session; a snapshot without that summary (the bounded
    path's candidates) finds them only as raw turns.
    """
    held = index.memo.get("pending_rows")
    if held is None:
        summaries = index.events.get(SUMMARY.kind)
        rows: list[int] = []
        for unit, linked in zip(
            summaries.units if summaries else [], summaries.turn_rows if summaries else [], strict=True
        ):
            if not getattr(unit, "open", False) or not len(linked):
                continue
            last = index.turns[max(linked, key=lambda r: index.turns[r].position)]
            position = last.position + 1
            while (row := index.by_position.get((last.conversation_id, last.session_id, position))) is not None:
                rows.append(row)
                position += 1
        held = np.asarray(rows, dtype=int)
        index.remember("pending_rows", held)  # dropped with the memo whenever the snapshot changes
    return held


LEVEL1_RANKS = ("own", "turns", "fused")


def rerank_summaries(
    index: MemoryIndex, ranked: list[tuple[str, int, float]], turn_scores: np.ndarray, how: str
) -> list[tuple[str, int, float]]:
    """The Level-1 summaries in ``ranked`` reordered among their own slots; other kinds stay where they are.

    * ``own``: by the summary's own text match (HyMem ranks summaries so);
    * ``turns``: by the best fused score among the raw turns the summary links to (bottom-up: a
      summary is as relevant as the best turn it stands for);
    * ``fused``: reciprocal-rank fusion of the two, so a summary whose own words match and one whose
      turns match both reach the top k.

    Offline summaries are extractive and miss much of what their turns say; the turns' evidence
    lets the light module show the summaries of the episodes the turn search found.
    """
    if how not in LEVEL1_RANKS:
        msg = f"level1_rank must be one of {LEVEL1_RANKS}, not {how!r}"
        raise ValueError(msg)
    slots = [i for i, (kind, _, _) in enumerate(ranked) if kind == SUMMARY.kind]
    if how == "own" or len(slots) < 2:
        return ranked
    own = [ranked[i] for i in slots]
    links = index.events[SUMMARY.kind].turn_rows
    best = np.array([turn_scores[links[row]].max() if len(links[row]) else -np.inf for _, row, _ in own])
    by_turns = np.argsort(-best, kind="stable")
    if how == "turns":
        order = by_turns
    else:
        turn_rank = np.empty(len(own))
        turn_rank[by_turns] = np.arange(len(own))
        fused = 1 / (RRF_K + np.arange(len(own))) + 1 / (RRF_K + turn_rank)
        order = np.argsort(-fused, kind="stable")
    out = list(ranked)
    for slot, i in zip(slots, order, strict=True):
        out[slot] = own[i]
    return out
