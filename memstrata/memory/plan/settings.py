"""The retrieval loop's tuning: planning, the light module and its gate, the deep module, the follow-up, reflection and
packing.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.retrieval``): pass it whole, or as a dict of
the fields to change (``retrieval={"sub_query_weight": ...}``); a field's description is what LangGraph Studio shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class RetrievalSettings:
    """The retrieval loop's tuning: planning, the light module and its gate, the deep module, the follow-up, reflection
    and packing.
    """

    sub_query_weight: Annotated[float, setting("score weight of a sub-query relative to the original")] = 0.95
    scope_kinds: Annotated[
        dict[str, list[str]] | None,
        setting("scope -> unit kinds it searches directly; default: each kind's declared scopes"),
    ] = None
    level1_rank: Annotated[
        Literal["own", "turns", "fused"],
        setting(
            "how the light module orders summaries: by their own text match, by their best linked raw turn, or "
            "both fused by rank"
        ),
    ] = "fused"
    direct_turns: Annotated[
        int,
        setting("raw turns a Short or Mixed query reads directly, besides those reached through events"),
    ] = 30
    window_turns: Annotated[
        int,
        setting(
            "for a query whose time hint selects tree windows: its best turns inside them, which join the "
            "candidates and enter the context first (H-Mem: evidence inside the window is preferred; 0 leaves it "
            "to the temporal score)"
        ),
    ] = 3
    window_widths: Annotated[
        tuple[int, ...],
        setting("neighbours each side of the BM25 window views of a turn"),
    ] = (0, 1, 2, 4, 8)
    gate_threshold: Annotated[
        float,
        setting("offline: the best light turn's own similarity (0-1) needed to stay on the light path"),
    ] = 0.55
    gate_coverage: Annotated[
        float,
        setting("offline: share of the question's words the light evidence must cover"),
    ] = 0.999
    gate_texts: Annotated[int, setting("offline: best light turns whose words count for coverage")] = 15
    light_check: Annotated[
        Literal["streamed", "structured"],
        setting(
            "with a model and an answer to write: 'streamed' makes the light self-check and the light answer one "
            "streamed call, which ends the query; 'structured' is HyMem's Algorithm 1 as published (a structured "
            "verdict whose light answer reflection grades)"
        ),
    ] = "streamed"
    llm_batch_size: Annotated[int, setting("Level-1 entries per parallel LLM selection branch (HyMem d)")] = 10
    select_fallback: Annotated[int, setting("entries a failed LLM selection keeps from its batch")] = 3
    selection_priority: Annotated[
        float,
        setting(
            "with a model: score added to the turns of the episodes it selected, so they enter the context first "
            "(0 ranks by score alone)"
        ),
    ] = 1.0
    backtrack_raw_top: Annotated[int, setting("best raw turns per query added to the backtracked ones")] = 60
    backtrack_keep: Annotated[int, setting("candidates kept per query, at least")] = 120
    backtrack_keep_per_token: Annotated[
        float,
        setting("candidates kept per token of context budget, when that is more"),
    ] = 0.125
    duplicate_threshold: Annotated[
        float,
        setting("cosine above which a lower-ranked turn counts as a near-duplicate and is skipped"),
    ] = 0.95
    follow_up_weight: Annotated[float, setting("score weight of the missing-info query")] = 0.9
    follow_up_texts: Annotated[int, setting("best candidates the missing-info check reads")] = 10
    follow_up_turns: Annotated[int, setting("raw turns the missing-info query adds")] = 10
    follow_up_evidence: Annotated[int, setting("best candidates a sub-query's reasoning branch carries")] = 80
    anchor_names: Annotated[
        int,
        setting(
            "offline: names and places of the best evidence a missing-info query or a dependent rewrite is "
            "anchored on, at most"
        ),
    ] = 4
    anchor_hits: Annotated[
        int,
        setting("offline: best evidence whose names anchor a missing-info query or a dependent sub-query's rewrite"),
    ] = 3
    reason_tokens: Annotated[
        int,
        setting("with a model: evidence tokens each sub-query's answer and missing-info call reads"),
    ] = 800
    reflect_coverage: Annotated[
        float,
        setting(
            "offline: share of a sub-query's words the evidence must cover to count as answered; below it a "
            "rewrite round runs (it comes after the follow-up has already searched for the missing words, so it "
            "is kept for evidence that misses much of the question)"
        ),
    ] = 0.6
    reflect_texts: Annotated[int, setting("offline: best candidates the coverage check reads")] = 20
    rewrite_terms: Annotated[
        int,
        setting("offline: feedback terms from the evidence a rewrite adds to an uncovered sub-query"),
    ] = 4
    rewrite_decay: Annotated[float, setting("score weight of a rewrite, to the power of its round")] = 0.9
    diversity: Annotated[
        float,
        setting("MMR penalty on turns similar to ones already ranked; 0 ranks by score alone"),
    ] = 0.15
    mmr_head: Annotated[int, setting("candidates MMR looks at")] = 300
    mmr_tokens_per_pick: Annotated[
        int,
        setting("MMR reorders context_budget / this many slots (a turn costs about 20 tokens at least)"),
    ] = 20

    def __post_init__(self) -> None:
        object.__setattr__(self, "window_widths", tuple(self.window_widths))  # JSON sends a list
        if self.llm_batch_size < 1:
            msg = f"Context.retrieval.llm_batch_size must be >= 1, got {self.llm_batch_size}"
            raise ValueError(msg)
