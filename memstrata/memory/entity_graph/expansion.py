"""Retrieval through H-Mem's entity graph (§3.3): seeds named in the query, hops over relations, facts reached.

1. **Seeds**: entities whose name or an alias appears in the query (whole words,
   any case; a name of five letters or more also matches a typo of it, by
   ``rapidfuzz``), and, with ``vector_seeds``, the entities whose vector (the mean
   of their facts') is nearest the query's, above ``seed_floor``.
2. **Expansion**: up to ``hops`` hops over the relation edges of the edge store
   (``networkx``), each hop keeping ``decay`` x the edge's weight; overlap edges
   (nickname-like variants) weigh half. Every reached entity keeps its best
   weight and the path that gave it.
3. **Facts**: every fact that names a reached entity scores its own semantic
   match to the query times its entity's weight; the best ``top`` are returned
   with their path, and reach their raw turns.
4. **Profiles** (H-Mem's entity profiles, Table 5), with ``profile`` k > 0: up to
   k facts of each seed's profile come first among those ``top`` (see
   :func:`profile_facts`).

Example:
    >>> view = GraphView.build(entities, facts, edges)  # doctest: +SKIP
    >>> reach = expand(view, view.seeds("What does Max eat?"), hops=2, decay=0.5)  # doctest: +SKIP
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
from rapidfuzz import fuzz, process

from memstrata.memory.levels import Entity, Fact
from memstrata.memory.store.edges import Edge

if TYPE_CHECKING:
    import networkx as nx

Node = tuple[str, str]  # (conversation_id, entity id)
_TITLE = re.compile(r"^(?:mr|ms|mrs|dr|prof) ")
TYPO_RATIO = 90
"""The rapidfuzz ratio at which a query word of 5+ letters names a one-word alias (a typo of it)."""


@dataclass
class Reach:
    """How an entity was reached: its weight and the path from a seed (names and labels)."""

    weight: float
    path: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The path from the seed as one line."""
        return " ".join(self.path)


@dataclass(frozen=True)
class GraphSearch:
    """What one query's expansion uses: the view, and the settings from the run context."""

    view: GraphView
    hops: int = 2
    decay: float = 0.5
    top: int = 30
    vector_seeds: int = 0  # entities nearest the query's vector that also seed (H-Mem §3.3 step 2); 0: names only
    seed_floor: float = 0.35  # the least cosine of such a seed
    profile: int = 0  # facts of each seed's profile put first among the ``top`` (H-Mem Table 5); 0: unused
    tree_walk: bool = False  # the reached leaves' week, month and year nodes join the coarse pool (§3.3 step 2)


@dataclass
class GraphPart:
    """One conversation's entities: their relation graph, names, lookup keys, facts and profiles.

    Entities of two conversations are never linked, so each conversation's part stands alone; ``rows``
    holds the fact rows of the nodes a search has reached (see :meth:`GraphView.fact_rows`); ``profiles``
    each entity's profile, its attribute and its event fact ids.
    """

    graph: nx.MultiGraph
    names: dict[Node, str]
    aliases: list[tuple[str, Node]]
    fact_ids: dict[Node, list[str]]
    rows: dict[Node, np.ndarray] = field(default_factory=dict, repr=False)
    profiles: dict[Node, tuple[list[str], list[str]]] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, entities: Sequence[Entity], edges: Sequence[Edge]) -> GraphPart:
        """From one conversation's entities and its entity edges."""
        import networkx as nx  # loaded by the first search that builds a graph, not by importing the graphs

        part = cls(nx.MultiGraph(), {}, [], {})
        for e in entities:
            node = (e.conversation_id, e.id)
            part.graph.add_node(node)
            part.names[node] = e.name
            part.fact_ids[node] = e.fact_ids
            part.profiles[node] = (e.attributes, e.events)
            part.aliases += [(k, node) for k in _alias_keys(e.name, tuple(e.aliases))]
        part.link(edges)
        return part

    @cached_property
    def alias_index(self) -> tuple[dict[str, list[Node]], dict[str, tuple[list[str], list[Node]]]]:
        """The nodes of each alias, and the one-word aliases of 5+ letters (with their nodes) by first letter,
        which a typo may match (:meth:`GraphView.seeds`); built on first use, as ``aliases`` is only set by
        :meth:`build`.
        """
        exact: dict[str, list[Node]] = {}
        fuzzy: dict[str, tuple[list[str], list[Node]]] = {}
        for alias, node in self.aliases:
            exact.setdefault(alias, []).append(node)
            if len(alias) >= 5 and " " not in alias:
                letter = fuzzy.setdefault(alias[0], ([], []))
                letter[0].append(alias)
                letter[1].append(node)
        return exact, fuzzy

    def link(self, edges: Sequence[Edge]) -> None:
        """Add the relation edges between two of the part's entities (others are left out)."""
        for e in edges:
            src, dst = (e.conversation_id, e.src), (e.conversation_id, e.dst)
            if src in self.names and dst in self.names:
                self.graph.add_edge(src, dst, key=e.rel, rel=e.rel, weight=e.weight)


