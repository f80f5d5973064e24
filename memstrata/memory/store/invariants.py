"""The store check: the invariants every write and delete must keep, and what breaks them.

``memstrata check --user U`` prints what :func:`check_store` finds; the test suite runs it
at the end of the ingestion, crash, fuzz, store-adapter and concurrency tests, so a change to
how units are written or deleted that leaves something behind fails there.

- every unit's parents exist (a fact's episode, an episode's summary, a tree node's parent), and
  so do the raw turns it links to;
- every entity is named by stored facts, and only by stored ones;
- every theme's member facts are stored, and a fact belongs to one theme at most;
- every edge's two ends exist;
- counters exist only for stored units;
- the word index (embedded stores) holds exactly the stored units of each kind it covers; on a server store, each
  unit of a kind that carries terms holds those of its text;
- turn positions within a session are unique;
- a long turn's passages quote its current text, and only a turn longer than the encoder reads has any.

Example:
    >>> check_store(MemoryStore(path="/tmp/memstrata-doc"), "nobody")  # doctest: +SKIP
    []
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from memstrata.memory.levels import PASSAGE, levels, raw_kind
from memstrata.memory.levels.level2.passage import is_long, turn_passages
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.vectors import indexes_words
from memstrata.memory.tokens import TokenCounter


@dataclass(frozen=True)
class Problem:
    """One broken invariant: which, where, and a sentence saying what is wrong."""

    invariant: str  # "parent", "turn", "entity", "theme", "edge", "counter", "words", "position", "passage"
    conversation_id: str
    unit: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.conversation_id}/{self.unit}: {self.detail}"


def check_store(store: MemoryStore, user_id: str, conversation_id: str | None = None) -> list[Problem]:
    """Every broken invariant of one user's memory (or of one of its conversations); ``[]`` when all hold."""
    units = {
        lv.kind: [
            lv.unit.model_validate(r.payload)
            for r in store.get(lv.kind, user_id=user_id, conversation_id=conversation_id)
        ]
        for lv in levels()
    }
    ids = {(u.conversation_id, u.id) for stored in units.values() for u in stored}
    by_kind = {kind: {(u.conversation_id, u.id) for u in stored} for kind, stored in units.items()}
    turns = by_kind[levels(role="raw")[0].kind]
    problems = [*_links(units, ids, turns), *_entities(units, by_kind), *_themes(units, by_kind), *_positions(units)]
    problems += _passages(units)
    problems += _edges(store, user_id, conversation_id, ids, by_kind)
    problems += _counters(store, user_id, conversation_id, by_kind)
    problems += _words(store, user_id, conversation_id, by_kind)
    return problems


def _passages(units: dict[str, list[Any]]) -> list[Problem]:
    """A passage whose text is not its turn's text at its span (the turn changed), or a long turn without its
    passages, or with passages it no longer cuts.
    """
    turns = {(t.conversation_id, t.id): t for t in units[raw_kind()]}
    have: dict[tuple[str, str], set[str]] = {}
    out = []
    for p in units[PASSAGE.kind]:
        have.setdefault((p.conversation_id, p.turn_id), set()).add(p.id)
        turn = turns.get((p.conversation_id, p.turn_id))
        if turn is not None and turn.text[p.start : p.end] != p.text:
            out.append(Problem("passage", p.conversation_id, f"passage {p.id}", "its text is not its turn's any more"))
    counter = TokenCounter()
    for key, turn in turns.items():
        cut = {p.id for p in turn_passages(turn, counter)} if is_long(turn.speaker, turn.text) else set()
        if cut != have.get(key, set()):
            detail = f"the turn cuts {len(cut)} passage(s), {len(have.get(key, set()))} are stored"
            out.append(Problem("passage", turn.conversation_id, f"turn {turn.id}", detail))
    return out


def _links(units: dict[str, list[Any]], ids: set[tuple[str, str]], turns: set[tuple[str, str]]) -> list[Problem]:
    out = []
    for kind, stored in units.items():
        for u in stored:
            out += [
                Problem("parent", u.conversation_id, f"{kind} {u.id}", f"its parent {p} is not stored")
                for p in u.parent_ids()
                if (u.conversation_id, p) not in ids
            ]
            out += [
                Problem("turn", u.conversation_id, f"{kind} {u.id}", f"it links to turn {t}, which is not stored")
                for t in u.linked_turn_ids()
                if (u.conversation_id, t) not in turns
            ]
    return out


