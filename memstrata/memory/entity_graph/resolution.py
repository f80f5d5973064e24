"""Entity linking for one conversation: names -> resolved entities, relations, overlap edges and profiles.

Following H-Mem's entity resolution (§3.2, Appendix A.2), within ONE conversation:

- **Identity** (a merge): the same name up to case, or a typo-level variant
  (``rapidfuzz`` ratio >= ``typo_ratio`` on names of five letters or more, same first
  letter), and only between compatible types (a place is never a person).
  Two different speakers are never merged, and two full names that differ in a
  token ("Anna Lee" / "Anna Park") stay apart.
- **Overlap edges** (graph repair, never identity): a nickname-like variant that
  is a prefix of a longer name ("Mel" / "Melanie") or a token of it
  ("Anna" / "Anna Lee") gets an ``overlaps`` edge both ways, for traversal only.
- **Relations**: each fact whose object names an entity gives (subject, label,
  object) with the fact's turns; possessive links ("my dog Max") give (owner,
  "dog", Max). Labels come from the fact (verb lemma offline, the model's label otherwise).
  A relation stated again merges its turns into the one edge (Appendix A.2).
- **Profiles**: ``attributes`` are facts with a persistent relation (be, have,
  like, live, work, ...), ``events`` the most recent other facts.

Example:
    >>> from memstrata.memory.levels.level1.fact import Fact
    >>> f = Fact(
    ...     user_id="u",
    ...     episode_id="ep:s1:0-1",
    ...     session_id="1",
    ...     n=0,
    ...     text="Ann's dog Max is cute.",
    ...     subject="Ann",
    ...     relation="be",
    ...     mentions=["Max"],
    ...     types={"Ann": "speaker", "Max": "pet"},
    ...     links=[["Ann", "dog", "Max"]],
    ...     turn_ids=["s1:t0"],
    ... )
    >>> linked = link_entities([f], speakers=["Ann", "Bo"])
    >>> sorted(e.id for e in linked.entities), [(r.src, r.rel, r.dst) for r in linked.relations]
    (['ent:ann', 'ent:max'], [('ent:ann', 'dog', 'ent:max')])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from rapidfuzz import fuzz

from memstrata.memory.entity_graph.settings import GraphSettings
from memstrata.memory.levels.entity import Entity, entity_id
from memstrata.memory.levels.level1.fact import Fact
from memstrata.memory.store.edges import Edge

PERSISTENT = frozenset(
    [
        "be",
        "have",
        "like",
        "love",
        "enjoy",
        "prefer",
        "hate",
        "dislike",
        "live",
        "work",
        "own",
        "want",
        "study",
        "play",
        "teach",
        "believe",
        "identify",
        "value",
        "need",
        "know",
    ]
)
PEOPLE = frozenset({"speaker", "person", "relative"})
OVERLAP = "overlaps"


@dataclass
class Linked:
    """What linking yields for one conversation."""

    entities: list[Entity] = field(default_factory=list)
    relations: list[Edge] = field(default_factory=list)  # entity -> entity, labelled, with turns
    facts: list[Fact] = field(default_factory=list)  # the facts with subject_id and entity_ids set


def compatible(a: str, b: str) -> bool:
    """Whether two entity types may denote the same thing ("name" is unknown and fits anything)."""
    if a == "speaker" and b == "speaker":
        return False
    if "name" in (a, b) or a == b or {a, b} == {"organization", "place"}:  # "at Tidewater Labs" is both
        return True
    return a in PEOPLE and b in PEOPLE


def same_entity(a: str, b: str, *, typo_ratio: float = GraphSettings.typo_ratio) -> bool:
    """Identity between two names: equal up to case, or a typo of each other (never differing full names)."""
    x, y = a.casefold().strip(), b.casefold().strip()
    if x == y:
        return True
    if len(x.split()) != len(y.split()) or min(len(x), len(y)) < 5 or x[0] != y[0]:
        return False
    if len(x.split()) > 1 and any(
        p != q and fuzz.ratio(p, q) < typo_ratio for p, q in zip(x.split(), y.split(), strict=True)
    ):
        return False
    return fuzz.ratio(x, y) >= typo_ratio


def overlaps(short: str, long: str) -> bool:
    """A nickname-like variant: a prefix of the longer name (3+ letters) or one of its tokens."""
    s, t = short.casefold(), long.casefold()
    if s == t or len(s) >= len(t):
        return False
    return (len(s) >= 3 and t.startswith(s)) or s in t.split()


def link_entities(
    facts: Sequence[Fact],
    *,
    speakers: Sequence[str],
    typo_ratio: float = GraphSettings.typo_ratio,
    recent_events: int = GraphSettings.recent_events,
) -> Linked:
    """Resolve the names of one conversation's facts and build entities, relations and profiles."""
    canon = _resolve(_names(facts, speakers), speakers, typo_ratio)
    out = Linked()
    by_id: dict[str, Entity] = {}
    first = facts[0] if facts else None
    for name, (cid, kind) in canon.items():
        if cid not in by_id and first is not None:
            by_id[cid] = Entity(
                user_id=first.user_id,
                conversation_id=first.conversation_id,
                id=cid,
                name=_display(canon, cid),
                type=kind,
            )
        if cid in by_id and name not in by_id[cid].aliases:
            by_id[cid].aliases.append(name)
    for fact in facts:  # "my dog Max": Max is also called "Ann's dog"
        for owner, noun, name in fact.links:
            role = f"{owner}'s {noun}"
            if name in canon and canon[name][0] in by_id and role != name and role not in by_id[canon[name][0]].aliases:
                by_id[canon[name][0]].aliases.append(role)
    turns_of: dict[str, set[str]] = {cid: set(e.turn_ids) for cid, e in by_id.items()}  # each entity's, as a set
    for fact in facts:
        ids = list(dict.fromkeys(canon[n][0] for n in [fact.subject, *fact.mentions] if n in canon))
        fact = fact.model_copy(update={"subject_id": canon.get(fact.subject, ("", ""))[0], "entity_ids": ids})
        out.facts.append(fact)
        for eid in ids:
            by_id[eid].fact_ids.append(fact.id)
            seen = turns_of[eid]
            for t in fact.turn_ids:
                if t not in seen:
                    seen.add(t)
                    by_id[eid].turn_ids.append(t)
        out.relations += _relations(fact, canon)
    by_id = {k: e for k, e in by_id.items() if e.fact_ids}  # a speaker no fact names is no node
    out.relations = [r for r in out.relations if r.src in by_id and r.dst in by_id]
    out.relations += _overlap_edges(canon, by_id)
    out.relations = _merged(out.relations)
    linked = {f.id: f for f in out.facts}
    out.entities = [_profile(e, linked, recent_events) for e in by_id.values()]
    return out


