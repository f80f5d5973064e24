"""HyMem's Level-2: contiguous turns on one topic, kept verbatim (read by id, never searched).

Example:
    >>> from memstrata.memory.levels.level2.turn import Turn
    >>> turns = [Turn(user_id="u", session_id="1", position=i, speaker="Ann", text=str(i)) for i in range(3)]
    >>> [e.id for e in build_episodes(turns, [(0, 1), (1, 2)])]
    ['ep:s1:0-1', 'ep:s1:1-2']
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from memstrata.memory.levels.base import Level, register
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.models import Unit


class Episode(Unit):
    """Contiguous turns of one session, verbatim, linked 1:1 to their Level-1 summary."""

    session_id: str
    turn_ids: list[str]
    start_position: int
    end_position: int
    text: str = Field(description="The verbatim turns, one rendered turn per line")
    summary_id: str = ""
    repeated: int = Field(
        default=0,
        ge=0,
        description=(
            "How many leading turns it repeats from its predecessor (HyMem's overlap): read for context, but their "
            "facts are the predecessor's, so a fact is written once"
        ),
    )
    fact_ids: list[str] = Field(
        default_factory=list,
        description=(
            "The facts distilled from it, stored after it: an episode whose facts are not all stored is unfinished"
        ),
    )
    open: bool = Field(
        default=False,
        description=(
            "The open tail of its session: messages may still join it. Its summary and facts are the offline ones "
            "(searchable at once); it is re-cut and redone as messages arrive, and summarized with the model, "
            "placed in the tree and linked into the entity graph only once it closes"
        ),
    )

    @model_validator(mode="after")
    def _derive_id(self) -> Episode:
        if not self.id:
            self.id = f"ep:s{self.session_id}:{self.start_position}-{self.end_position}"
        if not self.summary_id:
            self.summary_id = summary_id(self.id)
        return self

    def parent_ids(self) -> list[str]:
        """Its summary."""
        return [self.summary_id]

    def child_ids(self) -> list[str]:
        """Its turns."""
        return list(self.turn_ids)

    def span(self) -> tuple[datetime | None, datetime | None]:
        """Its time, as both ends."""
        return self.timestamp, self.timestamp

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its id and whether it is open."""
        return {**super().metadata(), "episode_id": self.id, "open": self.open}


def summary_id(episode_id: str) -> str:
    """The id of an episode's Level-1 summary (``ep:s1:0-4`` -> ``sum:s1:0-4``)."""
    return "sum:" + episode_id.removeprefix("ep:")


def build_episodes(
    session_turns: Sequence[Turn],
    spans: Sequence[tuple[int, int]],
    *,
    session_time: datetime | None = None,
    session_time_raw: str | None = None,
) -> list[Episode]:
    """One :class:`Episode` per inclusive (start, end) span of one session's turns (in order)."""
    out = []
    for start, end in spans:
        turns = session_turns[start : end + 1]
        first = turns[0]
        out.append(
            Episode(
                user_id=first.user_id,
                conversation_id=first.conversation_id,
                session_id=first.session_id,
                turn_ids=[t.id for t in turns],
                start_position=turns[0].position,
                end_position=turns[-1].position,
                text="\n".join(t.render() for t in turns),
                timestamp=session_time or first.timestamp,
                timestamp_raw=session_time_raw or first.timestamp_raw,
            )
        )
    return out


def mark_repeats(episodes: Sequence[Episode], turns: Sequence[Turn], before: int | None) -> list[Episode]:
    """Each episode with :attr:`Episode.repeated` set: how many of its turns lie at or before the end of the
    episode before it.

    ``episodes`` are one session's, in order, cut from ``turns``; ``before`` is the last position of the closed
    episode that precedes the first of them (``None``: none does).

    Example:
        >>> turns = [Turn(user_id="u", session_id="1", position=i, speaker="Ann", text=str(i)) for i in range(4)]
        >>> [e.repeated for e in mark_repeats(build_episodes(turns, [(0, 1), (1, 3)]), turns, None)]
        [0, 1]
    """
    position = {t.id: t.position for t in turns}
    out = []
    for ep in episodes:
        repeated = 0 if before is None else sum(position.get(t, before + 1) <= before for t in ep.turn_ids)
        out.append(ep.model_copy(update={"repeated": min(repeated, len(ep.turn_ids) - 1)}))
        before = ep.end_position if before is None else max(before, ep.end_position)
    return out


def episode_vector(turn_vectors: Sequence[Sequence[float]]) -> list[float]:
    """The normalized mean of an episode's turn vectors (no extra model call)."""
    mean = np.asarray(turn_vectors, dtype=float).mean(axis=0)
    norm = float(np.linalg.norm(mean)) or 1.0
    return (mean / norm).tolist()


EPISODE = register(
    Level(
        kind="episode",
        unit=Episode,
        role="container",
        searched=False,
        description="HyMem Level-2: verbatim episodes, reached from their summary",
    )
)
