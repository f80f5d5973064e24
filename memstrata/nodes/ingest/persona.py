"""Ingestion: each speaker's persona (Bi-Mem §4.1: with a model its Eq. 7, offline a stand-in from the facts' cues)
and, with a model, the scenes' calibration (§4.2.2, Eq. 8).

Runs after the themes, for every conversation with newly closed episodes (and any with themes but no persona yet).
A speaker's persona is stale when the facts it was built from changed (a new closed fact, a fact superseded, an item
a user removed): then it is rebuilt, offline from the facts' cues, centrality and recurrence, or with a model from
the speaker's scenes and facts (at most ``Context.persona.llm_calls`` speakers per ingest; a failed call, or a draft
with no statement, leaves the offline items). Each dimension whose items changed gets a new version; the old one
stays as history (:mod:`memstrata.memory.persona.versions`). With a model, scenes whose present form was not checked
yet are
calibrated against their speaker's persona (at most ``Context.persona.calibrations_per_episode`` per newly closed
episode and ``Context.persona.calibrations`` per ingest; the others stay due for later writes); offline there is no
calibration. With a model the persona is rebuilt when a fact a current item cites stops being current, or once the
speaker's current facts have grown by ``Context.persona.llm_growth`` since the last model build (so a chat's
model calls per message do not grow with its length); offline it is rebuilt whenever its facts change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langgraph.runtime import Runtime

from memstrata.context import Context
from memstrata.memory.levels import DIMENSIONS, Fact, Persona, PersonaItem, Theme
from memstrata.memory.persona.calibrate import Calibrations, appended, checks_block, chunks, due_scenes
from memstrata.memory.persona.distill import (
    PersonaDraft,
    basis,
    check_draft,
    llm_items,
    offered_facts,
    offline_dimensions,
    speaker_facts,
)
from memstrata.memory.persona.versions import successor, valid_at
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.held_facts import speakers as held_speakers
from memstrata.memory.store.reads import closed_facts
from memstrata.nodes.common import conversations_to_redo, per_write, progress
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.node import open_node
from memstrata.runtime.step import Step
from memstrata.state import IngestState


@dataclass
class Sources:
    """What one conversation's personas are built from."""

    facts: list[Fact]
    x: np.ndarray
    speakers: list[str]
    themes: list[Theme]
    theme_vectors: dict[str, list[float]]
    versions: dict[tuple[str, str], list[Persona]] = field(default_factory=dict)  # (speaker, dimension) -> all


async def distill_persona(state: IngestState, runtime: Runtime[Context]) -> dict[str, Any]:
    """Rebuild the stale personas of every touched conversation; with a model, calibrate their scenes."""
    started = time.perf_counter()
    run = await open_node(runtime, "distill_persona", ingest=True)
    ctx, store, step = run.ctx, run.store, run.step
    touched, missing = await conversations_to_redo(state, store, ctx.user_id, _without_persona)
    calls = {
        "distill": ctx.persona.llm_calls if step.model is not None else 0,
        "calibrate": per_write(state, ctx.persona.calibrations_per_episode, ctx.persona.calibrations)
        if step.model is not None
        else 0,
    }
    totals = {
        "persona_speakers": 0,
        "persona_rebuilt": 0,
        "persona_versions": 0,
        "persona_llm": 0,
        "scenes_checked": 0,
        "scenes_calibrated": 0,
    }
    cues: np.ndarray | None = None
    for conv_id in [*touched, *missing]:
        src = await asyncio.to_thread(_sources, store, ctx.user_id, conv_id)
        if not src.facts:
            continue
        if cues is None:
            cues = np.asarray(
                await asyncio.to_thread(store.encoded.embed, list(ctx.persona.cues))
            )  # held after the first
        written: list[Persona] = []
        for speaker in src.speakers:
            written += await _speaker(step, ctx, conv_id, speaker, src, cues, calls, totals)
        if written:
            await asyncio.to_thread(_write_personas, store, written)
            for p in written:  # the scenes below are checked against what was just written
                src.versions[(p.speaker, p.dimension)] = [
                    *[v for v in src.versions.get((p.speaker, p.dimension), []) if v.id != p.id],
                    p,
                ]
        calibrated = await _calibrate(step, ctx, src, calls, totals)
        if calibrated:
            await asyncio.to_thread(_write_themes, store, calibrated, src.theme_vectors)
    progress(
        "persona",
        f"{totals['persona_rebuilt']} personas rebuilt, {totals['persona_versions']} versions written",
        **totals,
    )
    stats: dict[str, Any] = {
        **totals,
        "calibration": "with the model" if step.model is not None else "offline: no calibration",
        "stage_seconds": {"persona": round(time.perf_counter() - started, 3)},
    }
    if step.model is not None and step.meter.calls:
        stats["llm"] = {"persona": step.meter.summary()}
    return {"stats": stats}