def _names(facts: Sequence[Fact], speakers: Sequence[str]) -> dict[str, tuple[str, int]]:
    """Every name with its type and mention count; speakers first."""
    seen: dict[str, tuple[str, int]] = dict.fromkeys(speakers, ("speaker", 1 << 20))
    for fact in facts:
        for name in [fact.subject, *fact.mentions, *(x for link in fact.links for x in (link[0], link[2]))]:
            kind, count = seen.get(name, (fact.types.get(name, "name"), 0))
            seen[name] = (kind, count + 1)
    return seen


def _resolve(
    names: dict[str, tuple[str, int]], speakers: Sequence[str], typo_ratio: float
) -> dict[str, tuple[str, str]]:
    """Name -> (entity id, type); frequent names become canonical first."""
    canon: dict[str, tuple[str, str]] = {}
    # (name, id, type) of canonical names, in the order they became canonical, by what two names that
    # :func:`same_entity` matches always share (the first letter and the number of words, up to case): a name is
    # compared with the heads it could match, in the same order, not with every head
    heads: dict[tuple[str, int], list[tuple[str, str, str]]] = {}
    for name, (kind, _) in sorted(names.items(), key=lambda kv: (-kv[1][1], -len(kv[0]), kv[0])):
        speaker_first = [s for s in speakers if name != s and name.casefold() == s.split()[0].casefold()]
        if len(speaker_first) == 1:
            canon[name] = (entity_id(speaker_first[0]), "speaker")
            continue
        bucket = heads.setdefault(_bucket(name), [])
        match = next(
            (
                h
                for h in bucket
                if compatible(kind, h[2])
                and same_entity(name, h[0], typo_ratio=typo_ratio)
                and not (name in speakers and h[0] in speakers)
            ),
            None,
        )
        if match is None:
            match = (name, entity_id(name), kind)
            bucket.append(match)
        canon[name] = (match[1], match[2] if match[2] != "name" else kind)
    return canon


