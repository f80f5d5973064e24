"""The persona path: a question that asks to infer something about a named speaker gets that speaker's best-matching
persona dimension (Bi-Mem treats a retrieved persona as a global anchor, §4.3).

A question takes the path when it names a speaker who has a persona and asks for an inference rather than a
recollection: it holds a modal or hedged word (would, could, might, likely, probably...) or asks about a person's
kind, personality, values or beliefs (:func:`asks_inference`, a word rule, the same for any conversation). The
dimension is the speaker's current version whose text is nearest the question (cosine of MiniLM vectors), if at
least ``similarity``. Its items' raw turns join the candidates (``found_by="persona"``), and the answer's context
opens with the dimension as one cited line (:func:`persona_block`), whose tokens count against the budget like any
other line. The trace says which speaker, dimension and similarity, and why.

Example:
    >>> asks_inference("Would Caroline likely pursue writing as a career?"), asks_inference("When did Ann move?")
    (True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels.level1.persona import PERSONA, Persona
from memstrata.memory.query import Query
from memstrata.memory.themes.partition import unit_rows

PERSONA_FOUND_BY = "persona"
PERSONA_LABEL = "persona"
_INFERENCE = re.compile(
    r"\b(would|could|might|may|likely|unlikely|probably|possibly|perhaps|considered?|kind of|sort of|type of|"
    r"personality|character|values?|believes?|beliefs?|attitudes?|leaning|prefer|preferences?|feel about)\b",
    re.IGNORECASE,
)


def asks_inference(text: str) -> bool:
    """Whether the question asks to infer (a modal or hedged word, or a person's kind, character or values)."""
    return bool(_INFERENCE.search(text))


@dataclass(frozen=True)
class PersonaMatch:
    """The persona dimension a question takes: which unit, how near, and why."""

    row: int
    unit_id: str
    conversation_id: str
    speaker: str
    dimension: str
    similarity: float
    why: str

    def trace(self) -> dict[str, Any]:
        """The match as a trace entry (the similarity rounded to three places)."""
        return {
            "persona": self.unit_id,
            "conversation_id": self.conversation_id,
            "speaker": self.speaker,
            "dimension": self.dimension,
            "similarity": round(self.similarity, 3),
            "why": self.why,
        }


def named_speakers(index: MemoryIndex, text: str) -> list[str]:
    """The speakers with a current persona whose name (or first name) the text holds as a word."""
    table = index.events.get(PERSONA.kind)
    if table is None:
        return []
    names = sorted({u.speaker for u in table.units_as(Persona) if u.current})
    words = {w.casefold() for w in re.findall(r"[\w'-]+", text)}
    return [n for n in names if n.casefold() in words or n.split()[0].casefold() in words]


def persona_match(index: MemoryIndex, query: Query, qvec: np.ndarray, *, similarity: float) -> PersonaMatch | None:
    """The best current dimension of a named speaker for an inference question, if near enough."""
    table = index.events.get(PERSONA.kind)
    if table is None or not len(table) or not asks_inference(query.text):
        return None
    speakers = named_speakers(index, query.text)
    rows = [i for i, u in enumerate(table.units_as(Persona)) if u.current and u.speaker in speakers and u.items]
    if not rows:
        return None
    sims = unit_rows(table.vecs[rows]) @ unit_rows(np.asarray(qvec, dtype=float)[None, :])[0]
    best = int(np.argmax(sims))
    if float(sims[best]) < similarity:
        return None
    unit = table.units_as(Persona)[rows[best]]
    return PersonaMatch(
        rows[best],
        unit.id,
        unit.conversation_id,
        unit.speaker,
        unit.dimension,
        float(sims[best]),
        f"the question asks to infer about {unit.speaker}; {unit.dimension} is the nearest dimension "
        f"({float(sims[best]):.2f} >= {similarity:g})",
    )


def ranked_persona(index: MemoryIndex, qvec: np.ndarray, row: int, rank: int) -> PersonaMatch:
    """The persona dimension at ``row`` that Bi-Mem's Eq. 9 ranked ``rank`` (from 0) among the facts, themes and
    persona dimensions it retrieved together: an anchor by its rank, whatever the question's words.
    """
    unit = index.events[PERSONA.kind].units_as(Persona)[row]
    sim = float(
        unit_rows(index.events[PERSONA.kind].vecs[[row]])[0] @ unit_rows(np.asarray(qvec, dtype=float)[None, :])[0]
    )
    return PersonaMatch(
        row,
        unit.id,
        unit.conversation_id,
        unit.speaker,
        unit.dimension,
        sim,
        f"Eq. 9 ranked {unit.speaker}'s {unit.dimension} #{rank + 1} among the facts, themes and persona dimensions "
        f"retrieved together (cosine {sim:.2f})",
    )


def persona_block(index: MemoryIndex, unit_id: str, conversation_id: str) -> str:
    """The dimension as a header and one line: its statements, then the raw turns they cite (``""`` if gone)."""
    table = index.events.get(PERSONA.kind)
    row = table.by_key.get((conversation_id, unit_id)) if table is not None else None
    if table is None or row is None:  # the snapshot no longer holds it (a write replaced the version)
        return ""
    unit = table.units_as(Persona)[row]
    since = f" · since {unit.valid_from:%-d %B %Y}" if unit.valid_from else ""
    cites = ", ".join(turn_citation(index, unit.conversation_id, tid) for tid in unit.linked_turn_ids())
    return f"[{PERSONA_LABEL} · {unit.speaker} · {unit.dimension}{since}]\n{unit.text} (cites {cites})"


def turn_citation(index: MemoryIndex, conversation_id: str, turn_id: str) -> str:
    """A cited turn as the context's lines cite it: its id when the id names its session (``s1:t6``, ``D3:7``), else
    (a message id such as a UUID) ``s<session>:t<position>``, the form the integrations render every turn in.
    """
    if ":" in turn_id:
        return turn_id
    rows = index.rows_of(conversation_id, [turn_id])
    if not rows:
        return turn_id
    turn = index.turns[rows[0]]
    return f"s{turn.session_id}:t{turn.position}"
