"""A numpy array that grows by rows in amortized constant time (the snapshot's vectors and per-turn arrays).

Example:
    >>> r = Rows(np.zeros((0, 2), dtype=np.float32))
    >>> r.append([1, 2])
    >>> r.append([3, 4])
    >>> r.set(0, [5, 6])
    >>> r.array.tolist()
    [[5.0, 6.0], [3.0, 4.0]]
    >>> r.pop()
    >>> len(r)
    1
    >>> e = Rows(np.zeros((0, 1)))
    >>> e.append([1.0, 2.0, 3.0])
    >>> e.array.shape  # an empty one takes its first row's width
    (1, 3)
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Rows:
    """Rows of a 1-D or 2-D array with spare capacity; :attr:`array` is a view of the used rows."""

    def __init__(self, data: np.ndarray) -> None:
        self._buf = np.asarray(data)
        self._n = len(self._buf)

    def __len__(self) -> int:
        return self._n

    @property
    def array(self) -> np.ndarray:
        """The used rows (a view of the buffer)."""
        return self._buf[: self._n]

    def append(self, row: Any) -> None:
        """Add one row at the end, growing the buffer when it is full."""
        row = np.asarray(row, dtype=self._buf.dtype)
        if self._n == 0 and row.shape != self._buf.shape[1:]:
            # An empty array cannot know its row width (a snapshot of an empty scope holds (0, 1) vectors):
            # the first row sets it.
            self._buf = np.empty((16, *row.shape), dtype=self._buf.dtype)
        if self._n == len(self._buf):
            grown = np.empty((max(16, 2 * len(self._buf)), *self._buf.shape[1:]), dtype=self._buf.dtype)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n] = row
        self._n += 1

    def set(self, i: int, row: Any) -> None:
        """Replace row ``i``, one of the used rows (else :class:`IndexError`)."""
        if not 0 <= i < self._n:
            msg = f"Rows.set: row {i} is outside 0..{self._n - 1}"
            raise IndexError(msg)
        self._buf[i] = row

    def pop(self) -> None:
        """Drop the last row (nothing when there is none)."""
        if self._n:
            self._n -= 1
