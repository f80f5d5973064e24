"""Bi-Mem's reflective calibration (§4.2.2, Eq. 8): scenes checked against their speaker's persona.

A scene (theme) belongs to the speakers most of its current facts are about (every one of them on a tie, so a scene
shared by two people is checked against both personas). With a model, the scenes whose present form (text and
members) has not been checked against a speaker's persona yet are put to the model with that persona, several checks
to one call, of one speaker or several (:func:`due_scenes`, :func:`chunks`, :func:`checks_block`); for each scene
that misses or contradicts the persona, the model
writes a compensatory condition that is appended to the scene (s' = s + delta s). The scene's own text is never
rewritten, and every check is recorded (with the persona basis it was checked against), an empty condition meaning
"consistent". Bi-Mem calibrates every scene once, after the persona; written a message at a time, a scene is
checked once per form it takes, so a write costs checks for the scenes it changed, never for the whole memory again.
Offline there is no calibration: nothing here runs without a model, and ``inspect`` says so.

Example:
    >>> from memstrata.memory.levels import Theme
    >>> scene = Theme(user_id="u", n=0, text="Ann went to a spicy food festival with friends.", fact_ids=["f1"])
    >>> due(scene, "Ann")
    True
    >>> calibrated = appended(scene, "Ann", "b1", "This was a one-off: Ann prefers mild food.")
    >>> calibrated.text == scene.text, calibrated.embed_text()
    (True, 'Ann went to a spicy food festival with friends. This was a one-off: Ann prefers mild food.')
    >>> due(calibrated, "Ann")
    False
    >>> [len(c) for c in chunks(list(range(7)), 3)]
    [3, 3, 1]
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from pydantic import BaseModel, Field

from memstrata.memory.levels import Fact, Theme

T = TypeVar("T")


class SceneCheck(BaseModel):
    """One scene's verdict: whether it misses or contradicts the persona, and the text to append if so."""

    scene: int = Field(description="the index of the scene, as given")
    needs_calibration: bool = Field(description="true if the scene misses or contradicts the persona")
    condition: str = Field(default="", description="a sentence to append to the scene (empty if consistent)")


class Calibrations(BaseModel):
    """The verdicts of one calibration call, one per scene it was shown."""

    checks: list[SceneCheck] = Field(default_factory=list, description="one verdict per scene, by its index")


def scene_speakers(theme: Theme, facts: Mapping[str, Fact], speakers: Sequence[str]) -> list[str]:
    """The speakers (of ``speakers``, in that order) who are the subject of the most of the scene's current facts:
    one, or every one tied for the most; none when no current fact is about a speaker.
    """
    names = {s.casefold(): s for s in speakers}
    said = Counter(
        names[f.subject.casefold()]
        for f in (facts.get(i) for i in theme.fact_ids)
        if f is not None and f.current and f.subject.casefold() in names
    )
    top = max(said.values(), default=0)
    return [s for s in speakers if top and said.get(s) == top]


def due_scenes(
    themes: Sequence[Theme], facts: Mapping[str, Fact], speakers: Sequence[str], has_persona: Callable[[str], bool]
) -> dict[str, list[Theme]]:
    """Per speaker with a persona, the scenes of theirs that have not been checked in their present form."""
    out: dict[str, list[Theme]] = {}
    for theme in themes:
        for speaker in scene_speakers(theme, facts, speakers):
            if has_persona(speaker) and due(theme, speaker):
                out.setdefault(speaker, []).append(theme)
    return out


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """``items`` in consecutive runs of at most ``size`` (at least 1)."""
    size = max(1, size)
    return [items[i : i + size] for i in range(0, len(items), size)]


def checks_block(items: Sequence[tuple[str, Theme]], personas: Mapping[str, str]) -> str:
    """One call's prompt body: the persona of each speaker its checks name, then the (speaker, scene) checks, each
    with the index its verdict names.
    """
    shown = dict.fromkeys(speaker for speaker, _ in items)
    block = "\n".join(f'<persona speaker="{s}">\n{personas[s]}\n</persona>' for s in shown)
    scenes = "\n".join(f'<scene index="{i}" speaker="{s}">{t.text}</scene>' for i, (s, t) in enumerate(items))
    return f"<personas>\n{block}\n</personas>\n<scenes>\n{scenes}\n</scenes>"


def scene_form(theme: Theme) -> str:
    """A digest of what the scene says and holds: a check stands until this changes."""
    return hashlib.sha1("\x1f".join([theme.text, *sorted(theme.fact_ids)]).encode()).hexdigest()[:16]


def due(theme: Theme, speaker: str) -> bool:
    """Whether the scene, in its present form, has not been checked against the speaker's persona yet."""
    form = scene_form(theme)
    return not any(c.get("speaker") == speaker and c.get("scene") == form for c in theme.calibrations)


def appended(theme: Theme, speaker: str, basis: str, condition: str) -> Theme:
    """The scene with one more check recorded (and its condition, if any, appended to what is embedded)."""
    entry = {"speaker": speaker, "persona": basis, "scene": scene_form(theme), "condition": " ".join(condition.split())}
    return theme.model_copy(update={"calibrations": [*theme.calibrations, entry]})
