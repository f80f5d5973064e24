r"""Packing ranked evidence into a context of at most ``budget`` tokens, and rendering it.

Turns are admitted in rank order while they fit (a turn that does not fit is
skipped, so a long turn never starves the rest; ``shorten`` may then quote a part
of it in the room left), then rendered in chronological order, grouped under one
header per session:

    [session 3 · 8 May 2023]
    D3:7 Caroline: I went to a LGBTQ support group yesterday.

Turn ids of the form ``<session part>:<turn part>`` (``D3:7``, ``s3:t7``) are
split: the header carries the session part and each line starts with the turn
part, so the citation is ``header part + ":" + line part`` and no line repeats
the session. Other ids are written in full on their line. Turn text is always
verbatim.

Example:
    >>> from memstrata.memory.query import Hit
    >>> class Words:
    ...     def count(self, text):
    ...         return len(text.split())
    >>> items = [
    ...     Hit(
    ...         kind="turn",
    ...         unit_id="t1",
    ...         conversation_id="c",
    ...         score=1.0,
    ...         session_id="1",
    ...         speaker="Ann",
    ...         text="I live in Porto.",
    ...     )
    ... ]
    >>> pack_context(items, budget=20, counter=Words())[0]
    '[session 1]\nt1 Ann: I live in Porto.'
    >>> render([items[0].with_(unit_id="D1:3", time="8 May 2023")])
    '[D1 · 8 May 2023]\n3 Ann: I live in Porto.'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol

from memstrata.memory.conversation import session_order
from memstrata.memory.query import Hit


class Counter(Protocol):
    """Anything that counts a text's tokens, such as :class:`memstrata.memory.tokens.TokenCounter`."""

    def count(self, text: str) -> int:
        """The number of tokens in ``text``."""


def _session_key(item: Hit) -> tuple[str, tuple[int, str], str]:
    sid = str(item.session_id)
    prefix = split_id(item.unit_id)[0] or ""
    return item.conversation_id, session_order(sid), prefix


def split_id(turn_id: str) -> tuple[str | None, str]:
    """``"D3:7"`` -> ``("D3", "7")``; ids without a session part stay whole."""
    head, sep, tail = turn_id.rpartition(":")
    return (head, tail) if sep and head and tail else (None, turn_id)


def header(item: Hit, *, multi_conversation: bool) -> str:
    """The session header line; it names the id prefix its lines' citations share."""
    prefix, _ = split_id(item.unit_id)
    parts = [prefix or f"session {item.session_id}"]
    if item.time:
        parts.append(str(item.time))
    if multi_conversation:
        parts.append(str(item.conversation_id))
    return "[" + " · ".join(parts) + "]"


def line(item: Hit) -> str:
    """One evidence line: the citation's turn part, speaker, verbatim text, photo caption.

    The caption is left out where the item says ``show_caption=False`` (see
    :func:`memstrata.memory.search.selection.mark_captions`).
    """
    text = f"{split_id(item.unit_id)[1]} {item.speaker}: {item.text}"
    if item.image_caption and item.show_caption:
        text += f" [shares a photo: {item.image_caption}]"
    return text


def render(items: Sequence[Hit]) -> str:
    """Chronological, session-grouped rendering of the chosen items."""
    return "\n".join(render_lines(items))


def render_lines(items: Sequence[Hit]) -> list[str]:
    """The lines of :func:`render`: a header per session, then its items' lines."""
    multi = len({i.conversation_id for i in items}) > 1
    ordered = sorted(items, key=lambda i: (_session_key(i), i.position))
    lines: list[str] = []
    current = None
    for item in ordered:
        key = _session_key(item)
        if key != current:
            lines.append(header(item, multi_conversation=multi))
            current = key
        lines.append(line(item))
    return lines


def pack_context(
    ranked: Sequence[Hit],
    *,
    budget: int,
    counter: Counter,
    shorten: Callable[[Hit, int], Hit | None] | None = None,
) -> tuple[str, list[Hit], int]:
    """Admit ranked items while they fit; return (context, admitted items in rank order, tokens).

    ``shorten(item, room)``, when given, is then asked, for each item that did not fit (in rank order), for a part
    of it (a long turn's matching passage, :class:`~memstrata.memory.search.excerpts.Excerpts`) whose line fits the
    ``room`` tokens the whole items left, or ``None``. Whole items come first: a part never takes the place of a
    whole turn that fits (a part is no evidence to EVAL.md's recall).
    """
    chosen: list[Hit] = []
    sessions: set[tuple[str, tuple[int, str], str]] = set()
    used = 0
    multi = len({i.conversation_id for i in ranked}) > 1
    at_least = getattr(counter, "at_least", None)  # a cheap lower bound: a long line that cannot fit is not counted
    skipped: list[Hit] = []

    def head(item: Hit) -> int:  # its session's header, unless an admitted item already opened it
        return 0 if _session_key(item) in sessions else counter.count(header(item, multi_conversation=multi))

    for item in ranked:
        text = line(item)
        opened = head(item)
        room = budget - used - opened
        cost = counter.count(text) if at_least is None or at_least(text) <= room else room + 1
        if cost > room:
            skipped.append(item)
            continue
        chosen.append(item)
        sessions.add(_session_key(item))
        used += cost + opened
    if shorten is not None:  # then parts of what did not fit, in the room left
        for item in skipped:
            opened = head(item)
            short = shorten(item, budget - used - opened)
            if short is not None:
                chosen.append(short)
                sessions.add(_session_key(item))
                used += opened + counter.count(line(short))
    context, tokens = _rendered(chosen, counter)
    while chosen and tokens > budget:  # only if the rendering costs more than its admission; keep the promise
        chosen.pop()
        context, tokens = _rendered(chosen, counter)
    return context, chosen, tokens


def _rendered(chosen: Sequence[Hit], counter: Counter) -> tuple[str, int]:
    """The rendered context and its exact token count.

    A counter with ``count_lines`` counts the joined lines from its per-line counts (the MiniLM
    tokenizer never joins words across a newline, so that is exact and reuses memoized lines);
    any other counter counts the whole context.
    """
    lines = render_lines(chosen)
    count_lines = getattr(counter, "count_lines", None)
    return "\n".join(lines), count_lines(lines) if count_lines else counter.count("\n".join(lines))


_HEADER = re.compile(r"^\[(?P<label>[^\]·]+?)(?: · [^\]]*)?\]$")


def parse_context(context: str) -> list[tuple[str, str]]:
    r"""Read a rendered context back into ``(citation id, "speaker: text")`` pairs, in order.

    Example:
        >>> parse_context("[D1 · 8 May 2023]\n3 Ann: I live in Porto.")
        [('D1:3', 'Ann: I live in Porto.')]
    """
    out: list[tuple[str, str]] = []
    prefix: str | None = None
    skip = False
    for raw in context.splitlines():
        match = _HEADER.match(raw)
        if match:
            label = match.group("label").strip()
            prefix = None if label.startswith("session ") else label
            skip = label in ("persona", "scenes")  # not turns (memstrata.memory.search.persona and .scenes)
            continue
        if skip:
            continue
        part, _, rest = raw.partition(" ")
        if rest:
            out.append((f"{prefix}:{part}" if prefix else part, rest))
    return out
