"""Retrieval through the temporal-semantic tree (H-Mem §3.3, step 2): windows, evidence tags, robustness.

- :func:`select_windows`: the tree windows a temporal hint selects, at the hint's own granularity
  (a day, a week, a month, a year), each with the tree nodes and events it holds;
- :func:`window_rows`: the best turns inside those windows, the window's own evidence;
- :func:`window_relevance`: each raw turn's temporal relevance to the hint. A turn inside a selected
  window scores 1 (evidence inside the window is preferred); any other turn gets H-Mem's Eq. 1
  between its day and the hint, which is at most about 0.5. A turn's days are when it was said and the
  dates its facts resolved from relative phrases ("yesterday", "two days ago");
- :func:`anchor_time`: the date of an event a hint is anchored on ("the weekend before the concert"),
  from the best BM25 match among the event summaries;
- :func:`tag_hits`: the scope, the tree level and the window that led to each evidence item;
- :func:`turn_robustness`: H-Mem's Eq. 2 per turn with the reinforcement (n_m, r_m) of the event
  summary that holds it, read from the counters store by :func:`load_reinforcement`;
- :func:`event_relevance` and :func:`event_robustness`: Eq. 1 and Eq. 2 for the event units themselves
  (summaries, tree nodes, facts), for H-Mem's Eq. 3 on them (``Context.weights.events="eq3"``).

Example:
    >>> windows = select_windows(index, query.hint)  # doctest: +SKIP
    >>> [(w.level, w.key, w.events) for w in windows]  # doctest: +SKIP
    [('month', '2023-05', 14)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from memstrata.memory.index import MemoryIndex, tokenize
from memstrata.memory.index.held import PerConversation
from memstrata.memory.levels.level1.tree_node import TREE_NODE, TreeNode
from memstrata.memory.plan.temporal_hints import parse_hint, resolve
from memstrata.memory.query import Hit, Query, Scope
from memstrata.memory.search.hmem_score import (
    DAY,
    Interval,
    robustness_array,
    temporal_relevance,
    temporal_relevance_array,
)
from memstrata.memory.tree.windows import level_for_span, window_key, window_level, window_span, windows_between

SUMMARY_KIND = "summary"
FACT_KIND = "fact"
_REINFORCEMENT = "tree\x1freinforcement"
WINDOW_FOUND_BY = "tree_window"  # ``Hit.found_by`` of the turns a hint's windows brought (:func:`window_rows`)


@dataclass(frozen=True)
class Window:
    """One tree window a hint selected: its level and key, its span, and what the tree holds there."""

    level: str
    key: str
    start: datetime
    end: datetime
    nodes: tuple[str, ...] = ()
    events: int = 0

    def describe(self) -> str:
        """The window as ``"<level> <key>"``."""
        return f"{self.level} {self.key}"

    def as_dict(self) -> dict[str, Any]:
        """The window as a trace entry: its level, key, nodes and events."""
        return {"level": self.level, "window": self.key, "nodes": list(self.nodes), "events": self.events}


def select_windows(index: MemoryIndex, hint: Interval | None, *, limit: int = 64) -> list[Window]:
    """The windows of the hint's granularity that overlap it, with the tree nodes and events each holds."""
    if hint is None:
        return []
    key = f"tree\x1fwindows\x1f{hint.start.isoformat()}\x1f{hint.end.isoformat()}"
    if key not in index.memo:
        level = level_for_span(hint.start, hint.end)
        nodes: dict[str, list[str]] = {}
        table = index.tables.get(TREE_NODE.kind)
        for unit in table.units if table is not None else []:
            if getattr(unit, "level", None) == level:
                nodes.setdefault(unit.window, []).append(unit.id)  # type: ignore[attr-defined]
        events: dict[str, int] = {}
        summaries = index.events.get(SUMMARY_KIND)
        for unit in summaries.units if summaries is not None else []:
            if unit.timestamp is not None:
                wk = window_key(level, unit.timestamp)
                events[wk] = events.get(wk, 0) + 1
        found = [
            Window(level, k, *window_span(k), tuple(sorted(nodes.get(k, ()))), events.get(k, 0))
            for k in windows_between(level, hint.start, hint.end, limit=limit)
        ]
        index.remember(key, found)
    return index.memo[key]