@dataclass
class GraphView:
    """The user's entity graph as traversal needs it, one :class:`GraphPart` per conversation.

    Each entity lists its facts (``fact_ids``, written with the facts that name it); :meth:`fact_rows`
    turns them into snapshot rows only for the nodes a search reaches, since most nodes are never
    reached. After a write, :meth:`replace` gives a new view that redoes only the written conversation's
    part and shares the others, so a query still reading the old view is never disturbed.

    ``edges_of``: the view reads the relation edges of the conversations a query seeds, all in one read, when a
    search first needs them (the bounded path's view: many of the conversations it loaded hold no seed of the
    query, and on a server store one read of many conversations costs little more than a read of one).
    """

    parts: dict[str, GraphPart]
    fact_row: Mapping[tuple[str, str], int]
    edges_of: Callable[[Sequence[str]], Sequence[Edge]] | None = field(default=None, repr=False)
    _linked: set[str] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def build(
        cls,
        entities: Sequence[Entity],
        facts: Sequence[Fact],
        edges: Sequence[Edge],
        *,
        fact_row: Mapping[tuple[str, str], int] | None = None,
        edges_of: Callable[[Sequence[str]], Sequence[Edge]] | None = None,
    ) -> GraphView:
        """From the snapshot's entities and facts (facts in table row order) and the edge store's relations.

        ``fact_row`` maps ``(conversation_id, fact id)`` to the fact's row (the fact table's own index, which
        in-place updates keep current); without it, it is built from ``facts``. ``edges_of``: the edges of some
        conversations, read when a search first needs them (then ``edges`` is usually empty).
        """
        if fact_row is None:
            fact_row = {(f.conversation_id, f.id): row for row, f in enumerate(facts)}
        by_conv: dict[str, tuple[list[Entity], list[Edge]]] = {}
        for entity in entities:
            by_conv.setdefault(entity.conversation_id, ([], []))[0].append(entity)
        for edge in edges:
            by_conv.setdefault(edge.conversation_id, ([], []))[1].append(edge)
        return cls({conv: GraphPart.build(*found) for conv, found in by_conv.items()}, fact_row, edges_of)

    def replace(self, conversation_id: str, entities: Sequence[Entity], edges: Sequence[Edge]) -> GraphView:
        """A view with one conversation's part redone from its entities and edges (others may be given too).

        Valid while fact rows do not move (no fact was removed): the other parts, and the fact rows
        worked out for their nodes, are shared.
        """
        part = GraphPart.build(
            [e for e in entities if e.conversation_id == conversation_id],
            [e for e in edges if e.conversation_id == conversation_id],
        )
        return GraphView({**self.parts, conversation_id: part}, self.fact_row)

    def name(self, node: Node) -> str | None:
        """A node's name, or ``None`` when its conversation's part has none."""
        part = self.parts.get(node[0])
        return part.names.get(node) if part else None

    def known_name(self, node: Node) -> str:
        """The name of a node found by :meth:`seeds` or along an edge: a part names every node it holds."""
        name = self.name(node)
        assert name is not None, "a part names each of its nodes (entities, and edges only between them)"
        return name

    @property
    def names(self) -> dict[Node, str]:
        """Every node's name (a merged copy; :meth:`name` looks one up)."""
        return {node: name for part in self.parts.values() for node, name in part.names.items()}

    def neighbours(self, node: Node) -> Iterator[tuple[Node, dict[str, Any]]]:
        """(other node, edge data) of every relation edge at the node."""
        self.link([node[0]])
        for _, other, data in self.parts[node[0]].graph.edges(node, data=True):
            yield other, data

    def link(self, conversations: Sequence[str]) -> None:
        """With ``edges_of``: read the relation edges of those of the conversations not read yet, in one read."""
        if self.edges_of is None or self._linked.issuperset(conversations):
            return
        with self._lock:  # concurrent searches of one view read a conversation's edges once
            missing = sorted(set(conversations) - self._linked)
            if missing:
                by_conv: dict[str, list[Edge]] = {}
                for e in self.edges_of(missing):
                    by_conv.setdefault(e.conversation_id, []).append(e)
                for conv in missing:
                    if conv in self.parts:
                        self.parts[conv].link(by_conv.get(conv, []))
                self._linked.update(missing)

    def fact_rows(self, node: Node) -> np.ndarray:
        """The rows of the facts that name the entity, in row order (worked out when a search first reaches it)."""
        part = self.parts.get(node[0])
        if part is None:
            return np.zeros(0, dtype=np.intp)
        rows = part.rows.get(node)
        if rows is None:
            conv = node[0]
            rows = part.rows[node] = np.array(
                sorted(r for f in part.fact_ids.get(node, ()) if (r := self.fact_row.get((conv, f))) is not None),
                dtype=np.intp,
            )
        return rows

    def profile_rows(self, node: Node) -> tuple[list[int], list[int]]:
        """The rows of the entity's profile facts: its attributes', then its events', each in the profile's order
        (a fact the snapshot does not hold is left out).
        """
        part = self.parts.get(node[0])
        attributes, events = part.profiles.get(node, ([], [])) if part else ([], [])
        rows = [[r for f in ids if (r := self.fact_row.get((node[0], f))) is not None] for ids in (attributes, events)]
        return rows[0], rows[1]

    def seeds(self, text: str) -> list[Node]:
        """Entities the text names (an alias as whole words, or a typo of a one-word alias of 5+ letters).

        When the text names exactly one entity, "his/her/their X" also reads as "<that name>'s X"
        ("What does Melanie do with her kids?" seeds *Melanie's kids* too).
        """
        words = re.findall(r"[\w'-]+", text.casefold())
        found = self._match(words)
        owners = {self.known_name(n).casefold() for n in found}
        if len(owners) == 1:
            owner = owners.pop()
            extra = [f"{owner}'s {m.group(2)}" for m in re.finditer(r"\b(his|her|their) ([\w-]+)", text.casefold())]
            found |= self._match(words, extra)
        return sorted(found)

    def _match(self, words: list[str], extra: Sequence[str] = ()) -> set[Node]:
        """The nodes with an alias among the text's 1- to 4-word grams, or a one-word alias of 5+ letters that a
        word of 5+ letters with the same first letter matches at a rapidfuzz ratio of 90 or more.
        """
        grams = {" ".join(words[i : i + n]) for n in range(1, 5) for i in range(len(words) - n + 1)}
        grams |= {g.removesuffix("'s") for g in grams} | set(extra)
        long_words = [w for w in words if len(w) >= 5]
        found: set[Node] = set()
        for part in self.parts.values():
            exact, fuzzy = part.alias_index
            for gram in grams & exact.keys():
                found.update(exact[gram])
            for word in long_words:
                aliases, nodes = fuzzy.get(word[0], ((), ()))
                for _, _, i in process.extract_iter(word, aliases, scorer=fuzz.ratio, score_cutoff=TYPO_RATIO):
                    found.add(nodes[i])
        return found


