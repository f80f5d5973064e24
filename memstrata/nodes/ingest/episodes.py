"""Ingestion stage 3: cut the open tail of each touched session into HyMem's Level-2 episodes.

A session's tail is its turns after the last closed episode; closed episodes are never
cut again, so a message written alone costs the same however long its session is. The tail is
replayed as if its messages had come one at a time (:func:`~memstrata.memory.segmentation.replay_tail`),
so one call and a stream of the same messages close the same episodes: a message joins the open
episode until the tail is full (``episodes.max_turns``) or a silence precedes it; then the tail is cut
(offline cuts: topic shifts, time gaps, a length cap; or the model's boundaries in LLM mode, asked over
the tail only once it is full or done), and every episode of it but the last is closed. The open episode
runs to the tail's last turn (a write that only appends to it and closes nothing never reaches this
stage: its turns wait raw after it, see :mod:`.turns`). The last closes at the length cap, when a
later session exists, when it has gone quiet (``episodes.quiet_minutes``, by the write's present) or when the
write asks (``close``). Episodes a re-cut replaced are deleted with their summaries and
facts (facts first, summaries last, so no reader ever meets a unit whose parent is
gone). New episodes are not stored here: :mod:`.distill` stores each one after its
summary, so a stored episode always has one. A touched session's facts whose episode
is not stored (a store written before the two-writer race below was closed) are
deleted here too, and the conversation's later stages redone.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from typing import Any

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.levels import Episode, Turn, levels
from memstrata.memory.levels.level2.episode import build_episodes, episode_vector, mark_repeats
from memstrata.memory.segmentation import ModelCuts, replay_tail
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.reads import finished_episodes, read_sessions, stray_facts
from memstrata.nodes.common import logger, progress
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.node import open_node
from memstrata.runtime.step import Step
from memstrata.state import IngestState


class Boundaries(BaseModel):
    """Indices of the messages that start a new episode."""

    starts: list[int] = Field(default_factory=list, description="0-based indices of messages that begin an episode")


async def segment_episodes(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Cut the open tail of every touched session; hand the new episodes (with their vectors) to the distillers."""
    ctx = runtime.context
    started = time.perf_counter()
    run = await open_node(runtime, "segment_episodes", ingest=True)
    store, step = run.store, run.step
    sessions = await asyncio.to_thread(read_sessions, store, ctx.user_id, state.get("sessions", []), with_vectors=True)
    later = await asyncio.to_thread(_sessions_with_later, store, ctx.user_id, list(sessions))
    written: list[list[str]] = []
    closed: list[list[str]] = []
    drafts: list[dict[str, Any]] = []
    removed = 0
    replaced: list[str] = []
    for (conv_id, session_id), (turns, vecs) in sessions.items():
        assert vecs is not None, "sessions are read with their vectors"
        old = await asyncio.to_thread(
            store.get, "episode", user_id=ctx.user_id, conversation_id=conv_id, where={"session_id": session_id}
        )
        if await asyncio.to_thread(_drop_strays, store, ctx.user_id, conv_id, session_id, old):
            replaced.append(conv_id)  # the graph, themes and persona may have taken those facts in: redo them
        start, frozen = await asyncio.to_thread(_tail_start, store, ctx.user_id, conv_id, turns, old)
        old = [r for r in old if r.unit_id not in frozen]  # closed: never cut, dropped or redone again
        closing = bool(state.get("close")) or (conv_id, session_id) in later
        cuts = await replay_tail(
            vecs,
            [t.timestamp for t in turns],
            start=start,
            open_span=_open_span(old, turns, start),
            present=datetime.fromisoformat(state["present"]),
            closing=closing,
            max_turns=ctx.episodes.max_turns,
            quiet=timedelta(minutes=ctx.episodes.quiet_minutes),
            model_cuts=_model_cuts(step, turns) if step.model is not None else None,
            min_turns=ctx.episodes.min_turns,
            overlap=ctx.episodes.overlap,
            max_gap=timedelta(minutes=ctx.episodes.max_gap_minutes),
            window=ctx.episodes.window,
            depth=ctx.episodes.depth,
        )
        episodes = [
            e.model_copy(update={"open": not shut})
            for e, (_, _, shut) in zip(
                build_episodes(
                    turns,
                    [(s, e) for s, e, _ in cuts],
                    session_time=turns[0].timestamp,
                    session_time_raw=turns[0].timestamp_raw,
                ),
                cuts,
                strict=True,
            )
        ]
        episodes = mark_repeats(episodes, turns, turns[start - 1].position if start else None)
        by_id = {t.id: v for t, v in zip(turns, vecs, strict=True)}
        dropped, done, unplaced = await asyncio.to_thread(_drop_stale, store, ctx.user_id, conv_id, old, episodes)
        removed += dropped
        replaced += [conv_id] if unplaced else []
        episodes = [e for e in episodes if e.id not in done]  # unchanged and finished: nothing to redo
        drafts += [
            {"episode": e.model_dump(mode="json"), "vector": episode_vector([by_id[t] for t in e.turn_ids])}
            for e in episodes
        ]
        written += [[conv_id, e.id] for e in episodes]
        closed += [[conv_id, e.id] for e in episodes if not e.open]
    progress(
        "segment",
        f"cut {len(sessions)} session(s) into {len(written)} new episodes (Level-2), {len(closed)} closed",
        episodes=len(written),
    )
    stats: dict[str, Any] = {
        "episodes_written": len(written),
        "episodes_replaced": removed,
        "episodes_closed": len(closed),
        "stage_seconds": {"episodes": round(time.perf_counter() - started, 3)},
    }
    if step.model is not None:
        stats["llm"] = {"segment": step.meter.summary()}
    return {"episodes": written, "closed": closed, "drafts": drafts, "replaced": replaced, "stats": stats}


