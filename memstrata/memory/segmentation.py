"""Offline episode segmentation: topic shifts, time gaps and a length cap.

A session is cut where the embedding similarity between the turns before and
after a point dips (TextTiling-style depth scores), where the time gap between
two turns exceeds ``max_gap``, and whenever an episode reaches ``max_turns``.
Episodes never cross a session, so appending a session never changes earlier
episodes. Each episode after the first may start with ``overlap`` turns of its
predecessor, as HyMem allows, so context at a boundary is never lost.

Example:
    >>> import numpy as np

from memstrata.context import default
    >>> vecs = np.vstack([np.tile([1.0, 0.0], (4, 1)), np.tile([0.0, 1.0], (4, 1))])
    >>> segment_session(vecs, min_turns=2, overlap=0)
    [(0, 3), (4, 7)]
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from memstrata.context import default


def boundary_scores(vectors: np.ndarray, window: int = default("segment_window")) -> np.ndarray:
    """Similarity across each gap ``i`` (between turn ``i-1`` and ``i``); index 0 is unused."""
    n = len(vectors)
    sims = np.ones(n)
    for i in range(1, n):
        left = vectors[max(0, i - window) : i].mean(axis=0)
        right = vectors[i : i + window].mean(axis=0)
        denom = float(np.linalg.norm(left) * np.linalg.norm(right)) or 1.0
        sims[i] = float(left @ right) / denom
    return sims


def depth_cuts(sims: np.ndarray, depth: float = default("segment_depth")) -> set[int]:
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


def segment_session(
    vectors: np.ndarray,
    times: Sequence[datetime | None] | None = None,
    *,
    overlap: int = default("episode_overlap"),
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
    max_turns: int = default("max_episode_turns"),
    min_turns: int = default("min_episode_turns"),
    window: int = default("segment_window"),
    depth: float = default("segment_depth"),
    max_gap: timedelta = timedelta(minutes=default("episode_max_gap_minutes")),  # noqa: B008 - immutable, read once
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
        cuts |= {i for i in range(1, n) if times[i] and times[i - 1] and times[i] - times[i - 1] > max_gap}
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
    overlap: int = default("episode_overlap"),
    max_turns: int = default("max_episode_turns"),
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
        parts += [
            i
            for i in range(start + 1, len(vectors))
            if stamps[i] and stamps[i - 1] and stamps[i] - stamps[i - 1] > quiet
        ]  # type: ignore[operator]
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
