r"""Greedy packing of ranked lines into a token budget.

Lines are taken in rank order and joined with ``"\n"``; packing stops at the
first line that would overflow the budget (no skipping ahead to a shorter one).
Each line costs its own token count plus the separator's. The final string is
counted again, so a tokenizer where tokens are not additive can never push a
context past its budget.

Example:
    >>> class Words:
    ...     def count(self, text: str) -> int:
    ...         return len(text.split())
    >>> pack_lines(["a b", "c d e", "f"], budget=4, counter=Words())
    'a b'
"""

from __future__ import annotations

from collections.abc import Sequence

from memstrata.memory.tokens import CountsTokens

SEPARATOR = "\n"


def pack_lines(
    lines: Sequence[str],
    *,
    budget: int,
    counter: CountsTokens,
    line_tokens: Sequence[int] | None = None,
) -> str:
    """Join lines in order until the next one would overflow ``budget`` tokens.

    Args:
        lines: candidate lines, best first.
        budget: the token budget for the whole joined string.
        counter: the token counter (``count(text) -> int``).
        line_tokens: precomputed token counts of ``lines`` (same order), to skip recounting.

    Returns:
        The packed context, whose token count is at most ``budget``.
    """
    counts = list(line_tokens) if line_tokens is not None else [counter.count(line) for line in lines]
    separator = counter.count(SEPARATOR)
    taken = _prefix_within(counts, budget=budget, separator=separator)
    context = SEPARATOR.join(lines[:taken])
    while taken and counter.count(context) > budget:
        taken -= 1
        context = SEPARATOR.join(lines[:taken])
    return context


def _prefix_within(counts: Sequence[int], *, budget: int, separator: int) -> int:
    """How many leading lines fit: stops at the first one that would overflow."""
    used = 0
    for index, cost in enumerate(counts):
        extra = cost + (separator if index else 0)
        if used + extra > budget:
            return index
        used += extra
    return len(counts)
