r"""Prompt sections the retrieval nodes share: the memory pool M_i, and evidence as ranked, cited lines.

Example:
    >>> pool_block([{"iteration": 0, "query": "Where?", "answer": "Porto"}])
    '\n<earlier_answers>\n- round 0 (Where?): Porto\n</earlier_answers>'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memstrata.memory.query import Hit
from memstrata.memory.search.packing import Counter


def pool_block(pool: Sequence[dict[str, Any]]) -> str:
    """The memory pool M_i as a prompt section (empty when nothing was answered yet)."""
    lines = [f"- round {p['iteration']} ({p['query']}): {p['answer']}" for p in pool if p.get("answer")]
    return "\n<earlier_answers>\n" + "\n".join(lines) + "\n</earlier_answers>" if lines else ""


def cited_line(hit: Hit) -> str:
    """One turn as ``[D3:7 · 8 May 2023] Caroline: text``: its citation, date, speaker and verbatim text."""
    head = f"{hit.unit_id} · {hit.time}" if hit.time else hit.unit_id
    return f"[{head}] {hit.speaker}: {hit.text}"


def ranked_lines(hits: Sequence[Hit], *, budget: int, counter: Counter) -> list[str]:
    """The best turns in rank order, one cited line each, while they fit in ``budget`` tokens."""
    lines: list[str] = []
    used = 0
    at_least = getattr(counter, "at_least", None)  # a long line that cannot fit is not tokenized
    for hit in hits:
        line = cited_line(hit)
        if at_least is not None and used + at_least(line) + 1 > budget:
            continue
        cost = counter.count(line) + 1
        if used + cost > budget:
            continue
        lines.append(line)
        used += cost
    return lines
