"""``memstrata inspect --entities`` and ``--entity NAME``: the entity graph as tables a person can read.

Example:
    >>> console.print(entity_table(store, "u1", None))  # doctest: +SKIP
    >>> for part in entity_detail(store, "u1", None, "Max"):
    ...     console.print(part)  # doctest: +SKIP
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from rapidfuzz import fuzz
from rich.console import Group
from rich.table import Table
from rich.text import Text

from memstrata.errors import StoreError
from memstrata.memory.levels import Entity, Fact, raw_kind

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore


def _entities(store: MemoryStore, user: str, conversation: str | None) -> list[Entity]:
    return [Entity.model_validate(r.payload) for r in store.get("entity", user_id=user, conversation_id=conversation)]


def entity_table(store: MemoryStore, user: str, conversation: str | None) -> Table:
    """Every entity with its type, conversation, fact count, relation count and aliases, most facts first."""
    entities = sorted(_entities(store, user, conversation), key=lambda e: (-len(e.fact_ids), e.name))
    degree = Counter(
        (e.conversation_id, end)
        for e in store.edges.get(user, conversation_id=conversation, src_kind="entity")
        for end in (e.src, e.dst)
    )
    table = Table(title=Text(f"{len(entities)} entities of {user}"))
    for column in ("entity", "type", "conversation", "facts", "relations", "aliases"):
        table.add_column(column, justify="right" if column in ("facts", "relations") else "left")
    for e in entities:
        table.add_row(  # every stored string as plain Text: brackets in it are what was said, not markup
            Text(e.name),
            Text(e.type),
            Text(e.conversation_id),
            str(len(e.fact_ids)),
            str(degree[(e.conversation_id, e.id)]),
            Text(", ".join(a for a in e.aliases if a != e.name)),
        )
    return table


def find_entity(store: MemoryStore, user: str, conversation: str | None, name: str) -> list[Entity]:
    """Entities whose name or alias is ``name`` (any case), else the closest names by ``rapidfuzz``."""
    entities = _entities(store, user, conversation)
    exact = [e for e in entities if name.casefold() in {a.casefold() for a in [e.name, *e.aliases]}]
    if exact or not entities:
        return exact
    scored = sorted(((fuzz.WRatio(name, e.name), e) for e in entities), key=lambda p: -p[0])
    return [e for s, e in scored if s >= 85][:3]


def entity_detail(store: MemoryStore, user: str, conversation: str | None, name: str) -> list[Any]:
    """The profile, the relations and the facts (with their raw turns) of the entities named ``name``."""
    found = find_entity(store, user, conversation, name)
    if not found:
        msg = f"no entity named {name!r} for user {user!r}; list them with --entities"
        raise StoreError(msg)
    return [_detail(store, user, e) for e in found]


def _detail(store: MemoryStore, user: str, entity: Entity) -> Group:
    conv = entity.conversation_id
    facts = {
        r.unit_id: Fact.model_validate(r.payload)
        for r in store.get("fact", user_id=user, conversation_id=conv, unit_ids=entity.fact_ids)
    }
    turns = {
        r.unit_id: r.document
        for r in store.get(
            raw_kind(),
            user_id=user,
            conversation_id=conv,
            unit_ids=sorted({t for f in facts.values() for t in f.turn_ids}),
        )
    }
    head = Text.assemble(
        (entity.name, "bold"),
        f" · {entity.type} · {conv} · {len(entity.fact_ids)} facts",
        f" · aliases: {', '.join(entity.aliases)}",
    )
    others = [i for i in entity.fact_ids if i not in set(entity.attributes) | set(entity.events)]
    tables = [
        _facts_table("profile: attributes", entity.attributes, facts, turns),
        _facts_table("profile: recent events", entity.events, facts, turns),
        _relations(store, user, entity),
        _facts_table("other facts that name it", others, facts, turns),
    ]
    return Group(head, *(t for t in tables if t.row_count))


def _facts_table(title: str, ids: list[str], facts: dict[str, Fact], turns: dict[str, str]) -> Table:
    table = Table(title=title, title_justify="left", show_lines=False)
    for column in ("fact", "statement", "valid", "raw turns"):
        table.add_column(column)
    for fid in ids:
        fact = facts.get(fid)
        if fact is None:
            continue
        valid = f"from {fact.valid_from:%d %b %Y}" if fact.valid_from else "untimed"
        if fact.superseded_by:
            valid += f", superseded by {fact.superseded_by}"
        raw = "\n".join(f"{t} {turns.get(t, '?')}" for t in fact.turn_ids)
        table.add_row(Text(fid), Text(fact.text), Text(valid), Text(raw))
    return table


def _relations(store: MemoryStore, user: str, entity: Entity) -> Table:
    table = Table(title="relations", title_justify="left")
    for column in ("from", "label", "to", "turns"):
        table.add_column(column)
    names = {e.id: e.name for e in _entities(store, user, entity.conversation_id)}
    edges = [
        e
        for e in store.edges.get(user, conversation_id=entity.conversation_id, src_kind="entity")
        if entity.id in (e.src, e.dst)
    ]
    for e in sorted(edges, key=lambda e: (e.rel, e.src, e.dst)):
        table.add_row(
            Text(names.get(e.src, e.src)), Text(e.rel), Text(names.get(e.dst, e.dst)), Text(", ".join(e.turn_ids))
        )
    return table
