"""A speaker's persona from their facts: the offline distillation, and the checks a model's distillation must pass.

Offline (:func:`offline_dimensions`): each of the speaker's current facts joins the dimension whose cue
(``Context.persona.cues``, embedded like any text) it is nearest, if it is at least ``floor`` similar to it. Facts
at least ``same`` similar are one item said again: the item keeps the earliest wording and gathers the others' ids
and turns. Items are ranked by centrality (similarity to the centroid of their dimension's facts) times
``1 + ln(sessions)``, the number of sessions that say it (recurrence), and each dimension keeps its best
``per_dimension``. Every item is a stored fact's own text: nothing is invented, and the same facts always give the
same persona.

With a model (Bi-Mem Eq. 7, :func:`llm_items`), the model reads the speaker's scenes and facts and writes each
dimension's statements, each citing the ids of the facts it rests on; a statement citing an id it was not shown
is rejected (the reply is repaired once, then the offline items stand).

Example:
    >>> import numpy as np
    >>> from memstrata.memory.levels import Fact
    >>> facts = [
    ...     Fact(
    ...         user_id="u",
    ...         episode_id=f"ep:s{i}:0-1",
    ...         session_id=str(i),
    ...         n=0,
    ...         text=t,
    ...         subject="Ann",
    ...         turn_ids=[f"s{i}:0"],
    ...     )
    ...     for i, t in enumerate(["Ann lives in Porto.", "Ann paints."])
    ... ]
    >>> cues = np.eye(5, 3)  # five dimensions, three dimensions of space
    >>> x = np.array([[1.0, 0, 0], [0, 1.0, 0]])  # the first fact is basic_info, the second interests
    >>> {d: [i.text for i in items] for d, items in offline_dimensions(facts, x, cues, floor=0.5).items() if items}
    {'basic_info': ['Ann lives in Porto.'], 'interests': ['Ann paints.']}
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, Field

from memstrata.memory.levels import DIMENSIONS, Fact, PersonaItem
from memstrata.memory.themes.partition import unit_rows


def speaker_facts(facts: Sequence[Fact], speaker: str) -> list[int]:
    """Rows of the facts about ``speaker``: their subject is the speaker's name, or an entity some fact with the
    speaker's name as subject was resolved to (an alias linked to the same person).
    """
    name = speaker.casefold()
    ids = {f.subject_id for f in facts if f.subject.casefold() == name and f.subject_id}
    return [i for i, f in enumerate(facts) if f.subject.casefold() == name or (f.subject_id and f.subject_id in ids)]


def basis(facts: Sequence[Fact], excluded: Sequence[str] = ()) -> str:
    """A digest of what a speaker's persona is built from (ids, wording, whether superseded, what a user removed):
    when it changes, the persona is stale.
    """
    parts = sorted(f"{f.id}\x1f{f.text}\x1f{f.superseded_by}" for f in facts)
    return hashlib.sha1("\x1e".join([*parts, *sorted(excluded)]).encode()).hexdigest()[:16]


def offline_dimensions(
    facts: Sequence[Fact],
    x: np.ndarray,
    cues: np.ndarray,
    *,
    floor: float,
    same: float = 0.85,
    per_dimension: int = 5,
    theme_of: Mapping[str, str] | None = None,
) -> dict[str, list[PersonaItem]]:
    """The items of each dimension from the speaker's ``facts`` (rows of ``x``), given the five cue vectors."""
    out: dict[str, list[PersonaItem]] = {d: [] for d in DIMENSIONS}
    current = [i for i, f in enumerate(facts) if f.current]
    if not current:
        return out
    v, c = unit_rows(x[current]), unit_rows(cues)
    near = v @ c.T
    best = near.argmax(axis=1)
    for d, dimension in enumerate(DIMENSIONS):
        rows = [j for j in range(len(current)) if best[j] == d and near[j, d] >= floor]
        if not rows:
            continue
        centre = unit_rows(v[rows].sum(axis=0)[None, :])[0]
        groups: list[list[int]] = []
        for j in sorted(rows, key=lambda j: (_when(facts[current[j]]), facts[current[j]].id)):  # earliest wording
            home = next((g for g in groups if float(v[g[0]] @ v[j]) >= same), None)
            if home is None:
                groups.append([j])
            else:
                home.append(j)
        scored = []
        for g in groups:
            members = [facts[current[j]] for j in g]
            sessions = len({m.session_id for m in members})
            score = float(v[g[0]] @ centre) * (1 + math.log(sessions))
            head = members[0]
            scored.append(
                PersonaItem(
                    text=head.text,
                    fact_id=head.id,
                    fact_ids=[m.id for m in members[1:]],
                    theme_id=(theme_of or {}).get(head.id, ""),
                    turn_ids=list(dict.fromkeys(t for m in members for t in m.turn_ids)),
                    score=round(score, 4),
                )
            )
        out[dimension] = sorted(scored, key=lambda i: (-i.score, i.fact_id))[:per_dimension]
    return out


