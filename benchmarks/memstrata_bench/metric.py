"""Turn-level evidence recall under a token budget (``shared/docs/EVAL.md``).

A gold turn is *present* iff its ``text`` field appears verbatim in the
context. ``recall_all@B`` is the share of questions with every gold turn
present; ``recall_frac@B`` is the mean share of gold turns present. A context
longer than ``B`` tokens scores zero: the budget covers the whole string.

Example:
    >>> score_context("Ann: I adopted a cat.", ["I adopted a cat.", "It is grey."])
    (False, 0.5)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


def is_present(text: str, context: str) -> bool:
    """Whether a gold turn's text appears verbatim in the context.

    Example:
        >>> is_present("I adopted a cat.", "Ann: I adopted a cat. [shares a photo: a cat]")
        True
        >>> is_present("I adopted a cat.", "Ann: I adopted a kitten.")
        False
    """
    return bool(text) and text in context


def score_context(context: str, gold_texts: Sequence[str]) -> tuple[bool, float]:
    """``(all present, share present)`` for one question's gold turn texts."""
    if not gold_texts:
        msg = "gold_texts: a scored question needs at least one evidence turn"
        raise ValueError(msg)
    hits = sum(is_present(text, context) for text in gold_texts)
    return hits == len(gold_texts), hits / len(gold_texts)


@dataclass
class RecallTally:
    """Running sums of recall for one method, per budget.

    Attributes:
        budgets: the budgets tallied.
        questions: how many questions were scored.
        all_hits: per budget, questions with every gold turn present.
        frac_sum: per budget, the sum of per-question shares present.
    """

    budgets: tuple[int, ...]
    questions: int = 0
    all_hits: dict[int, int] = field(default_factory=dict)
    frac_sum: dict[int, float] = field(default_factory=dict)

    def add(self, scores: dict[int, tuple[bool, float]]) -> None:
        """Add one question's ``{budget: (all present, share present)}``."""
        self.questions += 1
        for budget in self.budgets:
            hit, frac = scores[budget]
            self.all_hits[budget] = self.all_hits.get(budget, 0) + int(hit)
            self.frac_sum[budget] = self.frac_sum.get(budget, 0.0) + frac

    def summary(self) -> dict[str, dict[str, float]]:
        """``{"recall_all": {"500": ...}, "recall_frac": {...}}`` as fractions in [0, 1]."""
        n = self.questions or 1
        return {
            "recall_all": {str(b): self.all_hits.get(b, 0) / n for b in self.budgets},
            "recall_frac": {str(b): self.frac_sum.get(b, 0.0) / n for b in self.budgets},
        }


def merge_tallies(tallies: Iterable[RecallTally], budgets: tuple[int, ...]) -> RecallTally:
    """Sum several tallies (e.g. the per-category ones) into one."""
    total = RecallTally(budgets=budgets)
    for tally in tallies:
        total.questions += tally.questions
        for b in budgets:
            total.all_hits[b] = total.all_hits.get(b, 0) + tally.all_hits.get(b, 0)
            total.frac_sum[b] = total.frac_sum.get(b, 0.0) + tally.frac_sum.get(b, 0.0)
    return total