def _tail_start(
    store: MemoryStore, user_id: str, conv_id: str, turns: list[Turn], old: list[Any]
) -> tuple[int, set[str]]:
    """Index of the session's first turn after its closed episodes (0: none is closed), and their ids.

    The closed episodes are the finished ones not marked open whose turns are unchanged, up to the
    first turn none of them covers (an interrupted write's gap, or a turn updated by id, is redone from there).
    """
    text = {t.id: t.render() for t in turns}
    shut = {
        r.unit_id: r
        for r in finished_episodes(store, user_id, conv_id, old)
        if not r.payload.get("open")
        # a turn updated by id since reopens its episode
        and r.document == "\n".join(text.get(t, "") for t in r.payload.get("turn_ids", []))
    }
    covered = {t for r in shut.values() for t in r.payload.get("turn_ids", [])}
    start = next((i for i, t in enumerate(turns) if t.id not in covered), len(turns))
    if start == 0:
        return 0, set()
    edge = turns[start - 1].position
    return start, {k for k, r in shut.items() if int(r.payload["end_position"]) <= edge}


def _sessions_with_later(store: MemoryStore, user_id: str, pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    """The numbered sessions after which the conversation holds a later numbered session (they are over)."""
    out: set[tuple[str, str]] = set()
    for conv_id in {c for c, _ in pairs}:
        numbers = [int(s) for s in store.sequences.sessions(user_id, conv_id) if s.isdigit()]
        last = max(numbers, default=None)
        out |= {(c, s) for c, s in pairs if c == conv_id and s.isdigit() and last is not None and int(s) < last}
    return out


def _open_span(old: list[Any], turns: list[Turn], start: int) -> tuple[int, int] | None:
    """The first and last turn (indices into ``turns``) of the session's stored open episode, when it is unchanged
    and starts the tail at ``start``; ``None`` otherwise (the tail is then replayed from ``start``).
    """
    index = {t.id: i for i, t in enumerate(turns)}
    text = {t.id: t.render() for t in turns}
    for r in old:
        ids = r.payload.get("turn_ids", [])
        if not r.payload.get("open") or not ids or any(t not in index for t in ids):
            continue
        core = ids[min(int(r.payload.get("repeated", 0)), len(ids) - 1)]
        if index[core] == start and r.document == "\n".join(text[t] for t in ids):
            return index[ids[0]], index[ids[-1]]
    return None


def _model_cuts(step: Step, turns: list[Turn]) -> ModelCuts:
    """The model's topic cuts over the tail's turns ``first..last`` (``None``: the offline cuts)."""

    async def cuts(first: int, last: int) -> set[int] | None:
        return await _llm_cuts(step, turns[first : last + 1])

    return cuts


async def _llm_cuts(step: Step, turns: list[Turn]) -> set[int] | None:
    """The model's episode starts for one session; ``None`` means "use the offline cuts"."""
    n = len(turns)
    listing = "\n".join(f"[{i}] {t.render()}" for i, t in enumerate(turns))

    def valid(b: Boundaries) -> Boundaries:
        if any(i < 0 or i >= n for i in b.starts):
            msg = f"indices must be between 0 and {n - 1}"
            raise ValueError(msg)
        return b

    value, outcome = await step.decide(
        Boundaries,
        "BOUNDARY_PROMPT",
        f'<messages session="{turns[0].session_id}">\n{listing}\n</messages>',
        node="segment",
        fallback=lambda: Boundaries(starts=[-1]),
        validate=valid,
        max_turns=step.ctx.episodes.max_turns,
    )
    if outcome not in GOOD_OUTCOMES:
        return None
    return {i for i in value.starts if 0 < i < n}


def _drop_stale(
    store: MemoryStore, user_id: str, conv_id: str, old: list[Any], keep: list[Episode]
) -> tuple[int, set[str], bool]:
    """Delete a session's stored episodes that a re-cut replaced or changed, with their summaries and facts.

    Returns how many ids are gone for good, the ids of new episodes that are already
    stored, unchanged and finished (closed episodes are never cut again, so an appended
    message changes only the open tail), and whether a deleted episode was closed when it was deleted. An open
    episode that closes counts as changed: with a model, its summary and facts are redone then.

    A closed episode is deleted when a turn of it was updated or a write stopped midway, and when another writer
    of the conversation (two processes appending through one Chroma server) closed it after ``old`` was read. Its
    summary may be in the tree and its facts in the graph, so the caller redoes the conversation's later stages
    (``replaced``); the entity stage then links its facts again without judging old ones anew. The episodes are
    read again just before the delete to see this. A close that lands between that read and the delete (a few
    milliseconds) is not seen here; the other writer's tree update then finds the summary gone after its write
    (``persist.unstored_children``) and writes the tree again.

    The facts are deleted before the episodes and read again after them: a writer storing one of these episodes
    meanwhile stores its facts last and then reads the episode back, so between the two reads one of the writers
    finds the other's facts or delete, and no fact is left without its episode.
    """
    new = {e.id: e for e in keep}
    finished = {r.unit_id for r in finished_episodes(store, user_id, conv_id, old)}
    stale = [
        r
        for r in old
        if r.unit_id not in new
        or r.unit_id not in finished
        or r.document != new[r.unit_id].embed_text()
        or bool(r.payload.get("open")) != new[r.unit_id].open
    ]
    ids = [r.unit_id for r in stale]
    now = store.get("episode", user_id=user_id, conversation_id=conv_id, unit_ids=ids)
    was_closed = any(not r.payload.get("open") for r in now)
    # Children before parents: facts (and any kind distilled from episodes), episodes, then summaries.
    _drop_episode_units(store, user_id, conv_id, ids, keep_kinds={"summary"})
    store.delete("episode", user_id=user_id, conversation_id=conv_id, unit_ids=ids)
    # Again, now that the episodes are gone: a writer still storing one of them (summary, episode, facts) may have
    # stored its facts since the first read. It reads the episode back after its facts (facts.drop_orphan_facts),
    # so if its facts land after this read, it sees the episode gone and deletes them itself.
    _drop_episode_units(store, user_id, conv_id, ids, keep_kinds={"summary"})
    store.delete(
        "summary", user_id=user_id, conversation_id=conv_id, unit_ids=[r.payload.get("summary_id", "") for r in stale]
    )
    stale_ids = {r.unit_id for r in stale}
    return (
        sum(r.unit_id not in new for r in stale),
        {r.unit_id for r in old if r.unit_id not in stale_ids},
        was_closed,
    )


def _drop_strays(store: MemoryStore, user_id: str, conv_id: str, session_id: str, old: list[Any]) -> int:
    """Delete the session's facts whose episode is not stored (left by two writers before their race was closed,
    or by anything else that deleted an episode and not its facts); how many went.
    """
    strays = stray_facts(store, user_id, conv_id, session_id, [r.unit_id for r in old])
    if strays:
        store.delete("fact", user_id=user_id, conversation_id=conv_id, unit_ids=[r.unit_id for r in strays])
        logger.warning("%s/%s: deleted %d facts whose episode is not stored", user_id, conv_id, len(strays))
    return len(strays)


def _drop_episode_units(
    store: MemoryStore, user_id: str, conv_id: str, episode_ids: list[str], *, keep_kinds: set[str]
) -> None:
    """Delete the units of every event kind distilled from these episodes (e.g. their facts), but ``keep_kinds``."""
    if not episode_ids:
        return
    for level in levels(role="event"):
        if level.kind in keep_kinds:
            continue
        found = store.get(
            level.kind, user_id=user_id, conversation_id=conv_id, where={"episode_id": {"$in": episode_ids}}
        )
        store.delete(level.kind, user_id=user_id, conversation_id=conv_id, unit_ids=[r.unit_id for r in found])
