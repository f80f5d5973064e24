"""HyMem's Level-1: a dense summary of exactly one episode, searched first.

Offline, the summary is extractive (:func:`memstrata.memory.extractive.extractive_summary`);
with a model, it is the model's key information (the ingestion stage decides).

Example:
    >>> from memstrata.memory.levels.level2.episode import Episode, summary_id
    >>> ep = Episode(
    ...     user_id="u",
    ...     session_id="1",
    ...     turn_ids=["s1:t0"],
    ...     start_position=0,
    ...     end_position=0,
    ...     text="Ann: I moved to Porto.",
    ... )
    >>> s = EventSummary(user_id="u", episode_id=ep.id, session_id="1", text="Ann moved to Porto.")
    >>> s.id, s.parent_ids()
    ('sum:s1:0-0', [])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from memstrata.memory.extractive import extractive_summary
from memstrata.memory.levels.base import Level, register
from memstrata.memory.levels.level2.episode import Episode, summary_id
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.models import Unit
from memstrata.memory.segmentation import EpisodeSettings


class EventSummary(Unit):
    """Level-1: a dense summary of exactly one episode."""

    episode_id: str
    session_id: str
    text: str
    participants: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    turn_ids: list[str] = Field(default_factory=list)
    method: str = Field(default="extractive", description="'extractive' or 'llm'")
    open: bool = Field(default=False, description="its episode is a session's open tail (see Episode.open)")
    quotes: list[tuple[str, int, int]] = Field(
        default_factory=list,
        description="[turn id, start, end]: the sentences of its turns' texts an extractive summary keeps",
    )

    @model_validator(mode="after")
    def _derive_id(self) -> EventSummary:
        if not self.id:
            self.id = summary_id(self.episode_id)
        return self

    def child_ids(self) -> list[str]:
        """The episode it summarizes."""
        return [self.episode_id]

    def metadata(self) -> dict[str, Any]:
        """The base metadata plus its episode id."""
        return {**super().metadata(), "episode_id": self.episode_id}


def offline_summary(
    episode: Episode,
    turns: Sequence[Turn],
    *,
    max_sentences: int = EpisodeSettings.summary_sentences,
    max_words: int = EpisodeSettings.summary_words,
) -> EventSummary:
    """The extractive Level-1 summary of one episode."""
    summary = extractive_summary(
        [(t.speaker, t.text) for t in turns], episode.timestamp, max_sentences=max_sentences, max_words=max_words
    )
    return EventSummary(
        user_id=episode.user_id,
        conversation_id=episode.conversation_id,
        episode_id=episode.id,
        session_id=episode.session_id,
        text=summary.text,
        participants=summary.participants,
        keywords=summary.keywords,
        turn_ids=list(episode.turn_ids),
        timestamp=episode.timestamp,
        timestamp_raw=episode.timestamp_raw,
        method="extractive",
        quotes=[(turns[i].id, start, end) for i, start, end in summary.quotes],
    )


SUMMARY = register(
    Level(
        kind="summary",
        unit=EventSummary,
        role="event",
        scopes=("Short", "Long", "Mixed"),
        description="HyMem Level-1: one event summary per episode, searched first",
    )
)
