"""Bi-Mem's persona: its five dimensions, how items are distilled and calibrated, and how retrieval uses them.

One of :class:`~memstrata.context.Context`'s groups of settings (``Context.persona``): pass it whole, or as a dict of
the fields to change (``persona={"cues": ...}``); a field's description is what LangGraph Studio shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from memstrata.memory.setting import setting


@dataclass(frozen=True, kw_only=True)
class PersonaSettings:
    """Bi-Mem's persona: its five dimensions, how items are distilled and calibrated, and how retrieval uses them."""

    cues: Annotated[
        tuple[str, str, str, str, str],
        setting(
            "offline: what each dimension is about (basic_info, interests, personality, values, relationships, in "
            "that order); a speaker's fact joins the dimension whose cue it is nearest"
        ),
    ] = (
        "name, age, job, occupation, work, studies, school, where they live, home town, country, moving house",
        "hobbies, what they like, love or enjoy doing, dislikes, favourite activities, sports, music, books, art",
        "personality traits, feelings, emotions, mood, temperament, being shy, outgoing, kind, anxious, brave",
        "what they believe in, value and care about, goals, dreams, motivation, faith, principles, causes",
        "family, friends, partner, husband, wife, children, parents, siblings, colleagues, mentor, pets",
    )
    floor: Annotated[
        float,
        setting("offline: the similarity a fact needs to its nearest dimension cue to join that dimension"),
    ] = 0.15
    same: Annotated[float, setting("facts at least this similar count as one item said again (its recurrence)")] = 0.85
    items: Annotated[int, setting("items per dimension, at most")] = 5
    min_facts: Annotated[
        int,
        setting("a speaker gets a persona once this many of their current facts are in closed episodes"),
    ] = 3
    llm_calls: Annotated[
        int,
        setting("with a model: speakers distilled by the model per ingest (Eq. 7; the offline items do the rest)"),
    ] = 4
    llm_growth: Annotated[
        float,
        setting(
            "with a model: the persona is rebuilt once the speaker's current facts reach this many times the "
            "count it was built from (or when a fact it cites stops being current), not at every write"
        ),
    ] = 1.5
    llm_facts: Annotated[
        int,
        setting("with a model: a speaker's facts shown to the distillation, at most (most recurrent first)"),
    ] = 60
    calibrations: Annotated[
        int,
        setting(
            "with a model: calibration calls per ingest, at most, each checking up to persona_calibration_batch "
            "scenes (themes) against their speaker's persona (Eq. 8: a compensatory condition appended, never a "
            "rewrite); offline there is no calibration"
        ),
    ] = 8
    calibrations_per_episode: Annotated[
        int,
        setting("with a model: calibration calls per newly closed episode of the write, at most (the rest stay due)"),
    ] = 2
    calibration_batch: Annotated[
        int,
        setting("with a model: scene checks one calibration call makes, at most (of one speaker or several)"),
    ] = 8
    search: Annotated[
        bool,
        setting(
            "retrieval: a question that asks to infer something about a named speaker (would, likely, might...) "
            "gets the best-matching persona dimension as one cited line, and its items' turns as candidates"
        ),
    ] = True
    share: Annotated[
        float,
        setting(
            "retrieval: the largest share of the context budget the persona line may take (else it is left out, "
            "and the trace says so)"
        ),
    ] = 0.25
    similarity: Annotated[
        float,
        setting("retrieval: the similarity the question needs to a dimension's text for its line"),
    ] = 0.2
    scene_share: Annotated[
        float,
        setting("reader: the largest share of the context budget the scene lines may take"),
    ] = 0.15

    def __post_init__(self) -> None:
        object.__setattr__(self, "cues", tuple(self.cues))  # JSON sends a list
        if len(self.cues) != 5:
            msg = (
                "Context.persona.cues: one cue per dimension "
                "(basic_info, interests, personality, values, relationships)"
            )
            raise ValueError(msg)
