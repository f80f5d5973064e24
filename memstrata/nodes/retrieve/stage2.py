"""Retrieval: xMemory's Stage II at the lookup, the reader's stated confidence deciding which theme episodes stay and
which admitted episodes are expanded to their other turns.

The theme path (:mod:`memstrata.memory.search.themes`) brings the turns of the facts Stage I chose, and the themes
it picked. The coarse context is those themes' lines (:func:`~memstrata.memory.search.scenes.scene_lines`), whether
or not the reader's context opens with them (``Context.experimental.scene_lines``).

With a model and ``experimental.theme_stage2`` on, the reader makes self-checks (:class:`SelfCheck`: how sure it is
that the
lines shown could answer the question). The uncertainty is 1 - that stated confidence: xMemory measures the reader's
predictive entropy from its output probabilities, which a chat model's API does not give, so a stated confidence
stands in for it. The first check is on the coarse lines alone; then the episodes are offered in order of support,
each with one check on the lines admitted so far plus its turns, and admitted only when it lowers the uncertainty
below the best so far; after ``themes.patience`` episodes in a row that lower nothing, or at 0, the stage stops
(:class:`~memstrata.memory.themes.select.UncertaintyGate`). With ``experimental.theme_stage2_expand``, right after an
episode
is admitted, its other turns (:func:`~memstrata.memory.search.themes.episode_rest`) are offered as one expansion:
one more check on the lines with the whole episode, and they join only when it is lower than after the admission
(a refused expansion does not count towards early stopping). Every check, the coarse one and the expansions'
included, takes one of the ``themes.stage2_checks``; the stage stops when they are spent, or when the query's token
budget skips a check. A check that fails falls back to the offline proxy: the share of the query's words the lines
leave unsaid. The theme turns of episodes not admitted leave the candidates; turns other paths found stay.

Offline the theme path admits the episodes itself (its proxy, from the same coarse start); with
``experimental.theme_stage2_expand`` this step then offers each admitted episode's other turns, in order of support,
judged by
the proxy on the coarse lines, the admitted episodes and the expansions joined so far (free, so no check budget: one
offer per admitted episode). Without expansion this step does nothing offline. A model that ``llm_depth`` leaves no
room for the checks makes this step offline too, but the theme path, built for a reader, then ran no proxy: every
theme episode counts as admitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from memstrata.memory.index import MemoryIndex, tokenize
from memstrata.memory.query import Hit
from memstrata.memory.search.scenes import scene_lines
from memstrata.memory.search.themes import THEME_FINDERS, episode_rest, episode_rounds
from memstrata.memory.themes.select import UncertaintyGate, unsaid
from memstrata.runtime.llm import GOOD_OUTCOMES
from memstrata.runtime.step import Step


class SelfCheck(BaseModel):
    """The reader's confidence that the lines answer the question."""

    confidence: float = Field(ge=0.0, le=1.0, description="0 = the lines say nothing useful, 1 = they state the answer")


def _unsaid(question: str, lines: list[str]) -> float:
    """The offline proxy: the share of the question's words the lines do not say (1.0 for a wordless question)."""
    return unsaid(set(tokenize([question])[0]), set(tokenize([" ".join(lines)])[0]))


def _lines(hits: list[Hit]) -> list[str]:
    """Turns as the reader is shown them, in order, each once."""
    ordered = {h.unit_id: h for h in sorted(hits, key=lambda h: (h.session_id, h.position))}
    return [f"[{h.time}] {h.text}" if h.time else h.text for h in ordered.values()]