def _entities(units: dict[str, list[Any]], by_kind: dict[str, set[tuple[str, str]]]) -> list[Problem]:
    facts = by_kind.get("fact", set())
    out = []
    for e in units.get("entity", []):
        gone = [f for f in e.fact_ids if (e.conversation_id, f) not in facts]
        if gone or not e.fact_ids:
            what = f"facts {gone[:3]} are not stored" if gone else "no fact names it"
            out.append(Problem("entity", e.conversation_id, f"entity {e.id}", what))
    return out


def _themes(units: dict[str, list[Any]], by_kind: dict[str, set[tuple[str, str]]]) -> list[Problem]:
    facts = by_kind.get("fact", set())
    out = []
    seen: dict[tuple[str, str], str] = {}
    for theme in units.get("theme", []):
        gone = [f for f in theme.fact_ids if (theme.conversation_id, f) not in facts]
        if gone or not theme.fact_ids:
            what = f"member facts {gone[:3]} are not stored" if gone else "it has no member"
            out.append(Problem("theme", theme.conversation_id, f"theme {theme.id}", what))
        for f in theme.fact_ids:
            other = seen.setdefault((theme.conversation_id, f), theme.id)
            if other != theme.id:
                out.append(
                    Problem(
                        "theme", theme.conversation_id, f"theme {theme.id}", f"fact {f} is also a member of {other}"
                    )
                )
    return out


def _positions(units: dict[str, list[Any]]) -> list[Problem]:
    places = Counter((t.conversation_id, t.session_id, t.position) for t in units[levels(role="raw")[0].kind])
    return [
        Problem("position", conv, f"session {session}", f"{n} turns at position {pos}")
        for (conv, session, pos), n in places.items()
        if n > 1
    ]


def _edges(
    store: MemoryStore,
    user_id: str,
    conversation_id: str | None,
    ids: set[tuple[str, str]],
    by_kind: dict[str, set[tuple[str, str]]],
) -> list[Problem]:
    out = []
    for e in store.edges.get(user_id, conversation_id=conversation_id):
        for end, kind in ((e.src, e.src_kind), (e.dst, e.dst_kind)):
            known = by_kind.get(kind, set()) if kind else ids
            if (e.conversation_id, end) not in known:
                out.append(
                    Problem(
                        "edge",
                        e.conversation_id,
                        f"{e.src} -{e.rel}-> {e.dst}",
                        f"its end {kind or 'unit'} {end} is not stored",
                    )
                )
    return out


def _counters(
    store: MemoryStore, user_id: str, conversation_id: str | None, by_kind: dict[str, set[tuple[str, str]]]
) -> list[Problem]:
    return [
        Problem("counter", c.conversation_id, f"{c.kind} {c.unit_id}", "a counter for a unit that is not stored")
        for c in store.counters.all(user_id, conversation_id=conversation_id)
        if (c.conversation_id, c.unit_id) not in by_kind.get(c.kind, set())
    ]


def _words(
    store: MemoryStore, user_id: str, conversation_id: str | None, by_kind: dict[str, set[tuple[str, str]]]
) -> list[Problem]:
    if store.words is None:  # a server store: each unit carries its terms (memstrata.memory.store.terms)
        return [
            Problem("words", conv, f"{kind} {unit}", "its word terms are not those of its text")
            for kind in by_kind
            if indexes_words(kind)
            for conv, unit in store.terms_problems(kind, user_id=user_id, conversation_id=conversation_id)
        ]
    out = []
    for kind, stored in by_kind.items():
        if not indexes_words(kind):
            continue
        held = {k for k in store.words.units(kind, user_id=user_id) if conversation_id in (None, k[0])}
        out += [
            Problem("words", conv, f"{kind} {unit}", "stored but not in the word index")
            for conv, unit in sorted(stored - held)
        ]
        out += [
            Problem("words", conv, f"{kind} {unit}", "in the word index but not stored")
            for conv, unit in sorted(held - stored)
        ]
    return out
