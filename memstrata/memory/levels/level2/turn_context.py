r"""A search view of the raw turns: each turn read with its neighbours in the session.

A reply like "Went swimming with the kids!" says little alone; next to the
question it answers, its vector matches what it is about. One unit per turn,
linked by ``turn_id``; the turn itself stays verbatim and is what retrieval returns.
Its vector is either the window's text encoded by the model, or (``Context.episodes.context_vectors
= "pooled"``) the window's turn vectors pooled by :func:`pooled_vectors`, which costs no
model call.

Example:
    >>> from memstrata.memory.levels.level2.turn import Turn
    >>> turns = [
    ...     Turn(user_id="u", session_id="1", position=i, speaker=s, text=t)
    ...     for i, (s, t) in enumerate([("Ann", "What did you do?"), ("Bob", "Went swimming!")])
    ... ]
    >>> turn_contexts(turns)[1].text
    'Ann: What did you do?\nBob: Went swimming!'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.models import Unit
from memstrata.memory.segmentation import EpisodeSettings


class TurnContext(Unit):
    """A turn rendered with its previous and next turn of the session."""

    turn_id: str
    session_id: str
    text: str = Field(description="The rendered previous, own and next turn of the session, one per line")

    @model_validator(mode="after")
    def _derive_id(self) -> TurnContext:
        if not self.id:
            self.id = self.view_id(self.turn_id)
        return self

    @staticmethod
    def view_id(turn_id: str) -> str:
        """The id of a turn's view (one per turn), so a reader that holds the turns can read their views by key."""
        return "ctx:" + turn_id

    @classmethod
    def reference(cls, turn: Turn) -> TurnContext:
        """The turn's view as a search snapshot holds it: its id and links, not its text.

        A view is searched by its vector alone, so a snapshot reads only the vectors
        (:meth:`~memstrata.memory.store.vectors.VectorStore.vectors_by_key`). Built without validation: reading
        its ``text`` raises ``AttributeError`` rather than giving a text that was never read.
        """
        links: dict[str, Any] = {
            "id": cls.view_id(turn.id),
            "user_id": turn.user_id,
            "conversation_id": turn.conversation_id,
            "turn_id": turn.id,
            "session_id": turn.session_id,
            "timestamp": turn.timestamp,
            "timestamp_raw": turn.timestamp_raw,
        }
        return cls.model_construct(**links)  # no text: the one field a view's search never reads

    def linked_turn_ids(self) -> list[str]:
        """The turn it reads in its context."""
        return [self.turn_id]

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its turn id."""
        return {**super().metadata(), "turn_id": self.turn_id}


def turn_contexts(session_turns: Sequence[Turn], *, width: int = EpisodeSettings.context_width) -> list[TurnContext]:
    """Each turn of one session (in order) rendered with up to ``width`` turns before and after it."""
    out = []
    for i, turn in enumerate(session_turns):
        window = session_turns[max(0, i - width) : i + width + 1]
        out.append(
            TurnContext(
                user_id=turn.user_id,
                conversation_id=turn.conversation_id,
                turn_id=turn.id,
                session_id=turn.session_id,
                text="\n".join(t.render() for t in window),
                timestamp=turn.timestamp,
                timestamp_raw=turn.timestamp_raw,
            )
        )
    return out


def pooled_vectors(
    turn_vectors: np.ndarray, *, width: int = EpisodeSettings.context_width, neighbour_weight: float = 0.5
) -> np.ndarray:
    """Each turn's contextual vector from the turn vectors alone (no model call), one row per turn.

    The normalized weighted sum of the turn's own vector and those of up to ``width``
    neighbours each side in the session (each neighbour weighted ``neighbour_weight``):
    the same window as :func:`turn_contexts`, pooled instead of encoded as one text.
    """
    vecs = np.asarray(turn_vectors, dtype=float)
    out = vecs.copy()
    for shift in range(1, width + 1):
        out[shift:] += neighbour_weight * vecs[:-shift]
        out[:-shift] += neighbour_weight * vecs[shift:]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1.0)


TURN_CONTEXT = register(
    Level(
        kind="turn_context",
        unit=TurnContext,
        role="view",
        description="each turn embedded with its neighbours (a dense view of the raw turns)",
    )
)
