"""Benchmarks: LoCoMo evidence recall under a token budget, memstrata beside the baselines.

Example:
    >>> from memstrata.bench import run_locomo
    >>> result = run_locomo("locomo10.json", methods=["bm25", "random"])  # doctest: +SKIP
"""

from memstrata.bench.runner import METHOD_NAMES, run_locomo

__all__ = ["METHOD_NAMES", "run_locomo"]