def _when(fact: Fact) -> float:
    t = fact.valid_from or fact.timestamp
    return t.timestamp() if t is not None else 0.0


# ---- with a model: Bi-Mem Eq. 7 ----------------------------------------------------------------------
class Trait(BaseModel):
    """One statement about the speaker and the facts it rests on."""

    text: str = Field(description="one short statement about the speaker")
    fact_ids: list[str] = Field(description="ids of the shown facts that support it (at least one)")


class PersonaDraft(BaseModel):
    """The model's persona of one speaker: a few statements per dimension."""

    basic_info: list[Trait] = Field(default_factory=list, description="name, age, work, where they live")
    interests: list[Trait] = Field(default_factory=list, description="hobbies, likes and dislikes")
    personality: list[Trait] = Field(default_factory=list, description="traits and emotional patterns")
    values: list[Trait] = Field(default_factory=list, description="beliefs, values and motivations")
    relationships: list[Trait] = Field(default_factory=list, description="the people in their life")


def check_draft(draft: PersonaDraft, offered: Sequence[str]) -> PersonaDraft:
    """Reject a draft citing a fact that was not shown, or a statement citing none (``ValueError``: repaired once,
    then the fallback).
    """
    shown = set(offered)
    for dimension in DIMENSIONS:
        for trait in getattr(draft, dimension):
            unknown = [f for f in trait.fact_ids if f not in shown]
            if unknown or not trait.fact_ids or not trait.text.strip():
                msg = (
                    f"{dimension}: every statement needs a text and fact_ids from the shown facts; "
                    f"{trait.text[:60]!r} cites {unknown or 'nothing'}"
                )
                raise ValueError(msg)
    return draft


def llm_items(
    draft: PersonaDraft, facts: Mapping[str, Fact], *, per_dimension: int, theme_of: Mapping[str, str] | None = None
) -> dict[str, list[PersonaItem]]:
    """A checked draft as persona items, each with the turns of the facts it cites (in the draft's order)."""
    out: dict[str, list[PersonaItem]] = {}
    for dimension in DIMENSIONS:
        items = []
        for trait in getattr(draft, dimension)[:per_dimension]:
            cited = [facts[f] for f in dict.fromkeys(trait.fact_ids)]
            items.append(
                PersonaItem(
                    text=" ".join(trait.text.split()),
                    fact_id=cited[0].id,
                    fact_ids=[f.id for f in cited[1:]],
                    theme_id=(theme_of or {}).get(cited[0].id, ""),
                    turn_ids=list(dict.fromkeys(t for f in cited for t in f.turn_ids)),
                )
            )
        out[dimension] = items
    return out


def offered_facts(facts: Sequence[Fact], x: np.ndarray, *, limit: int, same: float = 0.85) -> list[int]:
    """Which of a speaker's current facts a model is shown: the most recurrent first (how many of the speaker's
    facts are at least ``same`` similar), then the earliest; at most ``limit``.
    """
    current = [i for i, f in enumerate(facts) if f.current]
    if not current:
        return []
    v = unit_rows(x[current])
    again = (v @ v.T >= same).sum(axis=1)
    order = sorted(range(len(current)), key=lambda j: (-int(again[j]), _when(facts[current[j]]), facts[current[j]].id))
    return [current[j] for j in order[:limit]]
