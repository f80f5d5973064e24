"""Bi-Mem's reflective calibration (§4.2.2, Eq. 8): a scene checked against its speaker's persona.

A scene (theme) belongs to the speaker at least half of its current facts are about. With a model, a scene whose
present form (its text and members) has not been checked yet is put to the model with the speaker's persona; when
the scene misses or contradicts it, the model writes a compensatory condition that is appended to the scene
(s' = s + delta s). The scene's own text is never rewritten, and every check is recorded (with the persona basis it
was checked against), an empty condition meaning "consistent". Bi-Mem calibrates every scene once, after the persona;
written a message at a time, a scene is checked once per form it takes, so a write costs checks for the scenes it
changed, never for the whole memory again. Offline there is no calibration: nothing here runs without a model, and
``inspect`` says so.

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
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from memstrata.memory.levels import Fact, Theme


class Calibration(BaseModel):
    """Whether the scene misses or contradicts the persona, and the text to append if so."""

    needs_calibration: bool = Field(description="true if the scene misses or contradicts the persona")
    condition: str = Field(default="", description="a sentence to append to the scene (empty if consistent)")


def scene_speaker(theme: Theme, facts: Mapping[str, Fact], speakers: Sequence[str]) -> str | None:
    """The speaker at least half of the scene's current facts are about, if any."""
    names = {s.casefold(): s for s in speakers}
    said = [facts[f].subject.casefold() for f in theme.fact_ids if f in facts and facts[f].current]
    if not said:
        return None
    name, n = Counter(said).most_common(1)[0]
    return names.get(name) if 2 * n >= len(said) else None


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
