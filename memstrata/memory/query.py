"""The types a query's journey uses: :class:`Query` from decomposition to evidence, :class:`Hit` for what it finds,
and the :class:`Interval` of time a hint or a unit spans.

They sit below planning, search and the tree, which all read them. A ``Query`` is made by decomposition, gets its
scope and time hint from scope prediction, and is what every search function reads; rewrites and follow-ups are
``Query`` objects too. A ``Hit`` is one scored unit of any kind: an event (a Level-1 summary, or any later ``event``
kind) or a raw turn. A turn hit carries what the context packer and the evidence need; ``found_by`` names the kind
whose search led to it.

Example:
    >>> q = Query(id="q0", text="Where does Ann live?")
    >>> q.hint is None, q.scope
    (True, 'Mixed')
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal

Scope = Literal["Short", "Long", "Mixed"]


@dataclass(frozen=True)
class Interval:
    """A closed time interval (naive datetimes)."""

    start: datetime
    end: datetime

    @property
    def center(self) -> float:
        """The interval's midpoint, in epoch seconds."""
        return (self.start.timestamp() + self.end.timestamp()) / 2


@dataclass
class Query:
    """One search question: the original (``q0``), a sub-query, a rewrite or a follow-up.

    Attributes:
        id: ``q0`` for the original, ``q1``... for sub-queries, ``r<round>.<i>`` for rewrites.
        text: what BM25 reads (and what is embedded unless ``dense_text`` is set).
        depends_on: ids of sub-queries this one needs answered first (H-Mem's planner).
        scope: H-Mem's Short/Long/Mixed; decides which kinds are searched directly.
        hint_start / hint_end: the time interval the query names, if any.
        weight: multiplies every score this query gives (rewrites count a little less).
        dense_text: embed this text instead of ``text`` (offline rewrites reuse their source's vector).
    """

    id: str
    text: str
    depends_on: list[str] = field(default_factory=list)
    scope: Scope = "Mixed"
    hint_start: datetime | None = None
    hint_end: datetime | None = None
    weight: float = 1.0
    dense_text: str | None = None

    @property
    def hint(self) -> Interval | None:
        """The time interval the query names, or ``None`` unless both ends are set."""
        if self.hint_start and self.hint_end:
            return Interval(self.hint_start, self.hint_end)
        return None

    @property
    def embed_text(self) -> str:
        """The text that is embedded: ``dense_text`` when set, else ``text``."""
        return self.dense_text or self.text


@dataclass
class Hit:
    """One scored unit of any kind, with its score parts and its raw turns.

    Attributes:
        kind: the unit's kind (``"turn"``, ``"summary"``, ...).
        unit_id / conversation_id: the unit.
        score: the fused score (already multiplied by the query's weight).
        parts: the score's parts, for the trace and the evidence.
        turn_ids: the raw turns this unit stands for.
        found_by: the kind whose search led here (a turn reached through a summary says ``"summary"``).
        level: ``"level1"`` when reached through an event (HyMem's Level-1), else ``"level2"``.
        query_id: the query that found it.
        text / time: the unit's text and its date as shown to readers.
        session_id / position / speaker / image_caption / show_caption: turn fields for the packer.
        via: how a graph search reached it (the entity path and the fact), else empty.
        scope / window: the query's scope, and the tree window (``"month 2023-05"``) that led to it, if any.
        span: for a long turn the context quotes in part, the characters of its text quoted
            (:mod:`~memstrata.memory.search.excerpts`); ``text`` then holds that part.
    """

    kind: str
    unit_id: str
    conversation_id: str
    score: float
    parts: dict[str, float] = field(default_factory=dict)
    turn_ids: list[str] = field(default_factory=list)
    found_by: str = ""
    level: str = "level2"
    query_id: str = ""
    text: str = ""
    time: str | None = None
    session_id: str = ""
    position: int = 0
    speaker: str = ""
    image_caption: str | None = None
    show_caption: bool = True
    via: str = ""
    scope: str = ""
    window: str = ""
    span: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        """Unique within one user: ``conversation/unit``."""
        return f"{self.conversation_id}/{self.unit_id}"

    def with_(self, **changes: Any) -> Hit:
        """A copy with some fields changed (hits in the state are never mutated).

        The same result as :func:`dataclasses.replace`, without its per-call introspection: retrieval copies
        tens of thousands of hits per question.
        """
        unknown = changes.keys() - _HIT_FIELDS
        if unknown:
            msg = f"Hit has no field(s) {sorted(unknown)}"
            raise TypeError(msg)
        new = object.__new__(Hit)
        new.__dict__ = {**self.__dict__, **changes}
        return new

    def evidence(self) -> dict[str, Any]:
        """The public evidence record of a turn hit (see :class:`memstrata.result.Evidence`)."""
        return {
            "turn_id": self.unit_id,
            "conversation_id": self.conversation_id,
            "session_id": self.session_id,
            "position": self.position,
            "speaker": self.speaker,
            "text": self.text,
            "time": self.time,
            "image_caption": self.image_caption,
            "level": self.level,
            "found_by": self.found_by,
            "score": self.score,
            "score_parts": self.parts,
            **({"via": self.via} if self.via else {}),
            **({"scope": self.scope} if self.scope else {}),
            **({"window": self.window} if self.window else {}),
            **({"excerpt": list(self.span)} if self.span else {}),
        }


_HIT_FIELDS = frozenset(f.name for f in fields(Hit))


class Fresh(list):  # type: ignore[type-arg]
    """Hits that replace the candidates instead of joining them (a deeper HMO tier searches afresh)."""


def keep_best(left: list[Hit] | None, right: list[Hit] | None) -> list[Hit]:
    """Reducer: hits by key; a unit found again keeps its best score, stays Level-1 once reached so, and keeps
    the entity path of a graph search that also reached it. A :class:`Fresh` update replaces them.
    """
    if isinstance(right, Fresh):
        return list(right)
    out = {h.key: h for h in left or []}
    for hit in right or []:
        old = out.get(hit.key)
        if old is None or hit.score > old.score:
            new = (
                hit.with_(level=old.level, found_by=old.found_by, scope=old.scope, window=old.window)
                if old is not None and old.level == "level1"
                else hit
            )
        else:
            new = old
        via = new.via or hit.via or (old.via if old is not None else "")
        out[hit.key] = new.with_(via=via) if via != new.via else new
    return list(out.values())