def window_relevance(index: MemoryIndex, hint: Interval | None, lam: float) -> np.ndarray:
    """Per turn: 1 inside a window the hint selects, else H-Mem Eq. 1 between the turn's day and the hint.

    A turn's time is when it was said, and also the dates its facts resolved from what it says ("yesterday"
    said on 4 October is 3 October, :func:`turn_event_times`): a turn telling of the hint's day is inside
    the window even when it was said after it, and its Eq. 1 score is the best of its days.
    """
    n = len(index.turns)
    if hint is None or n == 0:
        return np.zeros(n)
    key = f"tree\x1frelevance\x1f{hint.start.isoformat()}\x1f{hint.end.isoformat()}\x1f{lam}"
    if key not in index.memo:
        event_rows, event_ts = turn_event_times(index)
        inside = window_of_turn(index, hint) >= 0
        days: dict[float, float] = {}

        def day_relevance(when: datetime) -> float:
            day = when.replace(hour=0, minute=0, second=0, microsecond=0)
            stamp = day.timestamp()
            if stamp not in days:
                days[stamp] = temporal_relevance(Interval(day, datetime.fromtimestamp(stamp + DAY - 1)), hint, lam=lam)
            return days[stamp]

        out = np.zeros(n)
        for i, t in enumerate(index.turns):
            if inside[i]:
                out[i] = 1.0
            elif t.timestamp is not None:
                out[i] = day_relevance(t.timestamp)
        for row, stamp in zip(event_rows.tolist(), event_ts.tolist(), strict=True):
            if not inside[row]:
                out[row] = max(out[row], day_relevance(datetime.fromtimestamp(stamp)))
        index.remember(key, out)
    return index.memo[key]


