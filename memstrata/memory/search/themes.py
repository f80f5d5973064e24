"""Retrieval through the themes: xMemory's Stage I and II and Bi-Mem's associative spreading (pure code).

For one query (all on the search snapshot, memoized per query text):

1. **Theme candidates**: the ``themes`` best-matching themes (dense over their centroid, BM25 over their
   text). With spreading on, the themes of the ``facts`` best-matching facts are evoked (Bi-Mem's fact -> scene
   spreading, its Algorithm 2 lines 6-8): they join the picked themes below by association, whatever their own
   match. With ``joint_k``, both lists come instead from Bi-Mem's Eq. 9
   (:mod:`~memstrata.memory.search.associative`): the k best facts, themes and persona dimensions ranked
   together; its facts are admitted themselves (``found_by="associative"``) and evoke their themes, and its best
   persona dimension is left in the trace for the persona path.
2. **Stage I** (xMemory Eq. 4, :func:`~memstrata.memory.themes.select.representatives`): representative themes
   among all the candidates (the best-matching ones and those facts evoked) on the high-level kNN graph
   (:func:`knn_weights`: each theme's ``knn`` most similar themes of its conversation, as ingestion stores them),
   then, over the facts those themes induce, representative facts on the facts' kNN graph. With ``select="top"``
   both steps keep the best-matching ones instead (the ablation without Eq. 4), and the evoked themes join them
   by association.
   A selected theme induces all its facts, or with spreading its ``spread`` facts: those that best match the
   query (``fact_order="query"``), or those nearest the scene's centroid (``"scene"``, Bi-Mem's Eq. 10, with the
   paper's m).
3. **Stage II** (offline proxy, :func:`~memstrata.memory.themes.select.admit_by_coverage`): the coarse context
   is the picked themes' lines (:func:`~memstrata.memory.search.scenes.scene_lines`, whether or not the reader is
   shown them); the chosen facts, grouped by the episode they come from, are admitted episode by episode in
   order of support (the summed match of their facts) while they say query words neither the coarse context nor
   an episode admitted before said; after ``patience`` episodes that say nothing new it stops. Without a model
   there is no reader whose uncertainty could be measured, so the proxy is the query's words left unsaid; a
   trace names it so. With a model the path leaves Stage II out and the lookup node asks the reader instead
   (:mod:`memstrata.nodes.retrieve.stage2`, over the episodes :func:`episode_rounds` groups). Expanding an
   admitted episode to its other turns (:func:`episode_rest`) is the node's, with a model and offline.

The admitted facts' raw turns become candidates (``found_by="theme"``, or ``"spread"`` when the theme was
evoked by a fact), and lend the turns a prior like the entity graph's (:func:`theme_prior_rows`).

Which stages run by default is the bench's call (BENCHMARKS.md, "Themes: what the theme path gives"): offline on
LoCoMo, Eq. 4 and the Stage II proxy each gave nothing over the best-matching themes and facts, and placing the
admitted turns first cost recall at small budgets, so ``Context`` defaults to the best-matching themes with
spreading, as a prior and candidates; Eq. 4 and Stage II stay one setting away.

Example:
    >>> reach, trace = theme_reach(index, query, events, theme_search(ctx))  # doctest: +SKIP
    >>> [(r.fact_row, r.found_by, r.via) for r in reach][:1]  # doctest: +SKIP
    [(41, 'theme', 'theme:3 -> fact:s4:0-5:2')]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from memstrata.memory.index import MemoryIndex, tokenize
from memstrata.memory.levels.level1.fact import FACT, Fact
from memstrata.memory.levels.level1.persona import PERSONA
from memstrata.memory.levels.level1.summary import SUMMARY
from memstrata.memory.levels.level1.theme import THEME, Theme
from memstrata.memory.levels.level2.episode import summary_id
from memstrata.memory.query import Hit, Query
from memstrata.memory.search.scenes import scene_lines
from memstrata.memory.themes.graph import nearest_rows
from memstrata.memory.themes.partition import unit_rows
from memstrata.memory.themes.select import admit_by_coverage, representatives, unsaid
from memstrata.memory.timeparse import format_date

SELECTIONS = ("eq4", "top")
FACT_ORDERS = ("query", "scene")
"""How a picked theme's m facts are chosen: best match to the query, or (Bi-Mem's Eq. 10) nearest its scene."""
THEME_FOUND_BY, SPREAD_FOUND_BY, ASSOCIATIVE_FOUND_BY = "theme", "spread", "associative"
THEME_FINDERS = (THEME_FOUND_BY, SPREAD_FOUND_BY, ASSOCIATIVE_FOUND_BY)


@dataclass(frozen=True)
class ThemeSearch:
    """One query's theme path settings, built from ``Context``'s theme retrieval section only
    (:func:`memstrata.runtime.search.theme_search`; ``None`` there when ``themes.search_k`` is 0).
    """

    themes: int
    facts: int
    select: str
    alpha: float
    coverage: float
    theme_budget: int
    fact_budget: int
    spread: int
    stage2: bool
    patience: int
    knn: int
    fact_order: str = "query"
    joint_k: int = 0
    """With k > 0, candidates come from Bi-Mem's Eq. 9 (:func:`~memstrata.memory.search.associative.joint_top`):
    the k best facts, themes and persona dimensions together; else themes and seed facts are ranked apart."""

    def __post_init__(self) -> None:
        if self.fact_order not in FACT_ORDERS:
            msg = f"theme_fact_order must be one of {FACT_ORDERS}, not {self.fact_order!r}"
            raise ValueError(msg)
        if self.select not in SELECTIONS:
            msg = f"theme_select must be one of {SELECTIONS}, not {self.select!r}"
            raise ValueError(msg)
        if not (0 < self.coverage <= 1 and 0 <= self.alpha <= 1 and self.patience >= 1):
            msg = (
                f"theme_coverage must be in (0, 1], theme_alpha in [0, 1] and theme_patience at least 1; got "
                f"{self.coverage}, {self.alpha}, {self.patience}"
            )
            raise ValueError(msg)


@dataclass(frozen=True)
class ThemeReach:
    """A fact the theme path admitted: its row, support, the path that found it and how."""

    fact_row: int
    support: float
    via: str
    found_by: str


@dataclass
class ThemeTrace:
    """What the theme path did for one query, for the trace."""

    candidates: int = 0
    evoked: int = 0
    themes: list[str] | None = None
    facts: int = 0
    episodes_offered: int = 0
    episodes_admitted: int = 0
    uncertainty_left: float | None = None
    coarse_uncertainty: float | None = None  # Stage II's start: the proxy on the picked themes' lines alone
    uncertainty_measure: str | None = None  # what Stage II measured (offline: the proxy, named as such)
    persona: tuple[int, int] | None = None  # Eq. 9: the best persona dimension's (row, rank) in the joint top-k
    scenes: list[list[str]] | None = None  # [conversation_id, theme id] of the picked themes, best first


def theme_reach(
    index: MemoryIndex,
    query: Query,
    events: dict[str, np.ndarray] | None,
    search: ThemeSearch | None,
    *,
    key: str,
    joint: Callable[[], Sequence[tuple[str, int, float]]] = list,
) -> tuple[list[ThemeReach], ThemeTrace]:
    """The facts the theme path admits for ``query``, memoized on the snapshot under the caller's ``key`` (the
    one its event scores are memoized under: query text, dense text, validity factor). With ``search.joint_k``,
    ``joint()`` gives Eq. 9's top-k (:func:`~memstrata.memory.search.associative.joint_top`) the candidates come
    from; it is called only when the reach is not memoized.
    """
    themes, facts = index.events.get(THEME.kind), index.events.get(FACT.kind)
    if search is None or search.themes <= 0 or themes is None or facts is None or not len(themes):
        return [], ThemeTrace()
    key = f"themes\x1f{key}\x1f{search}"
    if key not in index.memo:
        if events is None or THEME.kind not in events or FACT.kind not in events:
            return [], ThemeTrace()
        index.remember(key, _reach(index, query, events[THEME.kind], events[FACT.kind], search, joint()))
    return index.memo[key]


def _reach(
    index: MemoryIndex,
    query: Query,
    theme_scores: np.ndarray,
    fact_scores: np.ndarray,
    s: ThemeSearch,
    joint: Sequence[tuple[str, int, float]],
) -> tuple[list[ThemeReach], ThemeTrace]:
    themes, facts = index.events[THEME.kind], index.events[FACT.kind]
    members = theme_members(index)
    owner = {f: t for t, rows in enumerate(members) for f in rows}
    trace = ThemeTrace()
    if s.joint_k > 0:  # Bi-Mem's Eq. 9: one ranking of the three levels
        cand = [row for kind, row, _ in joint if kind == THEME.kind]
        seeds = [row for kind, row, _ in joint if kind == FACT.kind]
        trace.persona = next(((row, rank) for rank, (kind, row, _) in enumerate(joint) if kind == PERSONA.kind), None)
    else:
        cand, seeds = [int(t) for t in _top(theme_scores, s.themes)], _top(fact_scores, s.facts)
    direct = seeds if s.joint_k > 0 else []  # Eq. 9's facts are retrieved themselves, not only seeds
    evoked: set[int] = set()
    if s.spread > 0:
        for f in seeds:
            t = owner.get(int(f))
            if t is not None and t not in cand:
                cand.append(t)
                evoked.add(t)
    trace.candidates, trace.evoked = len(cand), len(evoked)
    if not cand and not direct:
        return [], trace
    if s.select == "eq4":  # xMemory: every candidate theme, its own match's or a fact's, goes through Eq. 4
        picked = [cand[i] for i in _select(index, THEME.kind, cand, theme_scores[cand], s, s.theme_budget)]
    else:  # the best-matching themes, and the ones facts evoke join by association (Bi-Mem's spreading)
        own = [t for t in cand if t not in evoked]
        picked = [own[i] for i in _select(index, THEME.kind, own, theme_scores[own], s, s.theme_budget)] if own else []
        picked += [t for t in cand if t in evoked]
    trace.themes = [themes.units[t].id for t in picked]
    trace.scenes = [[themes.units[t].conversation_id, themes.units[t].id] for t in picked]
    induced: list[int] = []
    came_from: dict[int, int | None] = {f: owner.get(f) for f in direct}
    for t in picked:
        rows = _members_in_order(members[t], fact_scores, facts.vecs, themes.vecs[t], s.fact_order)
        for f in rows[: s.spread] if s.spread > 0 else rows:
            if f not in came_from:
                came_from[f] = t
                induced.append(f)
    if not induced and not direct:
        return [], trace
    chosen = [induced[i] for i in _select(index, FACT.kind, induced, fact_scores[induced], s, s.fact_budget)]
    chosen_f = [*direct, *chosen] if induced else list(direct)
    trace.facts = len(chosen_f)
    support = {f: float(fact_scores[f] + _score_of(theme_scores, came_from[f])) for f in chosen_f}
    if s.stage2:
        chosen_f = _stage2(index, query, chosen_f, support, s, trace)
    return [
        _reached(f, support[f], came_from[f], f in direct, evoked, themes.units, facts.units) for f in chosen_f
    ], trace


def _score_of(theme_scores: np.ndarray, theme: int | None) -> float:
    return 0.0 if theme is None else float(theme_scores[theme])


def _reached(
    f: int, support: float, theme: int | None, direct: bool, evoked: set[int], themes: Sequence, facts: Sequence
) -> ThemeReach:
    """One admitted fact: found by Eq. 9 itself (``associative``), through a theme picked on its own match
    (``theme``), or through a theme a fact evoked (``spread``).
    """
    if direct:
        return ThemeReach(f, support, f"Eq. 9 -> {facts[f].id}", ASSOCIATIVE_FOUND_BY)
    assert theme is not None  # an induced fact came from the theme that offered it
    found_by = SPREAD_FOUND_BY if theme in evoked else THEME_FOUND_BY
    return ThemeReach(f, support, f"{themes[theme].id} -> {facts[f].id}", found_by)


def _members_in_order(
    rows: Sequence[int], fact_scores: np.ndarray, fact_vecs: np.ndarray, scene: np.ndarray, order: str
) -> list[int]:
    """A theme's fact rows, best first: by their match to the query, or by their cosine to the scene's centroid
    (Bi-Mem's Eq. 10: the scene's m most similar facts).
    """
    if order == "scene" and len(rows):
        near = fact_vecs[list(rows)] @ scene
        return [r for _, r in sorted(zip(-near, rows, strict=True))]
    return sorted(rows, key=lambda f: (-fact_scores[f], f))


def _top(scores: np.ndarray, n: int) -> list[int]:
    """The ``n`` best rows, best first (ties by row)."""
    if n <= 0 or not len(scores):
        return []
    neg = -np.asarray(scores, dtype=float)
    rows = np.arange(len(neg)) if n >= len(neg) else np.flatnonzero(neg <= np.partition(neg, n - 1)[n - 1])
    return [int(i) for i in rows[np.lexsort((rows, neg[rows]))][:n]]  # by score, then by row


def _select(
    index: MemoryIndex, kind: str, rows: list[int], relevance: np.ndarray, s: ThemeSearch, budget: int
) -> list[int]:
    """Positions chosen among candidate ``rows`` of ``kind`` given best first: Eq. 4 on the kNN graph, or the best
    ``budget`` by relevance.
    """
    order = sorted(range(len(relevance)), key=lambda i: (-relevance[i], i))
    if s.select == "top":
        return order[:budget]
    ranked = [rows[i] for i in order]
    weights = knn_weights(index, kind, ranked, s.knn)
    return [
        order[i]
        for i in representatives(relevance[order], weights, k=s.knn, alpha=s.alpha, coverage=s.coverage, budget=budget)
    ]


def knn_weights(index: MemoryIndex, kind: str, rows: Sequence[int], k: int) -> np.ndarray:
    """The kNN graph of xMemory among the candidate ``rows``: ``w[i, j]`` is the cosine of the two units when ``j`` is
    one of ``i``'s ``k`` most similar units of its whole conversation (the graph ingestion keeps in the edge
    store, with the same k), else 0.

    Computed from the snapshot's vectors for the candidates only (one candidate against its conversation's
    units), not read from the edge store. Among a handful of candidates most pairs are therefore not linked:
    a candidate covers only those that are among its nearest in the conversation.
    """
    table = index.events[kind]
    at = {r: i for i, r in enumerate(rows)}
    w = np.zeros((len(rows), len(rows)))
    by_conv: dict[str, list[int]] = {}
    for r in rows:
        by_conv.setdefault(table.units[r].conversation_id, []).append(r)
    for conv, cands in by_conv.items():
        pool, unit = _conversation_rows(index, kind, conv)
        own = np.searchsorted(pool, cands)  # each candidate's position among its conversation's units
        sims = unit[own] @ unit.T  # the candidates against their conversation's units
        sims[np.arange(len(cands)), own] = -np.inf  # a unit is not its own neighbour
        for r, row, near in zip(cands, sims, nearest_rows(sims, k), strict=True):
            for j in near:
                if (col := at.get(int(pool[j]))) is not None and row[j] > 0:
                    w[at[r], col] = row[j]
    np.fill_diagonal(w, 1.0)
    return w


def _conversation_rows(index: MemoryIndex, kind: str, conversation_id: str) -> tuple[np.ndarray, np.ndarray]:
    """The snapshot rows of ``kind`` one conversation holds (ascending) and their vectors scaled to length 1,
    memoized on the snapshot.
    """
    key = f"conversation_rows\x1f{kind}\x1f{conversation_id}"
    if key not in index.memo:
        table = index.events[kind]
        pool = np.asarray([r for r, u in enumerate(table.units) if u.conversation_id == conversation_id], dtype=np.intp)
        index.remember(key, (pool, unit_rows(table.vecs[pool])))
    return index.memo[key]


def _stage2(
    index: MemoryIndex,
    query: Query,
    chosen: Sequence[int],
    support: dict[int, float],
    s: ThemeSearch,
    trace: ThemeTrace,
) -> list[int]:
    """The chosen facts of the episodes admitted by the coverage proxy, episode by episode in support order,
    from the coarse context of the picked themes' lines.
    """
    units = index.events[FACT.kind].units_as(Fact)
    groups: dict[str, list[int]] = {}
    for f in chosen:
        groups.setdefault(units[f].episode_id, []).append(f)
    order = sorted(groups, key=lambda e: (-sum(support[f] for f in groups[e]), e))
    words = set(tokenize([query.text])[0])
    if not words:  # nothing to lower: Stage II cannot judge, so it admits what Stage I chose
        trace.uncertainty_measure = "none: the query has no content words"
        return list(chosen)
    coarse = _terms([line.line() for line in scene_lines(index, trace.scenes or [])])
    terms = [_terms(_episode_texts(index, groups[e])) for e in order]
    admitted, left = admit_by_coverage(words, terms, patience=s.patience, said=coarse)
    trace.episodes_offered, trace.episodes_admitted, trace.uncertainty_left = len(order), len(admitted), left
    trace.coarse_uncertainty = round(unsaid(words, coarse), 3)
    trace.uncertainty_measure = (
        "offline proxy: share of the query's words the themes and admitted episodes leave unsaid"
    )
    return [f for i in admitted for f in groups[order[i]]]


def _terms(texts: Sequence[str]) -> set[str]:
    return set(tokenize([" ".join(texts)])[0])


def _episode_texts(index: MemoryIndex, rows: Sequence[int]) -> list[str]:
    """What an offered episode says: its chosen facts' texts and their raw turns'."""
    facts = index.events[FACT.kind]
    units = facts.units_as(Fact)
    return [*(units[f].text for f in rows), *(index.turns[r].text for f in rows for r in facts.turn_rows[f])]


def episode_rounds(index: MemoryIndex, hits: Sequence[Hit]) -> list[tuple[str, list[Hit]]]:
    """Stage II's offers with a model: the theme path's turn hits grouped by the episode of the fact that brought
    each (named in its ``via``; an episode id is its conversation's, so the conversation is part of the group), the
    episodes in order of support (their hits' summed score), ties by id.
    """
    facts = index.events.get(FACT.kind)
    groups: dict[tuple[str, str], list[Hit]] = {}
    for hit in hits:
        if hit.found_by not in THEME_FINDERS or facts is None:
            continue
        row = facts.by_key.get((hit.conversation_id, hit.via.rsplit(" -> ", 1)[-1]))
        if row is not None:
            groups.setdefault((facts.units_as(Fact)[row].episode_id, hit.conversation_id), []).append(hit)
    ranked = sorted(groups.items(), key=lambda kv: (-sum(h.score for h in kv[1]), kv[0]))
    return [(episode, group) for (episode, _), group in ranked]


def episode_turn_rows(index: MemoryIndex, conversation_id: str, episode_id: str) -> list[int]:
    """The rows of an episode's turns, in order: its Level-1 summary's (a summary links exactly its episode's turns;
    the snapshot holds no episodes, which are read by id and never searched). Empty when the snapshot holds no
    summary of it.
    """
    summaries = index.events.get(SUMMARY.kind)
    row = None if summaries is None else summaries.by_key.get((conversation_id, summary_id(episode_id)))
    return [] if summaries is None or row is None else list(summaries.turn_rows[row])


def episode_rest(index: MemoryIndex, episode_id: str, hits: Sequence[Hit]) -> list[Hit]:
    """Stage II's expansion of an admitted episode: its turns that ``hits`` (its theme turns) do not hold, in order,
    as hits like its best one (same query, path and level) via the episode, each at the lowest score among
    ``hits``: an expanded turn joins its episode, it was not ranked itself.
    """
    best = max(hits, key=lambda h: h.score)
    held, floor = {h.unit_id for h in hits}, min(h.score for h in hits)
    rest = []
    for row in episode_turn_rows(index, best.conversation_id, episode_id):
        t = index.turns[row]
        if t.id not in held:
            rest.append(
                best.with_(
                    unit_id=t.id,
                    turn_ids=[t.id],
                    score=floor,
                    parts={},
                    text=t.text,
                    time=format_date(t.timestamp) or t.timestamp_raw,
                    session_id=t.session_id,
                    position=t.position,
                    speaker=t.speaker,
                    image_caption=t.image_caption,
                    via=f"{best.via} -> {episode_id}",
                    span=None,
                )
            )
    return rest


def theme_members(index: MemoryIndex) -> list[list[int]]:
    """Per theme row, the fact rows of its members (members the snapshot does not hold are skipped)."""
    key = "theme_members"
    if key not in index.memo:
        themes, facts = index.events[THEME.kind], index.events[FACT.kind]
        index.remember(
            key,
            [
                [facts.by_key[(t.conversation_id, f)] for f in t.fact_ids if (t.conversation_id, f) in facts.by_key]
                for t in themes.units_as(Theme)
            ],
        )
    return index.memo[key]


def theme_prior_rows(index: MemoryIndex, reached: Sequence[ThemeReach]) -> list[tuple[list[int], float]]:
    """(turn rows, support) of each admitted fact, for :func:`~memstrata.memory.search.fusion.link_prior`."""
    facts = index.events[FACT.kind]
    return [(facts.turn_rows[r.fact_row], r.support) for r in reached]