@lru_cache(maxsize=65536)
def _alias_keys(name: str, aliases: tuple[str, ...]) -> list[str]:
    """The lookup keys of an entity's names: casefolded words, also without a title ("ms okafor" is "okafor").

    Cached: a written conversation's part is rebuilt after every write, and an entity's names rarely change.
    """
    keys = {" ".join(re.findall(r"[\w'-]+", a.casefold())) for a in [name, *aliases]}
    keys |= {_TITLE.sub("", k) for k in keys}
    return [k for k in sorted(keys) if len(k) > 1]


def graph_reach(
    search: GraphSearch, text: str, fact_scores: np.ndarray, near: Sequence[Node] = ()
) -> list[tuple[int, float, Reach]]:
    """Seeds of the text (and ``near``, the entities nearest the query's vector), expanded, and the best facts they
    reach (empty when nothing is named or near); with ``search.profile``, the seeds' profile facts first.
    """
    seeds = sorted(set(search.view.seeds(text)) | {n for n in near if search.view.name(n) is not None})
    if not seeds or search.hops < 0:
        return []
    search.view.link(sorted({conv for conv, _ in seeds}))  # the seeded conversations' edges, in one read
    reach = expand(search.view, seeds, hops=search.hops, decay=search.decay)
    ranked = reached_facts(search.view, reach, fact_scores, top=search.top)
    if search.profile <= 0:
        return ranked
    first = profile_facts(search.view, {s: reach[s] for s in seeds}, fact_scores, k=search.profile)[: search.top]
    taken = {row for row, _, _ in first}
    return first + [found for found in ranked if found[0] not in taken][: search.top - len(first)]