def _without_persona(store: MemoryStore, user_id: str, conversations: list[str]) -> list[str]:
    """Conversations with themes but no persona (written before personas, or stopped before them)."""
    return [
        c
        for c in conversations
        if store.count("theme", user_id=user_id, conversation_id=c)
        and not store.count("persona", user_id=user_id, conversation_id=c)
    ]


def _sources(store: MemoryStore, user_id: str, conv_id: str) -> Sources:
    facts, vectors = closed_facts(store, user_id, conv_id)
    x = np.asarray([vectors[f.id] for f in facts], dtype=float) if facts else np.zeros((0, 1))
    speakers = held_speakers(store, user_id, conv_id)  # held with the facts
    records = store.get("theme", user_id=user_id, conversation_id=conv_id, with_vectors=True)
    themes = [Theme.model_validate(r.payload) for r in records]
    src = Sources(facts, x, speakers, themes, {r.unit_id: r.metadata["_vector"] for r in records})
    for r in store.get("persona", user_id=user_id, conversation_id=conv_id):
        p = Persona.model_validate(r.payload)
        src.versions.setdefault((p.speaker, p.dimension), []).append(p)
    return src


async def _speaker(
    step: Step,
    ctx: Context,
    conv_id: str,
    speaker: str,
    src: Sources,
    cues: np.ndarray,
    calls: dict[str, int],
    totals: dict[str, int],
) -> list[Persona]:
    """The versions to write for one speaker (new ones, and the ones they end), if the persona is stale."""
    rows = speaker_facts(src.facts, speaker)
    mine = [src.facts[i] for i in rows]
    current = {d: valid_at(src.versions.get((speaker, d), []), None) for d in DIMENSIONS}
    excluded = {d: list(p.excluded) if p else [] for d, p in current.items()}
    digest = basis(mine, [f for d in DIMENSIONS for f in excluded[d]])
    held = [p for p in current.values() if p is not None]
    if sum(f.current for f in mine) < ctx.persona.min_facts and not held:
        return []
    totals["persona_speakers"] += 1
    if held and all(p.basis == digest for p in held):
        return []  # fresh: nothing it was built from changed
    by_id = {f.id: f for f in src.facts}
    live = sum(f.current for f in mine)
    if (
        step.model is not None
        and held
        and not _lost_citation(held, by_id)
        and live < ctx.persona.llm_growth * max(p.built_from for p in held)
    ):
        return []  # with a model, wait until the facts have grown enough: a write's cost stays flat
    totals["persona_rebuilt"] += 1
    theme_of = {f: t.id for t in src.themes for f in t.fact_ids}
    items = (
        offline_dimensions(
            mine,
            src.x[rows],
            cues,
            floor=ctx.persona.floor,
            same=ctx.persona.same,
            per_dimension=ctx.persona.items,
            theme_of=theme_of,
        )
        if mine
        else {}
    )
    method = "extractive"
    if calls["distill"] > 0 and mine:
        calls["distill"] -= 1
        drafted = await _draft(step, ctx, speaker, mine, src.x[rows], src.themes, theme_of)
        if drafted is not None:
            items, method = drafted, "llm"
            totals["persona_llm"] += 1
    out: list[Persona] = []
    for d in DIMENSIONS:
        was = current[d]
        kept = [i for i in items.get(d, []) if i.fact_id not in excluded[d]]
        template = Persona(
            user_id=ctx.user_id, conversation_id=conv_id, speaker=speaker, dimension=d, version=1, excluded=excluded[d]
        )
        new, ended = successor(
            was,
            kept,
            basis=digest,
            built_at=changed_at(was, kept, by_id, mine),
            method=method,
            template=template,
        )
        out += [p for p in (ended, new and new.model_copy(update={"built_from": live})) if p is not None]
        totals["persona_versions"] += new is not None and (was is None or new.version > was.version)
    return out


def _lost_citation(held: list[Persona], facts: dict[str, Fact]) -> bool:
    """Whether a current item cites a fact that is gone or no longer current (a knowledge update)."""
    cited = {f for p in held for i in p.items for f in (i.fact_id, *i.fact_ids)}
    return any(f not in facts or not facts[f].current for f in cited)


