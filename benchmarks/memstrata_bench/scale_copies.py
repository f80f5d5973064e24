"""The perturbed copies ``memstrata bench scale`` grows a store with: every stored unit, edge and counter of a
conversation, with the speakers renamed, the dates moved back and a new conversation id.
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from memstrata_bench.locomo import LocomoConversation

USER = "scale"  # the one user a scale store holds: its conversations are copied, and it is asked the questions
NAMES = [
    "Avery",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Esme",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonas",
    "Kalani",
    "Lior",
    "Mateus",
    "Nadia",
    "Oskar",
    "Priyanka",
    "Quentin",
    "Rosa",
    "Soren",
    "Talia",
    "Umar",
    "Vera",
    "Wren",
    "Ximena",
]
YEARS_PER_COPY = 2
# An ISO date (its day kept valid when the year moves) or a bare year.
_DATE_OR_YEAR = re.compile(r"\b(?P<y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d)|\b(?P<year>(?:19|20|21)\d\d)\b")


def shift_years(text: str, years: int) -> str:
    """Every ISO date and bare year in the text moved by ``years`` (29 February becomes the 28th if need be)."""

    def move(m: re.Match[str]) -> str:
        if m.group("year"):
            return str(int(m.group("year")) + years)
        year, month, day = int(m.group("y")) + years, int(m.group("m")), int(m.group("d"))
        if not 1 <= month <= 12 or year < 1:
            return m.group(0)
        day = min(day, calendar.monthrange(year, month)[1])
        return f"{year:04d}-{month:02d}-{day:02d}"

    return _DATE_OR_YEAR.sub(move, text)


def copy_names(conv: LocomoConversation, k: int) -> dict[str, str]:
    """Copy ``k``'s new name for each speaker of the conversation."""
    speakers = sorted({t.speaker for t in conv.turns})
    return {s: f"{NAMES[(k * 7 + i) % len(NAMES)]}{k}" for i, s in enumerate(speakers)}


def renamer(names: dict[str, str]) -> Callable[[str], str]:
    """A function that writes every name in ``names`` as it says (whole words only)."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    return lambda text: pattern.sub(lambda m: names[m.group(0)], text)


def perturber(source: str, target: str, names: dict[str, str], years: int) -> Callable[[str], str]:
    """A function that rewrites a stored JSON or text of conversation ``source`` into copy ``target``."""
    rename = renamer(names)
    quoted = json.dumps(source)

    def apply(text: str) -> str:
        text = text.replace(quoted, json.dumps(target))
        return shift_years(rename(text), years)

    return apply


def copied_edges(edges: Sequence[Any], sub: Callable[[str], str]) -> list[Any]:
    """The edges with every field rewritten by ``sub`` (as their JSON), their turn ids kept a tuple."""
    from memstrata.memory.store.edges import Edge

    return [
        Edge(**{**json.loads(sub(json.dumps(dataclasses.asdict(e)))), "turn_ids": tuple(e.turn_ids)}) for e in edges
    ]


def copy_conversation(store: Any, conv: LocomoConversation, k: int) -> int:
    """Write copy ``k`` of one stored conversation (every kind, edges, counters); returns its turns."""
    from memstrata.memory import levels

    target = f"{conv.sample_id}-copy{k}"
    years = -YEARS_PER_COPY * k
    sub = perturber(conv.sample_id, target, copy_names(conv, k), years)
    turns = 0
    for level in levels.levels():
        records = store.get(level.kind, user_id=USER, conversation_id=conv.sample_id, with_vectors=True)
        units = [level.unit.model_validate_json(sub(r.metadata["payload"])) for r in records]
        store.upsert(
            level.kind,
            units,
            documents=[sub(r.document) for r in records],
            vectors=[r.metadata["_vector"] for r in records],
            extra=[u.metadata() for u in units],
        )
        turns += len(units) if level.role == "raw" else 0
    store.edges.add(USER, copied_edges(store.edges.get(USER, conversation_id=conv.sample_id), sub))
    seconds = years * 365.2425 * 86400
    counters = [
        dataclasses.replace(
            c,
            conversation_id=target,
            unit_id=sub(json.dumps(c.unit_id)).strip('"'),
            reinforced_at=c.reinforced_at + seconds if c.reinforced_at is not None else None,
            # HMO's scores are copied, its tier is not: a copy is older than everything, so it joins the archive
            # (a sequential write would have ranked it out of the active tiers at once)
            tier=None,
            session_key=f"{target}/{c.session_key.rpartition('/')[2]}" if c.session_key else None,
            record_time=c.record_time + seconds if c.record_time is not None else None,
        )
        for c in store.counters.all(USER, conversation_id=conv.sample_id)
    ]
    store.counters.put(USER, counters)
    store.versions.bump(USER)  # the copies' journal is not needed by any snapshot of this process
    return turns
