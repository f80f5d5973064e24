"""Scenes for the reader: the themes the theme path picked, as lines the context opens with (Bi-Mem's Eq. 11 gives
the reader its retrieved scenes beside the facts; xMemory's Stage II starts from such a coarse context).

Each line is one theme (Bi-Mem's scene): its id, its text with any compensatory condition calibration appended
(:meth:`~memstrata.memory.levels.level1.theme.Theme.embed_text`), and the raw turns of its most central facts it
rests on, cited as the context's turn lines cite them. The block opens with ``[scenes]``, so
:func:`~memstrata.memory.search.packing.parse_context` skips it like the persona line. The answer node admits lines
while they fit a share of the budget (``Context.persona.scene_share``); off by default
(``Context.experimental.scene_lines`` 0): on
LoCoMo and LongMemEval the metric counts raw turns, so every token a scene takes is a token no turn gets, and the
value of a scene line is to a reader.

Example:
    >>> [s.line() for s in scene_lines(index, [("ann-bo", "theme:0")], cites=2)]  # doctest: +SKIP
    ['theme:0 Ann adopted a grey cat named Miso. (cites s1:t0, s1:t2)']

A line longer than the room left is cut to its first words that fit (:meth:`SceneLine.fitted`), so a long
offline theme text (up to ``themes.words`` words) still gives the reader its gist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels.level1.fact import FACT, Fact
from memstrata.memory.levels.level1.theme import THEME, Theme
from memstrata.memory.search.persona import turn_citation

SCENES_LABEL = "scenes"


@dataclass(frozen=True)
class SceneLine:
    """One scene as the reader sees it: the theme's id, its text (calibration conditions appended) and citations."""

    theme_id: str
    text: str
    cites: tuple[str, ...]

    def line(self, words: int | None = None) -> str:
        """The line, its text cut to its first ``words`` words (marked with an ellipsis) when given.

        Example:
            >>> SceneLine("theme:0", "Ann adopted a grey cat named Miso.", ("s1:t0",)).line(words=3)
            'theme:0 Ann adopted a … (cites s1:t0)'
        """
        said = self.text.split()
        text = " ".join(said) if words is None or words >= len(said) else " ".join([*said[:words], "…"])
        return f"{self.theme_id} {text}" + (f" (cites {', '.join(self.cites)})" if self.cites else "")

    def fitted(self, room: int, count: Callable[[str], int], *, least: int = 5) -> str | None:
        """The longest form of the line (its whole text, else its first words) whose tokens fit ``room``, or
        ``None`` when not even its first ``least`` words do.
        """
        if count(self.line()) <= room:
            return self.line()
        low, high = least, len(self.text.split()) - 1  # the longest cut that fits, by bisection
        best = None
        while low <= high:
            mid = (low + high) // 2
            if count(self.line(words=mid)) <= room:
                best, low = self.line(words=mid), mid + 1
            else:
                high = mid - 1
        return best


def scene_lines(index: MemoryIndex, keys: Sequence[Sequence[str]], *, cites: int = 3) -> list[SceneLine]:
    """One line per ``(conversation_id, theme id)`` the snapshot holds, in the given order: the theme's id, text
    (with its calibration conditions) and the turns of its ``cites`` most central facts.
    """
    themes, facts = index.events.get(THEME.kind), index.events.get(FACT.kind)
    if themes is None or facts is None:  # a theme is made of facts: no facts, no themes
        return []
    out = []
    for conversation_id, theme_id in keys:
        row = themes.by_key.get((conversation_id, theme_id))
        if row is None:  # a write since replaced it
            continue
        theme = themes.units_as(Theme)[row]
        turns: list[str] = []
        for fact_id in theme.fact_ids[: max(0, cites)]:
            at = facts.by_key.get((conversation_id, fact_id))
            if at is not None:
                turns += [t for t in facts.units_as(Fact)[at].turn_ids if t not in turns]
        cited = tuple(turn_citation(index, conversation_id, t) for t in turns)
        out.append(SceneLine(theme.id, " ".join(theme.embed_text().split()), cited))
    return out