def changed_at(current: Persona | None, items: list[PersonaItem], facts: dict[str, Fact], mine: list[Fact]) -> Any:
    """When a rebuilt dimension's change happened, in memory time: the latest time among the facts its new items
    cite and the facts that superseded the items it lost; with no such fact, the speaker's latest fact.
    """
    before = {i.fact_id for i in current.items} if current else set()
    now = {i.fact_id for i in items}
    cited = [facts[f] for f in now - before if f in facts]
    lost = [facts[facts[f].superseded_by] for f in before - now if f in facts and facts[f].superseded_by in facts]
    times = [f.valid_from for f in (cited + lost or mine) if f.valid_from is not None]
    return max(times, default=None)


async def _draft(
    step: Step,
    ctx: Context,
    speaker: str,
    facts: list[Fact],
    x: np.ndarray,
    themes: list[Theme],
    theme_of: dict[str, str],
) -> dict[str, list[PersonaItem]] | None:
    """Bi-Mem Eq. 7 with the model: the speaker's scenes and facts in, five dimensions of cited statements out."""
    shown = [facts[i] for i in offered_facts(facts, x, limit=ctx.persona.llm_facts, same=ctx.persona.same)]
    ids = {f.id for f in shown}
    scenes = [t for t in themes if ids & set(t.fact_ids)]
    listing = "\n".join(f"<scene>{t.text}</scene>" for t in scenes)
    facts_block = "\n".join(f'<fact id="{f.id}">{f.text}</fact>' for f in shown)
    draft, how = await step.decide(
        PersonaDraft,
        "PERSONA_PROMPT",
        f"<scenes>\n{listing}\n</scenes>\n<facts>\n{facts_block}\n</facts>",
        node="persona",
        fallback=lambda: PersonaDraft(),
        validate=lambda d: check_draft(d, sorted(ids)),
        speaker=speaker,
    )
    if how not in GOOD_OUTCOMES or not any(getattr(draft, d) for d in DIMENSIONS):
        return None  # a failed call, or a draft that says nothing: the offline items stand
    return llm_items(draft, {f.id: f for f in shown}, per_dimension=ctx.persona.items, theme_of=theme_of)


async def _calibrate(
    step: Step, ctx: Context, src: Sources, calls: dict[str, int], totals: dict[str, int]
) -> list[Theme]:
    """With a model: the scenes not yet checked against their speakers' present persona, each with one more check
    recorded per speaker (and its condition appended when the model found the scene at odds with the persona).
    One call makes up to ``persona.calibration_batch`` checks, of one speaker's scenes or of several speakers'.
    """
    if calls["calibrate"] <= 0:
        return []

    persona = {
        speaker: [p for d in DIMENSIONS if (p := valid_at(src.versions.get((speaker, d), []), None))]
        for speaker in src.speakers
    }
    checked: dict[str, Theme] = {}
    due = due_scenes(src.themes, {f.id: f for f in src.facts}, src.speakers, lambda s: bool(persona[s]))
    profiles = {
        speaker: "\n".join(f"<{p.dimension}>{p.text}</{p.dimension}>" for p in persona[speaker]) for speaker in due
    }
    items = [(speaker, scene) for speaker, scenes in due.items() for scene in scenes]
    for chunk in chunks(items, ctx.persona.calibration_batch):
        if calls["calibrate"] <= 0:
            break
        calls["calibrate"] -= 1
        verdict, how = await step.decide(
            Calibrations, "CALIBRATE_PROMPT", checks_block(chunk, profiles), node="calibrate", fallback=Calibrations
        )
        if how not in GOOD_OUTCOMES:
            continue  # not checked: they stay due for the next write
        said = {c.scene: c for c in reversed(verdict.checks) if 0 <= c.scene < len(chunk)}  # the first per scene
        for i, check in sorted(said.items()):
            speaker, shown = chunk[i]
            scene = checked.get(shown.id, shown)  # a scene of two speakers is checked against both
            condition = check.condition if check.needs_calibration else ""
            totals["scenes_checked"] += 1
            totals["scenes_calibrated"] += bool(condition.strip())
            checked[scene.id] = appended(scene, speaker, persona[speaker][0].basis, condition)
    return list(checked.values())


def _write_personas(store: MemoryStore, units: Sequence[Persona]) -> None:
    store.upsert("persona", list(units), documents=[u.embed_text() for u in units], extra=[u.metadata() for u in units])


def _write_themes(store: MemoryStore, themes: Sequence[Theme], vectors: dict[str, list[float]]) -> None:
    """Calibrated scenes keep their vector (their facts' centroid); only their text and checks change."""
    store.upsert(
        "theme",
        list(themes),
        documents=[t.embed_text() for t in themes],
        vectors=[vectors[t.id] for t in themes],
        extra=[t.metadata() for t in themes],
    )
