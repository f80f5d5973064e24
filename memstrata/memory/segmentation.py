"""Offline episode segmentation: topic shifts, time gaps and a length cap.

A session is cut where the embedding similarity between the turns before and
after a point dips (TextTiling-style depth scores), where the time gap between
two turns exceeds ``max_gap``, and whenever an episode reaches ``max_turns``.
Episodes never cross a session, so appending a session never changes earlier
episodes. Each episode after the first may start with ``overlap`` turns of its
predecessor, as HyMem allows, so context at a boundary is never lost.

Example:
    >>> import numpy as np
    >>> vecs = np.vstack([np.tile([1.0, 0.0], (4, 1)), np.tile([0.0, 1.0], (4, 1))])
    >>> segment_session(vecs, min_turns=2, overlap=0)
    [(0, 3), (4, 7)]
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Annotated, Any, Literal

import numpy as np

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class EpisodeSettings:
    """How turns become episodes (HyMem's event segmentation), and what each episode and turn view is written with."""

    max_turns: Annotated[int, setting("offline segmentation: longest episode")] = 12
    min_turns: Annotated[int, setting("offline segmentation: shortest episode")] = 3
    overlap: Annotated[int, setting("turns an episode repeats from its predecessor")] = 1
    max_gap_minutes: Annotated[float, setting("a longer silence always starts an episode")] = 30.0
    window: Annotated[int, setting("turns each side of a gap the topic-shift score compares")] = 2
    depth: Annotated[float, setting("a topic cut needs similarity this many std below the session mean")] = 0.5
    session_gap_hours: Annotated[
        float,
        setting(
            "messages without a session: a longer silence since the conversation's latest message starts a new "
            "session (across calls too)"
        ),
    ] = 6.0
    quiet_minutes: Annotated[
        float,
        setting(
            "a session's open tail closes into episodes once its latest message is this much older than the "
            "write's present (Context.now, else the write's newest message time, else the clock); messages "
            "without a time never go quiet. Closing also happens at a boundary, at max_turns, when a "
            "later session starts, or on request"
        ),
    ] = 30.0
    context_width: Annotated[int, setting("neighbours each side in a turn's contextual view")] = 1
    context_vectors: Annotated[
        Literal["encoded", "pooled"],
        setting(
            "a contextual view's vector: its text encoded by the embedder, or its turns' vectors pooled (no model "
            "call; neighbours weigh half)"
        ),
    ] = "pooled"
    span_vectors: Annotated[
        Literal["encoded", "facts", "pooled"],
        setting(
            "the vector of an offline fact or extractive summary (a quote of its turns): 'pooled' from the token "
            "vectors of the pass that encoded its turns (late chunking; no encoder call) for both, 'facts' for "
            "facts only (summaries encoded), 'encoded' for neither. Off by default: the cosine floors that build "
            "the persona, supersessions, themes and the tree were set on encoded vectors, and pooled ones move "
            "them"
        ),
    ] = "encoded"
    summary_sentences: Annotated[int, setting("extractive summary: sentences at most")] = 5
    summary_words: Annotated[int, setting("extractive summary: words at most")] = 90
    embed_batch: Annotated[int, setting("units embedded and written per batch")] = 256

    def __post_init__(self) -> None:
        for name in ("max_turns", "min_turns", "embed_batch"):
            if getattr(self, name) < 1:
                msg = f"Context.episodes.{name} must be >= 1, got {getattr(self, name)}"
                raise ValueError(msg)


def boundary_scores(vectors: np.ndarray, window: int = EpisodeSettings.window) -> np.ndarray:
    """Similarity across each gap ``i`` (between turn ``i-1`` and ``i``); index 0 is unused."""
    n = len(vectors)
    sims = np.ones(n)
    for i in range(1, n):
        left = vectors[max(0, i - window) : i].mean(axis=0)
        right = vectors[i : i + window].mean(axis=0)
        denom = float(np.linalg.norm(left) * np.linalg.norm(right)) or 1.0
        sims[i] = float(left @ right) / denom
    return sims


def depth_cuts(sims: np.ndarray, depth: float = EpisodeSettings.depth) -> set[int]:
    """Gaps whose similarity is a local minimum well below the session's mean."""
    if len(sims) < 3:
        return set()
    inner = sims[1:]
    if inner.std() < 1e-6:  # a flat similarity curve has no topic shift
        return set()
    cutoff = inner.mean() - depth * inner.std()
    return {
        i
        for i in range(1, len(sims))
        if sims[i] < cutoff and sims[i] <= sims[i - 1] and (i + 1 >= len(sims) or sims[i] <= sims[i + 1])
    }


def _gap_over(times: Sequence[datetime | None], i: int, limit: timedelta) -> bool:
    """Whether turns ``i - 1`` and ``i`` both have a time and more than ``limit`` passed between them."""
    before, after = times[i - 1], times[i]
    return bool(after and before and after - before > limit)


def segment_session(
    vectors: np.ndarray,
    times: Sequence[datetime | None] | None = None,
    *,
    overlap: int = EpisodeSettings.overlap,
    **options: Any,
) -> list[tuple[int, int]]:
    """Inclusive (start, end) positions of each episode in one session: :func:`segment_cores` (``options`` are
    its settings), each episode but the first starting ``overlap`` turns early.

    ``forced`` replaces the topic cuts with externally decided ones (an LLM's
    boundaries); time gaps and the length cap still apply.
    """
    cores = segment_cores(vectors, times, **options)
    return [(max(0, s - overlap) if idx else s, e) for idx, (s, e) in enumerate(cores)]


def segment_cores(
    vectors: np.ndarray,
    times: Sequence[datetime | None] | None = None,
    *,
    max_turns: int = EpisodeSettings.max_turns,
    min_turns: int = EpisodeSettings.min_turns,
    window: int = EpisodeSettings.window,
    depth: float = EpisodeSettings.depth,
    max_gap: timedelta = timedelta(minutes=EpisodeSettings.max_gap_minutes),
    forced: set[int] | None = None,
) -> list[tuple[int, int]]:
    """The episodes of :func:`segment_session` before any overlap: they tile the turns exactly."""
    n = len(vectors)
    if n == 0:
        return []
    cuts = (
        forced if forced is not None else depth_cuts(boundary_scores(np.asarray(vectors, dtype=float), window), depth)
    )
    cuts = set(cuts)
    if times:
        cuts |= {i for i in range(1, n) if _gap_over(times, i, max_gap)}
    cores: list[tuple[int, int]] = []
    start = 0
    for i in range(1, n):
        length = i - start
        if (i in cuts and length >= min_turns) or length >= max_turns:
            cores.append((start, i - 1))
            start = i
    cores.append((start, n - 1))
    if len(cores) > 1 and cores[-1][1] - cores[-1][0] + 1 < min_turns and cores[-2][1] - cores[-2][0] + 1 < max_turns:
        tail = cores.pop()
        cores[-1] = (cores[-1][0], tail[1])
    return cores


def cut_tail(
    vectors: np.ndarray,
    times: Sequence[datetime | None] | None = None,
    *,
    start: int,
    closing: bool,
    overlap: int = EpisodeSettings.overlap,
    max_turns: int = EpisodeSettings.max_turns,
    quiet: timedelta | None = None,
    **options: Any,
) -> list[tuple[int, int, bool]]:
    """The episodes of a session's open tail (its turns from ``start`` on): ``(start, end, closed)`` each.

    Turns before ``start`` belong to closed episodes and are never cut again. Every episode
    of the tail but the last is closed (a boundary falls after it); the last one closes when
    ``closing`` says the session is done, or when it has reached ``max_turns``; the turns before a
    silence longer than ``quiet`` inside the tail went quiet, so they close too. An episode
    may start with ``overlap`` turns of its predecessor, closed or not, as in
    :func:`segment_session`; with ``start=0`` and ``closing`` the two give the same episodes.

    Example:
        >>> vecs = np.vstack([np.tile([1.0, 0.0], (4, 1)), np.tile([0.0, 1.0], (4, 1))])
        >>> cut_tail(vecs, start=0, closing=False, min_turns=2, overlap=0)
        [(0, 3, True), (4, 7, False)]
    """
    stamps = list(times) if times else [None] * len(vectors)
    parts = [start]  # a silence longer than ``quiet`` inside an open tail: what came before it went quiet
    if not closing and quiet is not None:
        parts += [i for i in range(start + 1, len(vectors)) if _gap_over(stamps, i, quiet)]
    out = []
    for p, (begin, end) in enumerate(zip(parts, [*parts[1:], len(vectors)], strict=True)):
        last_part = p == len(parts) - 1
        cores = segment_cores(
            np.asarray(vectors)[begin:end], stamps[begin:end] if times else None, max_turns=max_turns, **options
        )
        for idx, (s, e) in enumerate(cores):
            closed = closing or not last_part or idx < len(cores) - 1 or e - s + 1 >= max_turns
            s, e = s + begin, e + begin
            out.append((max(0, s - overlap) if s > 0 else s, e, closed))
    return out


def stays_open(
    *,
    core_turns: int,
    times: Sequence[datetime | None],
    present: datetime | None,
    max_turns: int = EpisodeSettings.max_turns,
    quiet: timedelta,
    max_gap: timedelta,
) -> bool:
    """Whether appending to an open tail closes nothing, by the rules of :func:`cut_tail` before its tail is full.

    ``core_turns`` counts the tail's turns after the appended ones join it (leaving out the turns it repeats from
    its predecessor); ``times`` holds the tail's last stored turn's time, then the appended turns' times. The tail
    stays one open episode while it is shorter than ``max_turns``, no gap between those times exceeds ``quiet`` or
    ``max_gap``, and its newest time is within ``quiet`` of the write's ``present``. Then no episode closes and
    no topic cut is asked for, so nothing derived needs to change. An untimed turn neither opens a gap nor
    closes one; ``present=None`` is the newest time itself (a message written at its own time).

    Example:
        >>> t = datetime(2024, 1, 1, 9, 0)
        >>> gap = timedelta(minutes=30)
        >>> stays_open(core_turns=3, times=[t, t + timedelta(minutes=1)], present=t, quiet=gap, max_gap=gap)
        True
        >>> stays_open(core_turns=12, times=[t, t], present=t, quiet=gap, max_gap=gap)
        False
    """
    if core_turns >= max_turns:
        return False
    limit = min(quiet, max_gap)
    stamps = [t for t in times if t is not None]
    if any(b - a > limit for a, b in pairwise(stamps)):
        return False
    return not stamps or present is None or present - max(stamps) <= quiet


ModelCuts = Callable[[int, int], Awaitable[set[int] | None]]


async def replay_tail(
    vectors: np.ndarray,
    times: Sequence[datetime | None] | None,
    *,
    start: int,
    open_span: tuple[int, int] | None,
    present: datetime | None,
    closing: bool,
    max_turns: int = EpisodeSettings.max_turns,
    quiet: timedelta,
    model_cuts: ModelCuts | None = None,
    **options: Any,
) -> list[tuple[int, int, bool]]:
    """A session's tail cut as if its turns had been written one message at a time: ``(start, end, closed)`` each.

    Episodes close on message time, so one call of many messages and the same messages written one at a time make
    the same episodes. A message joins the open episode unless the tail is full (``max_turns``), a silence longer
    than ``quiet`` or ``max_gap`` precedes it, or no episode is open (:func:`stays_open`); then :func:`cut_tail` cuts
    the tail as it stands at that message (topic cuts once it is full: ``model_cuts(first, last)``, else the offline
    ones), every episode but the last is closed, and the tail goes on after them. At the end, ``closing`` (a later
    session, or the write asks) or a tail that is quiet by ``present`` closes what is open; else the open episode
    runs to the last turn. The closed episodes are those a stream of the same messages closes; a stream's open
    episode may end earlier, since a message that closes nothing waits after it (:func:`stays_open`).

    ``start`` is the first turn after the closed episodes; ``open_span`` the stored open episode's first and last
    turn, when there is one and it starts the tail (the replay goes on after it). Indices are into ``vectors``.

    Example:
        >>> import asyncio
        >>> vecs = np.tile([1.0, 0.0], (5, 1))
        >>> gap = timedelta(minutes=30)
        >>> asyncio.run(
        ...     replay_tail(
        ...         vecs,
        ...         None,
        ...         start=0,
        ...         open_span=None,
        ...         present=None,
        ...         closing=False,
        ...         max_turns=3,
        ...         quiet=gap,
        ...         overlap=0,
        ...         max_gap=gap,
        ...     )
        ... )
        [(0, 2, True), (3, 4, False)]
    """
    n = len(vectors)
    stamps = list(times) if times else [None] * n
    out: list[tuple[int, int, bool]] = []
    span = open_span

    async def cut(first: int, last: int, *, closes: bool) -> list[tuple[int, int, bool]]:
        ready = closes or last - first + 1 >= max_turns
        forced: set[int] | None = None if ready else set()
        if ready and model_cuts is not None and last > first:
            forced = await model_cuts(first, last)
        return cut_tail(
            vectors[: last + 1],
            stamps[: last + 1],
            start=first,
            closing=closes,
            max_turns=max_turns,
            quiet=quiet,
            forced=forced,
            **options,
        )

    for j in range((span[1] + 1) if span else start, n):
        joins = span is not None and stays_open(
            core_turns=j - start + 1,
            times=[stamps[j - 1], stamps[j]],
            present=None,  # each message is written at its own time
            max_turns=max_turns,
            quiet=quiet,
            max_gap=options.get("max_gap", quiet),
        )
        if joins:
            continue  # joins the open tail: nothing closes
        cuts = await cut(start, j, closes=False)
        out += [c for c in cuts if c[2]]
        span = next(((s, e) for s, e, shut in cuts if not shut), None)
        start = next((c[1] + 1 for c in reversed(cuts) if c[2]), start)
    last = n - 1
    tail = [t for t in stamps[start:] if t is not None]
    quiet_now = bool(tail) and present is not None and present - max(tail) > quiet
    if (closing or quiet_now) and start <= last:
        return out + await cut(start, last, closes=True)
    return out + ([(span[0], last, False)] if span else [])
