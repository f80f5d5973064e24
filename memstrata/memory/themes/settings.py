"""xMemory's themes and Bi-Mem's scenes: how they are built, and how the theme path searches them.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.themes``): pass it whole, or as a dict of
the fields to change (``themes={"tau": ...}``); a field's description is what LangGraph Studio shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class ThemeSettings:
    """xMemory's themes and Bi-Mem's scenes: how they are built, and how the theme path searches them."""

    tau: Annotated[
        float,
        setting(
            "the first grouping links two facts whose cosine similarity exceeds this (Bi-Mem Eq. 5; the paper's "
            "0.2 with the same encoder), among each fact's theme_knn nearest"
        ),
    ] = 0.2
    attach: Annotated[
        float,
        setting(
            "a new fact joins the theme whose centroid is most similar if the cosine reaches this, else it starts "
            "a theme (xMemory's attach); the same bar as an edge of the first grouping"
        ),
    ] = 0.2
    cap: Annotated[
        int,
        setting(
            "a theme with more facts is split by the candidate that maximises f(P) (xMemory's cap, its Table 8: 12)"
        ),
    ] = 12
    floor: Annotated[int, setting("a theme with fewer facts is merged into the neighbour that maximises f(P)")] = 2
    scale_floor: Annotated[
        float,
        setting(
            "xMemory Eq. 3's epsilon: the least spread of nearest-theme similarities that counts (with few themes "
            "their median absolute deviation can be nearly 0)"
        ),
    ] = 0.05
    max_steps: Annotated[int, setting("splits and merges of one conversation per ingest, at most")] = 1000
    words: Annotated[int, setting("words of a theme's text, at most")] = 80
    knn: Annotated[
        int,
        setting(
            "similarity edges kept per fact and per theme in the edge store (xMemory's kNN graph), the neighbours "
            "per fact the first grouping propagates over, and the neighbours per candidate of Eq. 4 at query time"
        ),
    ] = 5
    llm_calls: Annotated[
        int,
        setting("with a model: theme summaries put to the model per ingest (the extractive text does the rest)"),
    ] = 40
    llm_per_episode: Annotated[
        int,
        setting(
            "with a model: theme summaries per newly closed episode of the write, at most (a message's cost stays "
            "flat however many themes there are)"
        ),
    ] = 2
    search_k: Annotated[int, setting("best-matching themes a query starts from (0 turns the theme path off)")] = 8
    fact_seeds: Annotated[
        int,
        setting(
            "best-matching facts whose themes join the candidates (Bi-Mem's spreading: a fact evokes its scene; "
            "only with theme_spread > 0 and theme_joint_k 0)"
        ),
    ] = 10
    select: Annotated[
        Literal["eq4", "top"],
        setting(
            "how themes and facts are chosen among the candidates: 'eq4' (xMemory Eq. 4, coverage and relevance "
            "on a kNN graph built among the candidates) or 'top' (best match only)"
        ),
    ] = "top"
    alpha: Annotated[float, setting("xMemory Eq. 4's alpha: the weight of new coverage against relevance")] = 0.5
    coverage: Annotated[float, setting("Eq. 4 stops once its picks cover this share of the candidates")] = 0.8
    pick: Annotated[int, setting("themes Stage I picks per query, at most")] = 8
    fact_pick: Annotated[int, setting("facts Stage I picks per query, at most")] = 24
    spread: Annotated[
        int,
        setting(
            "Bi-Mem's m: a picked theme brings m of its facts (the paper's range 1-3; which ones: "
            "theme_fact_order); 0 turns spreading off (a picked theme offers all its facts, no fact evokes a "
            "theme)"
        ),
    ] = 3
    fact_order: Annotated[
        Literal["query", "scene"],
        setting(
            "which m facts a picked theme brings: 'query' (those that best match the query) or 'scene' (Bi-Mem's "
            "Eq. 10: those nearest the scene's centroid)"
        ),
    ] = "query"
    stage2_checks: Annotated[
        int,
        setting(
            "with a model, Stage II's self-checks per lookup, at most (each is one model call on the query's "
            "budget; the episodes never offered are not admitted)"
        ),
    ] = 4
    share: Annotated[
        float,
        setting(
            "share of the context budget the theme path's admitted turns take first (counted at "
            "mmr_tokens_per_pick a turn; the rest is filled in score order; 0: they only lend a prior and join "
            "the candidates)"
        ),
    ] = 0.0
    patience: Annotated[int, setting("Stage II stops after this many episodes in a row that say nothing new")] = 2
