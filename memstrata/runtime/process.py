"""Process-wide tuning: numpy's BLAS thread pool and handing the C heap's free pages back."""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from typing import Any


def limit_blas(threads: int | None) -> None:
    """Cap numpy's BLAS thread pool for the whole process (``None``: leave it as it is).

    A query's matrix products are small (a few hundred rows); with more than one
    BLAS thread, OpenBLAS's waiting threads spin and take the cores the
    embedding model needs. Measured on 2 cores, conv-26, 79 queries: p50 144 ms
    with OpenBLAS's default threads, 100 ms with one.
    """
    if threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")


def trim_heap() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; nothing elsewhere)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


@cache  # looked up on the first trim, not on import: find_library runs ldconfig in a subprocess (about 20 ms)
def _glibc() -> Any:
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name) if name else None
    return lib if lib is not None and hasattr(lib, "malloc_trim") else None  # musl and macOS have none
