"""The process tuning every bench run opts into (a library user's default leaves the process alone).

``gc_freeze`` freezes a built snapshot out of the garbage collector's scans, and ``blas_threads`` caps numpy's BLAS
at one thread (:class:`memstrata.context.Context` describes both): the benches have always run with them, so their
numbers stay comparable across runs.
"""

from __future__ import annotations

from typing import Any

TUNED: dict[str, Any] = {"gc_freeze": True, "blas_threads": 1}
BLAS_THREADS: int = TUNED["blas_threads"]
