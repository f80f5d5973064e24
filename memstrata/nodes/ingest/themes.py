"""Ingestion: group each touched conversation's facts into themes (xMemory §3.2, Bi-Mem §4.2.1).

Runs after entity linking, over the facts of closed episodes. A conversation's first grouping is Bi-Mem's
label propagation; later writes attach the new facts and split or merge only the themes they changed,
guided by xMemory's f(P) (:mod:`memstrata.memory.themes`). A theme whose member was superseded since its text
was built is stale and rebuilt too (its old text kept in ``history``). A changed theme's text is its most central
current facts offline; with a model, a summary of them (Bi-Mem's aggregation operator, Eq. 6; at most
``Context.themes.llm_per_episode`` per newly closed episode and ``Context.themes.llm_calls`` per ingest, else the
extractive text), as many themes to a call as the completion cap holds. The kNN graph over facts and
themes is kept in the edge store.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from memstrata.context import Context
from memstrata.memory.levels import Fact, Theme
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.held_facts import rewrite_edges
from memstrata.memory.store.reads import closed_facts, open_episodes
from memstrata.memory.themes.graph import KINDS, graph_changes
from memstrata.memory.themes.maintain import Regrouped, regroup, theme_text
from memstrata.memory.themes.partition import centroids
from memstrata.nodes.common import conversations_to_redo, per_write, progress
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.node import open_node
from memstrata.runtime.step import Step
from memstrata.state import IngestState


class ThemeEntry(BaseModel):
    """The model's entry for one numbered theme."""

    theme: int = Field(description="the theme's number")
    summary: str = Field(description="what the theme is about and the facts it holds, as plain statements")


class ThemeSummaries(BaseModel):
    """The model's entries for the numbered themes of one call."""

    entries: list[ThemeEntry] = Field(default_factory=list)


