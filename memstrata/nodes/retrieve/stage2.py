"""Retrieval: xMemory's Stage II with a model, the reader's stated confidence deciding which theme episodes stay.

The theme path (:mod:`memstrata.memory.search.themes`) brings the turns of the facts Stage I chose. With a model and
``theme_stage2`` on, those turns are offered episode by episode in order of support. For each offer the reader
makes one self-check (:class:`SelfCheck`: how sure it is, from the lines admitted so far plus the offered episode's,
that it could answer). The uncertainty is 1 - that stated confidence: xMemory measures the reader's predictive
entropy from its output probabilities, which a chat model's API does not give, so a stated confidence stands in for
it. With scene lines on (``Context.scene_lines``), the reader's context opens with the picked themes' texts, and the
first check measures the doubt on them alone (xMemory's coarse context); an episode is admitted only when it lowers
that. Without them there is no coarse context: the uncertainty starts at 1.0, so the first episode offered is
admitted. An episode is admitted when it lowers the uncertainty below the best so far; after ``theme_patience``
offers that lower nothing, or ``theme_stage2_checks`` checks, the stage stops
(:class:`~memstrata.memory.themes.select.UncertaintyGate`). A check that fails falls back to the offline proxy: the
share of the query's words the lines leave unsaid. The theme turns of episodes not admitted leave the candidates;
turns other paths found stay.

Offline the proxy runs inside the theme path itself, so this step does nothing.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from memstrata.memory.index import MemoryIndex, tokenize
from memstrata.memory.search.query import Hit
from memstrata.memory.search.scenes import scene_lines
from memstrata.memory.search.themes import THEME_FINDERS, episode_rounds
from memstrata.memory.themes.select import UncertaintyGate, unsaid
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.step import Step


class SelfCheck(BaseModel):
    """The reader's confidence that the lines answer the question."""

    confidence: float = Field(ge=0.0, le=1.0, description="0 = the lines say nothing useful, 1 = they state the answer")


def _unsaid(question: str, lines: list[str]) -> float:
    """The offline proxy: the share of the question's words the lines do not say (1.0 for a wordless question)."""
    return unsaid(set(tokenize([question])[0]), set(tokenize([" ".join(lines)])[0]))


async def reader_stage2(
    step: Step, index: MemoryIndex, question: str, turns: list[Hit], *, scenes: list[list[str]] | None = None
) -> tuple[list[Hit], dict[str, Any] | None]:
    """The candidate turns with the theme turns of the episodes the reader did not admit removed, and the trace
    event (``None`` when the step does not run: offline, Stage II off, or no theme turns).

    ``scenes`` are the ``[conversation_id, theme id]`` the theme path picked. With ``Context.scene_lines`` on, their
    lines (the ones the reader's context opens with) are the coarse context: the first check measures the reader's
    doubt on them alone, and an episode is admitted only when it lowers that; without, the doubt starts at 1.0 and
    the first episode offered is admitted.
    """
    ctx = step.ctx
    offers = episode_rounds(index, turns)
    if step.model is None or not ctx.theme_stage2 or not offers:
        return turns, None
    gate = UncertaintyGate(1.0, patience=ctx.theme_patience)
    admitted: list[str] = []
    keys = (scenes or [])[: ctx.scene_lines] if ctx.scene_lines > 0 else []
    lines: list[str] = [scene.line() for scene in scene_lines(index, keys)]
    checks = fallbacks = 0
    start = None
    if lines:  # the coarse context's own doubt is where the episodes start from
        check, how = await _self_check(step, question, lines)
        checks, fallbacks = 1, int(how not in GOOD_OUTCOMES)
        gate.offer(1.0 - check.confidence)
        start = round(gate.uncertainty, 3)
        if how == "skipped_budget":
            offers = []  # the query's token budget is spent: no episode is checked, none is admitted
    for episode, hits in offers:
        if gate.done or checks >= ctx.theme_stage2_checks:
            break
        offered = [f"[{h.time}] {h.text}" if h.time else h.text for h in sorted(hits, key=lambda h: h.position)]
        shown = [*lines, *offered]
        check, how = await _self_check(step, question, shown)
        checks += 1
        fallbacks += how not in GOOD_OUTCOMES
        if gate.offer(1.0 - check.confidence):
            admitted.append(episode)
            lines = shown
        if how == "skipped_budget":
            break
    keep = {id(h) for episode, hits in offers if episode in admitted for h in hits}
    kept = [h for h in turns if h.found_by not in THEME_FINDERS or id(h) in keep]
    return kept, {
        "offered": len(offers),
        "checked": checks,
        "admitted": len(admitted),
        "fallbacks": fallbacks,
        "uncertainty_left": round(gate.uncertainty, 3),
        "coarse_uncertainty": start,  # None: no coarse context, the doubt started at 1.0
        "removed": len(turns) - len(kept),
        "measure": "reader self-check: 1 - confidence (a failed check: the share of the query's words unsaid)",
    }


async def _self_check(step: Step, question: str, shown: list[str]) -> tuple[SelfCheck, str]:
    """The reader's confidence that ``shown`` answers the question; a failed call falls back to the offline proxy."""

    def fallback() -> SelfCheck:
        return SelfCheck(confidence=1.0 - _unsaid(question, shown))

    return await step.decide(
        SelfCheck,
        "STAGE2_PROMPT",
        f"<question>{question}</question>\n<lines>\n" + "\n".join(shown) + "\n</lines>",
        node="stage2",
        fallback=fallback,
    )
