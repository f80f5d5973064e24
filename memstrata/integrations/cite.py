r"""The one citation form every integration renders: ``s<session>:t<turn>``, the turn's place in its session.

A turn's stored id is whatever its writer gave it: ``s1:t6`` for a file, ``D3:7`` for LoCoMo, a 36-character
message UUID for a turn the middleware wrote. None of that reaches a model: the middleware's memory block, the
search tool's text and the retriever's documents all cite the turn by its session and position, so the model
meets one short form, wherever the turn came from.

Example:
    >>> ev = Evidence(
    ...     turn_id="8b0c2d4e-0000-4000-8000-000000000000",
    ...     conversation_id="chat",
    ...     session_id="2",
    ...     position=4,
    ...     speaker="Ann",
    ...     text="I adopted a dog.",
    ...     time="14 April 2024",
    ...     level="level2",
    ... )
    >>> citation(ev)
    's2:t4'
    >>> print(render_grouped([ev]))
    [s2 · 14 April 2024]
    t4 Ann: I adopted a dog.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memstrata.memory.conversation import session_order
from memstrata.memory.tokens import TokenCounter
from memstrata.result import Evidence

PERSONA_HEAD = "[persona"  # a context may open with a persona block (memstrata.memory.search.persona)


def citation(evidence: Evidence) -> str:
    """``s<session>:t<position>``; a turn with no stored position keeps its id (older stores)."""
    if evidence.position is None:
        return evidence.turn_id
    return f"s{evidence.session_id}:t{evidence.position}"


def chronological(evidence: Sequence[Evidence]) -> list[Evidence]:
    """Evidence by conversation (in order of first appearance), session and position."""
    convs = list(dict.fromkeys(e.conversation_id for e in evidence))
    return sorted(
        evidence, key=lambda e: (convs.index(e.conversation_id), session_order(e.session_id), e.position or 0)
    )


def render_grouped(evidence: Sequence[Evidence]) -> str:
    """Turns grouped under one header per session (``[s2 · date]``), each line led by its turn (``t4``).

    With several conversations the header names the conversation too (``[s2 · date · chat-1]``).
    """
    multi = len({e.conversation_id for e in evidence}) > 1
    lines: list[str] = []
    current: tuple[str, str] | None = None
    for e in chronological(evidence):
        if (e.conversation_id, e.session_id) != current:
            current = (e.conversation_id, e.session_id)
            parts = [f"s{e.session_id}", *([e.time] if e.time else []), *([e.conversation_id] if multi else [])]
            lines.append("[" + " · ".join(parts) + "]")
        turn = f"t{e.position}" if e.position is not None else e.turn_id
        caption = f" [shares a photo: {e.image_caption}]" if e.image_caption else ""
        lines.append(f"{turn} {e.speaker}: {e.text}{caption}")
    return "\n".join(lines)


def persona_lines(context: str) -> str:
    """The persona block a packed context opens with (its header and its one line), else ``""``."""
    if not context.startswith(PERSONA_HEAD):
        return ""
    return "\n".join(context.split("\n")[:2])


def within_budget(
    evidence: Sequence[Evidence],
    budget: int | None,
    render: Callable[[Sequence[Evidence]], str],
    *,
    counter: TokenCounter | None = None,
) -> list[Evidence]:
    """The evidence, best first, whose rendering fits in ``budget`` tokens (all of it without a budget).

    ``render`` turns a list of evidence into text; a turn that does not fit is skipped, as packing does.
    """
    if budget is None:
        return list(evidence)
    count = (counter or TokenCounter()).count
    kept: list[Evidence] = []
    for e in evidence:
        trial = [*kept, e]
        if count(render(trial)) <= budget:
            kept = trial
    return kept