async def group_themes(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Regroup the facts of every conversation with newly closed episodes; write the changed themes and edges."""
    started = time.perf_counter()
    run = await open_node(runtime, "group_themes", ingest=True)
    ctx, store, step = run.ctx, run.store, run.step
    touched, missing = await conversations_to_redo(state, store, ctx.user_id, _ungrouped)
    # model summaries in proportion to the write; the extractive text does the rest
    calls = {
        "left": per_write(state, ctx.themes.llm_per_episode, ctx.themes.llm_calls) if step.model is not None else 0
    }
    totals = {
        "themes_written": 0,
        "themes_stale": 0,
        "themes_removed": 0,
        "facts_reassigned": 0,
        "facts_placed_before": 0,
    }
    sizes: list[int] = []
    for conv_id in [*touched, *missing]:
        facts, vectors = await asyncio.to_thread(closed_facts, store, ctx.user_id, conv_id)
        stored = await asyncio.to_thread(store.get, "theme", user_id=ctx.user_id, conversation_id=conv_id)
        previous = {f: r.unit_id for r in stored for f in r.payload.get("fact_ids", [])}
        if not facts and not previous:
            continue
        # no closed fact left (an update reopened the only episode): an empty matrix, and every theme goes
        x = np.asarray([vectors[f.id] for f in facts], dtype=float) if facts else np.zeros((0, 1))
        grouped = await asyncio.to_thread(
            regroup,
            [f.id for f in facts],
            x,
            previous,
            tau=ctx.themes.tau,
            attach_at=ctx.themes.attach,
            cap=ctx.themes.cap,
            floor=ctx.themes.floor,
            knn=ctx.themes.knn,
            max_steps=ctx.themes.max_steps,
            eps=ctx.themes.scale_floor,
        )
        before = {r.unit_id: Theme.model_validate(r.payload) for r in stored}
        stale = stale_themes(grouped, before, facts)
        changed = sorted(grouped.changed | stale)
        by_id = {f.id: f for f in facts}
        units = await _summarized(
            step, ctx, [_theme(ctx, conv_id, t, grouped, facts, x) for t in changed], by_id, calls
        )
        units = [_with_history(unit, before.get(t), by_id) for t, unit in zip(changed, units, strict=True)]
        await asyncio.to_thread(_write, store, ctx, conv_id, grouped, units, facts, x)
        totals["themes_written"] += len(units)
        totals["themes_stale"] += len(stale)
        totals["themes_removed"] += len(grouped.removed)
        totals["facts_reassigned"] += grouped.reassigned
        totals["facts_placed_before"] += grouped.placed_before
        sizes += [len(m) for m in grouped.themes.values()]
    progress("themes", f"grouped facts into {len(sizes)} themes ({totals['themes_written']} written)", **totals)
    stats: dict[str, Any] = {
        **totals,
        "themes": _size_stats(sizes),
        "stage_seconds": {"themes": round(time.perf_counter() - started, 3)},
    }
    if step.model is not None and step.meter.calls:  # only nodes that called the model report
        stats["llm"] = {"themes": step.meter.summary()}
    return {"stats": stats}


def _ungrouped(store: MemoryStore, user_id: str, conversations: list[str]) -> list[str]:
    """Conversations with facts of closed episodes but no theme (written before themes, or stopped before them)."""
    out = []
    for conv in conversations:
        if store.count("theme", user_id=user_id, conversation_id=conv):
            continue
        tails = sum(len(r.payload.get("fact_ids", [])) for r in open_episodes(store, user_id, conv))
        if store.count("fact", user_id=user_id, conversation_id=conv) > tails:
            out.append(conv)
    return out


def stale_themes(grouped: Regrouped, before: dict[str, Theme], facts: list[Fact]) -> set[str]:
    """Kept themes whose members did not change but one of them was superseded since the text was built."""
    gone = {f.id for f in facts if not f.current}
    return {
        t
        for t, members in grouped.themes.items()
        if t in before and t not in grouped.changed and set(before[t].superseded_ids) != set(members) & gone
    }


def _theme(
    ctx: Context,
    conv_id: str,
    theme_id: str,
    grouped: Regrouped,
    facts: list[Fact],
    x: np.ndarray,
) -> Theme:
    """One changed or stale theme: its members (current facts first, most central first), its extractive text from
    its current facts and its span. Its history and calibrations are added by :func:`_with_history`.
    """
    row = {f.id: i for i, f in enumerate(facts)}
    members = [facts[row[f]] for f in grouped.themes[theme_id]]
    live = _live(members)
    text, shown = theme_text([f.text for f in live], x[[row[f.id] for f in live]], words=ctx.themes.words)
    first = {live[i].id for i in shown}
    members = [live[i] for i in shown] + [f for f in members if f.id not in first]
    times = sorted(t for f in members if (t := f.span()[0]) is not None)
    return Theme(
        user_id=ctx.user_id,
        conversation_id=conv_id,
        n=int(theme_id.rsplit(":", 1)[1]),
        text=text,
        fact_ids=[f.id for f in members],
        turn_ids=list(dict.fromkeys(t for f in members for t in f.turn_ids)),
        timestamp=times[0] if times else None,
        end=times[-1] if times else None,
        method="extractive",
        superseded_ids=[f.id for f in members if not f.current],
    )


def _with_history(theme: Theme, old: Theme | None, by_id: dict[str, Fact]) -> Theme:
    """``theme`` with the history and calibrations of the theme it replaces, and what that one said appended to the
    history when the text changed.
    """
    if old is None:
        return theme
    theme = theme.model_copy(update={"history": list(old.history), "calibrations": list(old.calibrations)})
    if old.text == theme.text:
        return theme
    newly = [
        by_id[by_id[f].superseded_by]
        for f in theme.fact_ids
        if f in by_id and not by_id[f].current and f not in old.superseded_ids and by_id[f].superseded_by in by_id
    ]
    until = max((f.valid_from for f in newly if f.valid_from is not None), default=theme.end)
    entry = {"text": old.text, "valid_from": _iso(old.end or old.timestamp), "valid_to": _iso(until)}
    return theme.model_copy(update={"history": [*theme.history, entry]})


async def _summarized(
    step: Step, ctx: Context, units: list[Theme], facts: dict[str, Fact], calls: dict[str, int]
) -> list[Theme]:
    """With a model, the first ``calls["left"]`` themes of more than one fact summarized by it, as many to a call as
    ``llm_max_tokens`` holds at ``themes.words`` words each; a theme the reply leaves out keeps its extractive text.
    """
    due = [i for i, t in enumerate(units) if len(t.fact_ids) > 1][: max(0, calls["left"])]
    calls["left"] -= len(due)
    per_call = max(1, ctx.llm_max_tokens // (2 * ctx.themes.words))  # about two tokens a word, with the JSON around
    out = list(units)
    for start in range(0, len(due), per_call):
        chunk = due[start : start + per_call]
        listing = "\n".join(
            f'<theme n="{n}">\n' + "\n".join(f"<fact>{f.text}</fact>" for f in _said(units[i], facts)) + "\n</theme>"
            for n, i in enumerate(chunk)
        )
        value, outcome = await step.decide(
            ThemeSummaries,
            "THEME_PROMPT",
            f"<themes>\n{listing}\n</themes>",
            node="group_themes",
            fallback=ThemeSummaries,
            words=ctx.themes.words,
        )
        if outcome not in GOOD_OUTCOMES:
            continue
        said: dict[int, str] = {}
        for entry in value.entries:  # the first entry of a number stands
            summary = " ".join(entry.summary.split()[: ctx.themes.words])
            if 0 <= entry.theme < len(chunk) and summary:
                said.setdefault(entry.theme, summary)
        for n, summary in said.items():
            out[chunk[n]] = out[chunk[n]].model_copy(update={"text": summary, "method": "llm"})
    return out


def _said(theme: Theme, facts: dict[str, Fact]) -> list[Fact]:
    """The facts a theme's text says (:func:`_live` of its members)."""
    return _live([facts[f] for f in theme.fact_ids if f in facts])


def _live(members: list[Fact]) -> list[Fact]:
    """The current members, or all of them when none is current: a theme of superseded facts only still says them."""
    return [f for f in members if f.current] or members


def _iso(when: Any) -> str | None:
    return when.isoformat() if when is not None else None


def _write(
    store: MemoryStore,
    ctx: Context,
    conv_id: str,
    grouped: Regrouped,
    units: list[Theme],
    facts: list[Fact],
    x: np.ndarray,
) -> None:
    """Changed themes (vector: their centroid), removed themes gone, then the kNN graph brought up to date."""
    ids = [f.id for f in facts]
    where = {f: t for t, members in grouped.themes.items() for f in members}
    labels = [where[f] for f in ids]
    keys, mu = centroids(x, labels) if ids else ([], np.zeros((0, 0)))
    centre = dict(zip(keys, mu, strict=True))
    if units:
        store.upsert(
            "theme",
            units,
            documents=[u.embed_text() for u in units],
            vectors=[centre[u.id].tolist() for u in units],
            extra=[u.metadata() for u in units],
        )
    if grouped.removed:
        store.delete("theme", user_id=ctx.user_id, conversation_id=conv_id, unit_ids=sorted(grouped.removed))
    # the stored graph, held since the last close (closed_facts ran first), diffed where it can differ
    rewrite_edges(
        store,
        ctx.user_id,
        conv_id,
        KINDS,
        lambda stored: graph_changes(conv_id, ids, x, grouped.themes, centre, stored, k=ctx.themes.knn),
    )


def _size_stats(sizes: list[int]) -> dict[str, Any]:
    if not sizes:
        return {"count": 0}
    ordered = sorted(sizes)
    return {
        "count": len(sizes),
        "min": ordered[0],
        "median": ordered[len(ordered) // 2],
        "max": ordered[-1],
        "facts": sum(sizes),
    }