def _bucket(name: str) -> tuple[str, int]:
    x = name.casefold().strip()
    return x[:1], len(x.split())


def _display(canon: dict[str, tuple[str, str]], cid: str) -> str:
    names = [n for n, (i, _) in canon.items() if i == cid]
    return names[0]


def _relations(fact: Fact, canon: dict[str, tuple[str, str]]) -> list[Edge]:
    triples = [tuple(link) for link in fact.links]
    obj = next((n for n in fact.mentions if n in fact.object or fact.object in n), None) if fact.object else None
    if obj and obj != fact.subject:
        triples.append((fact.subject, fact.relation, obj))
    out = []
    for src, rel, dst in triples:
        if rel and src in canon and dst in canon and canon[src][0] != canon[dst][0]:
            out.append(
                Edge(
                    fact.conversation_id,
                    canon[src][0],
                    rel,
                    canon[dst][0],
                    src_kind="entity",
                    dst_kind="entity",
                    turn_ids=tuple(fact.turn_ids),
                    created_at=fact.timestamp.timestamp() if fact.timestamp else None,
                )
            )
    return out


def _merged(relations: list[Edge]) -> list[Edge]:
    """One edge per (head, label, tail), holding the turns of every fact that stated it (H-Mem A.2).

    A repeated relation merges its evidence into the edge it repeats: the turns in the order the facts
    came, the time of the latest statement.
    """
    out: dict[tuple[str, str, str], Edge] = {}
    for r in relations:
        key = (r.src, r.rel, r.dst)
        if (had := out.get(key)) is None:
            out[key] = r
            continue
        times = [t for t in (had.created_at, r.created_at) if t is not None]
        out[key] = replace(
            had,
            turn_ids=tuple(dict.fromkeys([*had.turn_ids, *r.turn_ids])),
            created_at=max(times) if times else None,
        )
    return list(out.values())


def _overlap_edges(canon: dict[str, tuple[str, str]], by_id: dict[str, Entity]) -> list[Edge]:
    out = []
    names = [(n, cid) for n, (cid, _) in canon.items() if cid in by_id]
    # a longer name that a name can overlap starts with it or holds it as a word (:func:`overlaps`): each name's
    # candidates come from an index of the names' prefixes and words, in the order of ``names``
    reach: dict[str, set[int]] = {}
    for j, (long, _) in enumerate(names):
        t = long.casefold()
        for key in {*(t[:n] for n in range(3, len(t) + 1)), *t.split()}:
            reach.setdefault(key, set()).add(j)
    for short, sid in names:
        for j in sorted(reach.get(short.casefold(), ())):
            long, lid = names[j]
            if sid != lid and overlaps(short, long) and compatible(by_id[sid].type, by_id[lid].type):
                conv = by_id[sid].conversation_id
                out += [
                    Edge(conv, sid, OVERLAP, lid, "entity", "entity", weight=0.5),
                    Edge(conv, lid, OVERLAP, sid, "entity", "entity", weight=0.5),
                ]
    return out


def _event_seconds(fact: Fact) -> float:
    """When a fact happened, for ordering: its event date, else its time (epoch seconds; 0.0 with neither)."""
    when = fact.event_date or fact.timestamp
    return when.timestamp() if when else 0.0


def _profile(entity: Entity, facts: dict[str, Fact], recent_events: int) -> Entity:
    """H-Mem's profile: persistent attributes, and the most recent other facts as events."""
    own = [facts[i] for i in entity.fact_ids if i in facts and facts[i].subject_id == entity.id]
    attributes = [f.id for f in own if f.relation in PERSISTENT]
    events = sorted(
        (f for f in own if f.relation not in PERSISTENT),
        key=_event_seconds,
        reverse=True,
    )
    return entity.model_copy(update={"attributes": attributes, "events": [f.id for f in events[:recent_events]]})