def window_rows(index: MemoryIndex, hint: Interval | None, scores: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` best-scored turn rows inside the windows the hint selects (:func:`window_of_turn`), best first.

    A window can hold few turns (a day), and their match with the question can be weaker than that of many
    turns said at other times; these are the window's own evidence, which the light lookup adds to the
    candidates and the packer puts first (:func:`memstrata.memory.search.selection.window_first`).
    """
    if hint is None or k <= 0 or not len(scores):
        return np.zeros(0, dtype=int)
    inside = np.flatnonzero(window_of_turn(index, hint) >= 0)
    return inside[np.argsort(-scores[inside], kind="stable")[:k]]


def window_of_turn(index: MemoryIndex, hint: Interval | None) -> np.ndarray:
    """Per turn row: the position in :func:`select_windows` of the first window holding one of its days (when it
    was said, or a date its facts resolved), else -1. Scoring and the evidence tags both read it.
    """
    if hint is None:
        return np.full(len(index.turns), -1)
    key = f"tree\x1fwindow_of_turn\x1f{hint.start.isoformat()}\x1f{hint.end.isoformat()}"
    if key not in index.memo:
        ts = index.ts_seconds
        event_rows, event_ts = turn_event_times(index)
        holder = np.full(len(index.turns), -1)
        windows = select_windows(index, hint)
        for j in reversed(range(len(windows))):  # the first window holding a turn is written last
            start, end = windows[j].start.timestamp(), windows[j].end.timestamp()
            holder[(ts >= start) & (ts <= end)] = j
            holder[event_rows[(event_ts >= start) & (event_ts <= end)]] = j
        index.remember(key, holder)
    return index.memo[key]


def turn_event_times(index: MemoryIndex) -> tuple[np.ndarray, np.ndarray]:
    """(turn row, time in seconds) pairs of the dates facts resolved from relative phrases, once per snapshot."""
    key = "tree\x1fevent_times"
    if key not in index.memo:
        facts = index.events.get(FACT_KIND)
        pairs = [
            (row, when.timestamp())
            for unit, rows in zip(facts.units if facts else [], facts.turn_rows if facts else [], strict=True)
            if (when := getattr(unit, "event_date", None)) is not None
            for row in rows
        ]
        index.remember(key, (np.array([r for r, _ in pairs], dtype=int), np.array([w for _, w in pairs], dtype=float)))
    return index.memo[key]


def anchor_time(index: MemoryIndex, phrase: str) -> datetime | None:
    """When the event a hint is anchored on happened: the absolute date of the best-matching fact when it
    names one ("I ran it two weeks ago" said on 14 April is 31 March), else the time of the best-matching
    event summary (BM25 over each kind).
    """
    tokens = tokenize([phrase])[0]
    for kind, field in ((FACT_KIND, "event_date"), (SUMMARY_KIND, "timestamp")):
        table = index.events.get(kind)
        if table is None or not len(table) or table.bm25 is None or not tokens:
            continue
        scores = table.bm25.scores(tokens)
        best = int(np.argmax(scores))
        when = getattr(table.units[best], field, None) if scores[best] > 0 else None
        if when is not None:
            return when
    return None


def with_anchor(
    rule: tuple[Scope, Interval | None], index: MemoryIndex, text: str, *, now: datetime | None
) -> tuple[Scope, Interval | None]:
    """A rule-based (scope, hint), with the hint of an event-anchored phrase ("the weekend before the
    concert") dated through the memory when the rules found none; a dated hint makes the scope Short.
    """
    _, hint = rule
    if hint is not None:
        return rule
    parsed = parse_hint(text, now=now)
    found = resolve(parsed, lambda anchor: anchor_time(index, anchor)) if parsed is not None else None
    return ("Short", found) if found is not None else rule


def tag_hits(index: MemoryIndex, query: Query, hits: Sequence[Hit]) -> list[Hit]:
    """Each hit with the query's scope and the window that led to it: the hint's window holding it, else the
    tree node that reached it (``found_by="tree_node"``, which set it), else none.
    """
    windows = select_windows(index, query.hint)
    holder = window_of_turn(index, query.hint)
    out = []
    for hit in hits:
        row = index.by_key.get((hit.conversation_id, hit.unit_id))
        if row is not None and holder[row] >= 0:
            window = windows[holder[row]].describe()
        elif hit.found_by == TREE_NODE.kind:
            window = hit.window
        else:
            window = ""
        same = hit.scope == query.scope and hit.window == window
        out.append(hit if same else hit.with_(scope=query.scope, window=window))
    return out


def node_window(unit: Any) -> str:
    """``"<level> <window>"`` of a tree node (``"month 2023-05"``); empty for any other unit."""
    return f"{unit.level} {unit.window}" if isinstance(unit, TreeNode) else ""


def reinforcement_current(index: MemoryIndex, counters: Any, user_id: str, *, kind: str = SUMMARY_KIND) -> bool:
    """Whether the snapshot's copy of the ``kind`` units' n_m and r_m is up to date with this process's counter
    writes.
    """
    held = index.held.get(_held_key(kind))
    return held is not None and held.stamp == counters.reinforcements.get(user_id, {})


def _held_key(kind: str) -> str:
    return _REINFORCEMENT if kind == SUMMARY_KIND else f"{_REINFORCEMENT}\x1f{kind}"


def load_reinforcement(
    index: MemoryIndex, counters: Any, user_id: str, conversation_id: str | None = None, *, kind: str = SUMMARY_KIND
) -> None:
    """Read the n_m and r_m of the units of ``kind`` from the counters store into the snapshot: the event
    summaries' (the tree's leaves, for :func:`turn_robustness`), or the tree nodes' (for :func:`event_robustness`).

    Kept through in-place updates (``index.held``): after this process's writes only the conversations
    whose reinforcement moved are read again (``CounterStore.reinforcements``). A snapshot rebuilt
    after another process's writes starts empty and reads everything; reading the counters never
    invalidates the snapshot. A bounded snapshot (``index.bounded``) reads the counters of the summaries it
    holds, by key, not the user's every summary (17,495 of them at 100k turns, read twice a question).
    """

    def read(conv: str | None) -> dict[str, dict[str, tuple[int, float | None]]]:
        """Conversation -> unit id -> (n_m, r_m), for one conversation or (``None``) every one."""
        if index.bounded is None:
            found = counters.all(user_id, kind=kind, conversation_id=conv)
        else:  # a bounded snapshot holds a few hundred of a large user's units of the kind: read those by key
            table = index.events.get(kind)
            found = (
                list(
                    counters.get(
                        user_id,
                        [(u.conversation_id, kind, u.id) for u in table.units if conv in (None, u.conversation_id)],
                    ).values()
                )
                if table
                else []
            )
        out: dict[str, dict[str, tuple[int, float | None]]] = {}
        for c in found:
            out.setdefault(c.conversation_id, {})[c.unit_id] = (c.reinforcement_count, c.reinforced_at)
        return out

    with index.lock:  # one query at a time updates what the snapshot holds
        stamp = counters.reinforcements.get(user_id, {})
        held = index.held.get(_held_key(kind))
        if held is None:
            index.held[_held_key(kind)] = PerConversation.read(stamp, read, scope=conversation_id)
        elif (changed := held.refresh(stamp, read, scope=conversation_id)) is None or changed:
            held.version += 1  # moved, or read again whole (None): what was computed from the counts is stale


def turn_robustness(index: MemoryIndex, now: datetime | None, *, tau_days: float, eta: float) -> np.ndarray:
    """H-Mem Eq. 2 per turn: ``exp(-(t - r) / (tau (1 + eta ln(1 + n))))`` with the best (n, r) of the event
    summaries holding the turn (r at memory time; never earlier than the turn's own time); 1.0 where untimed.
    """
    n_turns = len(index.turns)
    if now is None:
        return np.ones(n_turns)
    held = index.held.get(_REINFORCEMENT)
    key = f"tree\x1frobustness\x1f{now.isoformat()}\x1f{tau_days}\x1f{eta}\x1f{held.version if held else -1}"
    if key not in index.memo:
        index.remember(key, _robustness(index, now, tau_days, eta))
    return index.memo[key]


def _reinforced_turns(index: MemoryIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per turn row: the best n_m among the summaries holding it, and the latest r_m (else its own time)."""
    counts = np.zeros(len(index.turns))
    last = index.ts_seconds.copy()
    held = index.held.get(_REINFORCEMENT)
    summaries = index.events.get(SUMMARY_KIND)
    if held is None or summaries is None:
        return counts, last
    rows, ns, ats = [], [], []
    for row, n, at in _reinforced_rows(held, summaries.units):
        turn_rows = summaries.turn_rows[row]
        rows += turn_rows
        ns += [n] * len(turn_rows)
        ats += [at] * len(turn_rows)
    if rows:
        np.maximum.at(counts, rows, ns)
        np.fmax.at(last, rows, ats)
    return counts, last


def _robustness(index: MemoryIndex, now: datetime, tau_days: float, eta: float) -> np.ndarray:
    counts, last = _reinforced_turns(index)
    return robustness_array(last, now, tau_days=tau_days, eta=eta, reinforcements=counts)


def event_relevance(index: MemoryIndex, kind: str, hint: Interval | None, lam: float) -> np.ndarray:
    """Per unit of an event kind: H-Mem Eq. 1 between its time window (:func:`unit_window`) and the hint; 0
    without a hint, and for a unit without a time.
    """
    if hint is None:
        return np.zeros(len(index.events[kind]))
    starts, ends = _unit_windows(index, kind)
    return temporal_relevance_array(starts, ends, hint, lam=lam)


def unit_window(unit: Any) -> tuple[float, float]:
    """A unit's time as the tree windows it, in epoch seconds: a tree node's own window (its week, month or
    year), else the whole days its span covers (a summary's session day, a fact's event date or the day it was
    said: H-Mem's leaves sit in day windows); ``(nan, nan)`` without a time.
    """
    if isinstance(unit, TreeNode) and window_level(unit.window) is not None:
        start, end = window_span(unit.window)
        return start.timestamp(), end.timestamp()
    first, last = unit.span()
    if first is None:
        return np.nan, np.nan
    first, last = min(first, last or first), max(first, last or first)
    return window_span(window_key("day", first))[0].timestamp(), window_span(window_key("day", last))[1].timestamp()


def _unit_windows(index: MemoryIndex, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Every unit's :func:`unit_window` as two arrays, once per snapshot (and per unit through writes)."""
    key = f"tree\x1funit_windows\x1f{kind}"
    if key not in index.memo:
        spans = np.array(index.events[kind].column("time_window", unit_window), dtype=float).reshape(-1, 2)
        index.remember(key, (spans[:, 0], spans[:, 1]))
    return index.memo[key]


def event_robustness(index: MemoryIndex, kind: str, now: datetime | None, *, tau_days: float, eta: float) -> np.ndarray:
    """H-Mem Eq. 2 per unit of an event kind: with the unit's own n_m and r_m where the snapshot holds them
    (:func:`load_reinforcement` of its kind: summaries, tree nodes; r_m never earlier than the unit's time), else
    n_m = 0 and the unit's time (when it was said or consolidated, not a date it names); 1.0 where untimed.
    """
    if now is None:
        return np.ones(len(index.events[kind]))
    counts, last = _reinforced_units(index, kind)
    return robustness_array(last, now, tau_days=tau_days, eta=eta, reinforcements=counts)


def _reinforced_units(index: MemoryIndex, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Per unit of ``kind``: its n_m and its latest time (r_m, else its own), once per snapshot and counters."""
    held = index.held.get(_held_key(kind))
    key = f"tree\x1freinforced_units\x1f{kind}\x1f{held.version if held else -1}"
    if key not in index.memo:
        table = index.events[kind]
        last = np.array(table.column("time_seconds", _seconds), dtype=float)
        counts = np.zeros(len(table))
        found = _reinforced_rows(held, table.units) if held is not None else []
        if found:
            rows = np.array([row for row, _, _ in found], dtype=int)
            counts[rows] = [n for _, n, _ in found]
            last[rows] = np.fmax(last[rows], [at for _, _, at in found])
        index.remember(key, (counts, last))
    return index.memo[key]


def _reinforced_rows(held: PerConversation, units: Sequence[Any]) -> list[tuple[int, int, float]]:
    """(row, n_m, r_m in epoch seconds) of each unit the counters saw consolidated (n_m > 0); r_m is NaN for an
    untimed consolidation (stored as 0 or None).
    """
    out = []
    for row, unit in enumerate(units):
        n, at = held.parts.get(unit.conversation_id, {}).get(unit.id, (0, None))
        if n:
            out.append((row, n, at or np.nan))
    return out


def _seconds(unit: Any) -> float:
    return unit.timestamp.timestamp() if unit.timestamp is not None else np.nan
