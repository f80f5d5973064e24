"""Mechanisms kept for ablation, off by default: each is measured on and off in BENCHMARKS.md's Mechanisms section.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.experimental``): pass it whole, or as a
dict of
the fields to change (``experimental={"theme_stage2": ...}``); a field's description is what LangGraph Studio shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class Experimental:
    """Mechanisms kept for ablation, off by default: each is measured on and off in BENCHMARKS.md's Mechanisms
    section.
    """

    theme_stage2: Annotated[
        bool,
        setting(
            "Stage II: from the picked themes' lines (the coarse context), admit the picked facts' episodes, in "
            "order of support, only while they lower the uncertainty: with a model, the reader's own (one self- "
            "check on the themes, then one per episode offered); offline, a proxy (the share of the query's words "
            "neither the themes nor an admitted episode says)"
        ),
    ] = False
    theme_stage2_expand: Annotated[
        bool,
        setting(
            "xMemory Stage II: an admitted episode's other messages join it only when they lower the uncertainty "
            "further (with a model one more self-check each; offline the proxy)"
        ),
    ] = False
    theme_joint_k: Annotated[
        int,
        setting(
            "with k > 0, Bi-Mem's Eq. 9: the k best facts, themes and persona dimensions ranked together (half "
            "cosine, half BM25) replace the separate theme and fact-seed rankings; its facts are admitted, evoke "
            "their themes, and its best persona dimension is the one the persona path takes; 0 keeps them apart"
        ),
    ] = 0
    scene_lines: Annotated[
        int,
        setting(
            "reader: the themes (Bi-Mem's scenes) the theme path picked that the context opens with, one cited "
            "line each, at most (Bi-Mem's Eq. 11: the reader gets the retrieved scenes); 0: none, the context is "
            "turns"
        ),
    ] = 0
    graph_profile_facts: Annotated[
        int,
        setting(
            "H-Mem's entity profiles in retrieval: up to this many facts of each named entity's profile (its "
            "attributes, then its recent events, best match first) take the first of the graph_facts slots; 0: "
            "unused"
        ),
    ] = 0
    graph_tree_walk: Annotated[
        bool,
        setting(
            "H-Mem §3.3: from the leaf summaries the graph reaches, walk up the temporal tree; their week, month "
            "and year nodes join the deep module's coarse pool"
        ),
    ] = False
