"""The persona as HMO's tiers read it: per conversation, its text for the importance call and its embedding.

HMO keeps one profile per conversational role; memstrata keeps one persona per speaker of a conversation
(Bi-Mem's five dimensions, :mod:`memstrata.memory.levels.level1.persona`). The tiers read a conversation's persona
as the current versions of its speakers' dimensions:

- its **text** is what the importance call (§3.1, Eq. 3) hears as "the current user persona": the dimensions'
  items, the first item of every dimension before any second one, at most :data:`PROMPT_ITEMS` items of at most
  :data:`ITEM_CHARS` characters each and :data:`PROMPT_CHARS` in all, inside ``<persona>`` (data, not
  instructions), or ``<persona>none yet</persona>``;
- its **vector** is the normalised mean of the current dimensions' embeddings: a record's alignment A (Eq. 5) is
  its cosine to its own conversation's vector, and the drift gate (Eq. 6) compares each conversation's vector
  with that conversation's anchor (:mod:`memstrata.memory.tiers.anchor`).

Example:
    >>> ann = ConversationPersona(None, (PersonaLine("Ann", "interests", 0, "Ann loves hiking."),))
    >>> print(persona_block([ann]))
    <persona>
    Ann, interests: Ann loves hiking.
    </persona>
    >>> persona_block([])
    '<persona>none yet</persona>'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from memstrata.memory.levels.level1.persona import DIMENSIONS
from memstrata.memory.tiers.priority import persona_vector

if TYPE_CHECKING:
    from memstrata.memory.store import MemoryStore

PROMPT_ITEMS = 12  # persona items an importance call hears, at most: a short profile, not the whole persona
PROMPT_CHARS = 1200  # and characters of them in all, so the records keep most of the call
ITEM_CHARS = 200  # one item's characters, at most


@dataclass(frozen=True)
class PersonaLine:
    """One item of a current persona dimension: whose, which dimension, its rank in it and its text."""

    speaker: str
    dimension: str
    rank: int
    text: str

    def render(self) -> str:
        """``Speaker, dimension: text`` on one line, cut at :data:`ITEM_CHARS`."""
        text = " ".join(self.text.split())
        text = text if len(text) <= ITEM_CHARS else text[: ITEM_CHARS - 1].rstrip() + "…"
        return f"{self.speaker}, {self.dimension}: {text}"


@dataclass(frozen=True)
class ConversationPersona:
    """A conversation's persona: its embedding (``None`` when it has none yet) and its items."""

    vector: np.ndarray | None
    lines: tuple[PersonaLine, ...] = ()


def read_personas(store: MemoryStore, user_id: str, conversations: Sequence[str]) -> dict[str, ConversationPersona]:
    """The current persona of each of ``conversations`` (one read of its current dimensions each)."""
    out = {}
    for conv in dict.fromkeys(conversations):
        records = store.get(
            "persona", user_id=user_id, conversation_id=conv, where={"current": True}, with_vectors=True
        )
        lines = [
            PersonaLine(r.payload.get("speaker", ""), r.payload.get("dimension", ""), rank, str(item.get("text", "")))
            for r in records
            for rank, item in enumerate(r.payload.get("items") or [])
        ]
        out[conv] = ConversationPersona(persona_vector([r.metadata["_vector"] for r in records]), tuple(lines))
    return out


def persona_block(personas: Iterable[ConversationPersona]) -> str:
    """The personas as the importance call hears them (see the module docstring): bounded, and marked as data."""
    order = {d: i for i, d in enumerate(DIMENSIONS)}
    ranked = sorted(
        (line for p in personas for line in p.lines if line.text.strip()),
        key=lambda x: (x.rank, order.get(x.dimension, len(order)), x.speaker),
    )
    shown: list[str] = []
    size = 0
    for text in dict.fromkeys(line.render() for line in ranked):
        if len(shown) == PROMPT_ITEMS or size + len(text) + 1 > PROMPT_CHARS:
            break
        shown.append(text)
        size += len(text) + 1
    return "<persona>\n" + "\n".join(shown) + "\n</persona>" if shown else "<persona>none yet</persona>"
