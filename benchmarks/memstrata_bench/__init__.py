"""Benchmarks: LoCoMo evidence recall under a token budget, memstrata beside the baselines.

Example:
    >>> from memstrata_bench import run_locomo
    >>> result = run_locomo("locomo10.json", methods=["bm25", "random"])  # doctest: +SKIP
"""

from memstrata_bench.runner import METHOD_NAMES, run_locomo

__all__ = ["METHOD_NAMES", "run_locomo"]
