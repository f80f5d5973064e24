"""Knowledge updates: a newer fact that gives its subject a new value of a single-valued attribute supersedes the older.

The offline rule is deliberately conservative. It only acts on attributes a
person has one of at a time (where they live, where they work), recognised by
the fact's relation label, and only when both objects are names (so "moved the
couch" is not a move). Same subject entity, same attribute, a different object,
and a later time: the older fact gets ``superseded_by`` = the newer fact's id.
Everything else (two hobbies, two children, a visit and a move) is left alone,
and nothing is ever deleted: the older fact stays as history.

With a model, the same candidate pairs (same subject, same attribute or same
label, different objects) are put to the model, which decides; the rule's
verdict is the fallback (see :mod:`memstrata.nodes.ingest.entities`).

Example:
    >>> from datetime import datetime
    >>> from memstrata.memory.levels.level1.fact import Fact
    >>> def f(n, rel, obj, day):
    ...     return Fact(
    ...         user_id="u",
    ...         episode_id=f"ep:s{n}:0-0",
    ...         session_id=str(n),
    ...         n=0,
    ...         text=f"Ann {rel} {obj}.",
    ...         subject="Ann",
    ...         subject_id="ent:ann",
    ...         relation=rel,
    ...         object=obj,
    ...         timestamp=datetime(2023, 1, day),
    ...     )
    >>> [(old.id, new) for old, new in supersede([f(1, "live", "Porto", 1), f(2, "move", "Lisbon", 9)])]
    [('fact:s1:0-0:0', 'fact:s2:0-0:0')]
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise

from rapidfuzz import fuzz

from memstrata.memory.levels.level1.fact import Fact

ATTRIBUTES = {  # relation label -> the single-valued attribute it sets
    "live": "residence",
    "move": "residence",
    "relocate": "residence",
    "reside": "residence",
    "work": "workplace",
    "join": "workplace",
    "hire": "workplace",
    "employ": "workplace",
}


def attribute_of(fact: Fact) -> str | None:
    """The single-valued attribute a fact sets, or ``None``; the object must be a name."""
    attribute = ATTRIBUTES.get(fact.relation)
    if attribute is None or not fact.object or not fact.object[:1].isupper():
        return None
    return attribute


def candidate_pairs(facts: Sequence[Fact], *, by_label: bool = False) -> list[tuple[Fact, Fact]]:
    """(older, newer) pairs of one subject's facts on the same attribute (or label) with different objects.

    Only consecutive facts in time are paired, so each value is replaced by the next one.
    """
    groups: dict[tuple[str, str], list[Fact]] = {}
    for fact in facts:
        key = attribute_of(fact) or (fact.relation if by_label and fact.object else None)
        if key and fact.subject_id:
            groups.setdefault((fact.subject_id, key), []).append(fact)
    pairs = []
    for group in groups.values():
        ordered = sorted(group, key=_when)
        for older, newer in pairwise(ordered):
            if _when(newer) > _when(older) and not _same_object(older.object, newer.object):
                pairs.append((older, newer))
    return pairs


def supersede(facts: Sequence[Fact]) -> list[tuple[Fact, str]]:
    """The offline rule: (older fact, id of the fact that replaces it) for every attribute change."""
    return [(older, newer.id) for older, newer in candidate_pairs(facts) if attribute_of(older)]


def apply_supersession(facts: Sequence[Fact], replaced: dict[str, str]) -> list[Fact]:
    """The facts whose ``superseded_by`` changes (set, or cleared when no longer replaced)."""
    changed = []
    for fact in facts:
        new = replaced.get(fact.id, "")
        if new != fact.superseded_by:
            changed.append(fact.model_copy(update={"superseded_by": new}))
    return changed


def _when(fact: Fact) -> tuple[float, str, int]:
    stamp = fact.valid_from or fact.timestamp
    return (stamp.timestamp() if isinstance(stamp, datetime) else 0.0, fact.episode_id, fact.n)


def _same_object(a: str, b: str) -> bool:
    return fuzz.ratio(a.casefold(), b.casefold()) >= 90
