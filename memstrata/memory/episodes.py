"""Pure helpers that turn segmented turns into Level-2 episodes and Level-1 summaries."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memstrata.memory.models import Episode, EventSummary, Session, Turn, TurnContext
from memstrata.memory.summarize import extractive_summary


def turn_metadata(turn: Turn) -> dict[str, object]:
    """Scalar metadata stored beside a turn, for filtering and ordering."""
    return {
        "session_id": turn.session_id, "position": turn.position, "speaker": turn.speaker,
        "source_id": turn.source_id, "ts": turn.timestamp.timestamp() if turn.timestamp else None,
    }


def build_episodes(session: Session, spans: Sequence[tuple[int, int]]) -> list[Episode]:
    """One verbatim :class:`Episode` per inclusive (start, end) span of a session."""
    out = []
    for start, end in spans:
        turns = session.turns[start:end + 1]
        first = turns[0]
        out.append(Episode(
            user_id=first.user_id, conversation_id=first.conversation_id, session_id=session.session_id,
            turn_ids=[t.id for t in turns], start_position=start, end_position=end,
            text="\n".join(t.render() for t in turns),
            timestamp=session.timestamp or first.timestamp, timestamp_raw=session.timestamp_raw or first.timestamp_raw,
        ))
    return out


def turn_contexts(session: Session, *, width: int = 1) -> list[TurnContext]:
    """Each turn of a session rendered with up to ``width`` turns before and after it.

    Example:
        >>> from memstrata.memory.models import Session, Turn
        >>> turns = [Turn(user_id="u", session_id="1", position=i, speaker=s, text=t)
        ...          for i, (s, t) in enumerate([("Ann", "What did you do?"), ("Bob", "Went swimming!")])]
        >>> turn_contexts(Session(session_id="1", turns=turns))[1].text
        'Ann: What did you do?\nBob: Went swimming!'
    """
    turns = session.turns
    out = []
    for i, turn in enumerate(turns):
        window = turns[max(0, i - width): i + width + 1]
        out.append(TurnContext(
            user_id=turn.user_id, conversation_id=turn.conversation_id, turn_id=turn.id, session_id=turn.session_id,
            text="\n".join(t.render() for t in window), timestamp=turn.timestamp, timestamp_raw=turn.timestamp_raw,
        ))
    return out


def episode_vector(turn_vectors: Sequence[Sequence[float]]) -> list[float]:
    """The normalized mean of an episode's turn vectors (no extra model call)."""
    mean = np.asarray(turn_vectors, dtype=float).mean(axis=0)
    norm = float(np.linalg.norm(mean)) or 1.0
    return (mean / norm).tolist()


def offline_summary(episode: Episode, turns: Sequence[Turn]) -> EventSummary:
    """The extractive Level-1 summary of one episode."""
    summary = extractive_summary([(t.speaker, t.text) for t in turns], episode.timestamp)
    return EventSummary(
        user_id=episode.user_id, conversation_id=episode.conversation_id, episode_id=episode.id,
        session_id=episode.session_id, text=summary.text, participants=summary.participants,
        keywords=summary.keywords, turn_ids=list(episode.turn_ids), timestamp=episode.timestamp,
        timestamp_raw=episode.timestamp_raw, method="extractive",
    )


def changed_turns(turns: Sequence[Turn], stored: dict[str, str]) -> list[Turn]:
    """Turns that are new, or whose rendered text differs from what is stored."""
    return [t for t in turns if stored.get(t.id) != t.render()]