@dataclass
class _Reading:
    """One Stage II run: the lines the uncertainty is measured on, the gate, and the reader's checks spent."""

    step: Step
    question: str
    lines: list[str]  # the coarse lines, then the admitted episodes' (and joined expansions')
    checks: int = 0
    fallbacks: int = 0
    admitted: int = 0
    halted: bool = False  # the query's token budget skipped a check: no more are made
    expanded: list[dict[str, Any]] = field(default_factory=list)
    gate: UncertaintyGate = field(init=False)

    def __post_init__(self) -> None:
        self.gate = UncertaintyGate(1.0, patience=self.step.ctx.themes.patience)

    @property
    def judged(self) -> bool:
        """Whether the reader admits the episodes (a model); offline the theme path admitted them already."""
        return self.step.model is not None

    @property
    def spent(self) -> bool:
        """No check is left: the query's budget skipped one, or ``themes.stage2_checks`` are made (offline the proxy
        is free: never).
        """
        return self.judged and (self.halted or self.checks >= self.step.ctx.themes.stage2_checks)

    async def start(self) -> float | None:
        """The coarse lines' own uncertainty, where the gate starts (``None`` without coarse lines: from 1.0)."""
        if not self.lines:
            return None
        start = await self.doubt(self.lines)
        self.gate = UncertaintyGate(start, patience=self.gate.patience)
        return start

    async def doubt(self, shown: list[str]) -> float:
        """The uncertainty on ``shown``: 1 - the reader's stated confidence (one check), offline the proxy."""
        if not self.judged:
            return _unsaid(self.question, shown)
        check, how = await _self_check(self.step, self.question, shown)
        self.checks += 1
        self.fallbacks += how not in GOOD_OUTCOMES
        self.halted = how == "skipped_budget"
        return 1.0 - check.confidence

    async def admit(self, hits: list[Hit]) -> bool:
        """Whether the episode of ``hits`` is admitted: when it lowers the reader's doubt; offline always (the proxy
        only follows what its lines add, which never raises it).
        """
        shown = [*self.lines, *_lines(hits)]
        doubt = await self.doubt(shown)
        if not self.judged:
            self.gate.refine(doubt)
        elif not self.gate.offer(doubt):
            return False
        self.lines, self.admitted = shown, self.admitted + 1
        return True

    async def expand(self, episode: str, before: list[str], hits: list[Hit], rest: list[Hit]) -> bool:
        """Whether the just admitted episode's other turns ``rest`` join it (``before``: the lines without it).
        Nothing is offered when nothing is left to lower or no check is.
        """
        if not rest or self.gate.uncertainty <= 0 or self.spent:
            return False
        admitted, whole = self.gate.uncertainty, [*before, *_lines([*hits, *rest])]
        doubt = await self.doubt(whole)
        joined = self.gate.refine(doubt)
        if joined:
            self.lines = whole
        self.expanded.append(
            {
                "episode": f"{hits[0].conversation_id}/{episode}",
                "turns": [h.unit_id for h in rest],
                "admitted": round(admitted, 3),  # the uncertainty after the episode's admission
                "expanded": round(doubt, 3),  # with its other turns too
                "joined": joined,
            }
        )
        return joined

    def trace(self, *, start: float | None, offered: int, removed: int, added: int) -> dict[str, Any]:
        """The step's trace event."""
        return {
            "offered": offered,
            "checked": self.checks,
            "admitted": self.admitted,
            "fallbacks": self.fallbacks,
            "uncertainty_left": round(self.gate.uncertainty, 3),
            "coarse_uncertainty": None if start is None else round(start, 3),  # None: no themes, started at 1.0
            "removed": removed,
            "measure": (
                "reader self-check: 1 - confidence (a failed check: the share of the query's words unsaid)"
                if self.judged
                else "offline proxy: the share of the query's words the lines leave unsaid"
            ),
            **({"expanded": self.expanded, "added": added} if self.step.ctx.experimental.theme_stage2_expand else {}),
        }


async def reader_stage2(
    step: Step, index: MemoryIndex, question: str, turns: list[Hit], *, scenes: list[list[str]] | None = None
) -> tuple[list[Hit], dict[str, Any] | None]:
    """The candidate turns with the theme turns of the episodes not admitted removed and the expansions that joined
    added, and the trace event (``None`` when the step does not run: Stage II off, no theme turns, or offline
    without expansion).

    ``scenes`` are the ``[conversation_id, theme id]`` the theme path picked: their lines are the coarse context the
    uncertainty starts from (1.0 when there are none).
    """
    ctx = step.ctx
    if not ctx.experimental.theme_stage2 or (step.model is None and not ctx.experimental.theme_stage2_expand):
        return turns, None
    offers = episode_rounds(index, turns)
    if not offers:
        return turns, None
    reading = _Reading(step, question, [scene.line() for scene in scene_lines(index, scenes or [])])
    start = await reading.start()
    keep: set[int] = set()
    added: list[Hit] = []
    for episode, hits in offers:
        if reading.judged and (reading.gate.done or reading.spent):
            break  # offline every episode was admitted by the theme path: each keeps its turns
        before = reading.lines
        if not await reading.admit(hits):
            continue
        keep.update(id(h) for h in hits)
        rest = episode_rest(index, episode, hits) if ctx.experimental.theme_stage2_expand else []
        if await reading.expand(episode, before, hits, rest):
            added += rest
    kept = [h for h in turns if h.found_by not in THEME_FINDERS or id(h) in keep]
    event = reading.trace(start=start, offered=len(offers), removed=len(turns) - len(kept), added=len(added))
    return [*kept, *added], event


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