def profile_facts(
    view: GraphView, seeds: Mapping[Node, Reach], fact_scores: np.ndarray, *, k: int
) -> list[tuple[int, float, Reach]]:
    """H-Mem's entity profiles in retrieval: up to ``k`` profile facts of each seed, as (row, score, how).

    A seed's profile lists its attributes (persistent statements) first, then its recent events; within each,
    the best match to the query comes first (``fact_scores``, ties in the profile's order), and the first ``k``
    are taken. The seeds take turns, one fact each in seed order, so that when :func:`graph_reach` keeps fewer
    than all of them (it keeps at most ``top``), every seed has its best facts kept. Each fact scores its
    match times its seed's weight, like a reached fact, and its path names the profile:
    ``"<seed> (profile attribute)"`` or ``"<seed> (profile event)"``.

    They take slots of the graph's ``top`` rather than adding to them, so that ``graph.facts`` stays the one
    bound on what the graph brings per query, whatever the number of seeds; the plain ranking fills the rest.
    """
    scores = np.asarray(fact_scores, dtype=np.float64)
    per_seed = []
    for node, how in seeds.items():
        picked: list[tuple[int, float, Reach]] = []
        for label, rows in zip(("attribute", "event"), view.profile_rows(node), strict=True):
            order = sorted(rows, key=lambda r: -scores[r])  # stable: ties keep the profile's order
            path = Reach(how.weight, [*how.path, f"(profile {label})"])
            picked += [(r, float(scores[r]) * how.weight, path) for r in order]
        per_seed.append(picked[:k])
    out: dict[int, tuple[int, float, Reach]] = {}
    for i in range(max(map(len, per_seed), default=0)):
        for picked in per_seed:
            if i < len(picked):
                out.setdefault(picked[i][0], picked[i])
    return list(out.values())


def expand(view: GraphView, seeds: Sequence[Node], *, hops: int, decay: float) -> dict[Node, Reach]:
    """Best weight and path of every entity within ``hops`` of a seed (seeds weigh 1)."""
    reach = {s: Reach(1.0, [name]) for s in seeds if (name := view.name(s)) is not None}
    frontier = list(reach)
    for _ in range(max(hops, 0)):
        nxt = []
        for node in frontier:
            for other, data in view.neighbours(node):
                weight = reach[node].weight * decay * float(data.get("weight", 1.0))
                if other not in reach or weight > reach[other].weight:
                    reach[other] = Reach(weight, [*reach[node].path, f"-{data['rel']}-", view.known_name(other)])
                    nxt.append(other)
        frontier = nxt
    return reach


def reached_facts(
    view: GraphView, reach: dict[Node, Reach], fact_scores: np.ndarray, *, top: int
) -> list[tuple[int, float, Reach]]:
    """The best ``top`` facts naming a reached entity: (fact row, score x entity weight, how it was reached).

    A fact named by several reached entities keeps its best product (the entity reached first wins a
    tie); facts with equal scores keep the order in which they were first reached.
    """
    hows = list(reach.values())
    best = np.full(len(fact_scores), -np.inf)
    who = np.full(len(fact_scores), -1)
    first = np.full(len(fact_scores), len(fact_scores))  # order of first reach
    reached = 0
    for i, node in enumerate(reach):
        rows = view.fact_rows(node)
        if not len(rows):
            continue
        new = rows[first[rows] == len(fact_scores)]
        first[new] = reached + np.arange(len(new))
        reached += len(new)
        score = fact_scores[rows].astype(np.float64) * hows[i].weight
        better = score > best[rows]
        best[rows[better]], who[rows[better]] = score[better], i
    found = np.flatnonzero(who >= 0)
    ranked = found[np.lexsort((first[found], -best[found]))][:top]
    return [(int(row), float(best[row]), hows[who[row]]) for row in ranked]
