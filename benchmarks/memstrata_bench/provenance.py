"""Where a benchmark result came from: the code's commit, the date, the machine and the command line.

Every ``memstrata bench`` command stores this block under ``provenance`` in its results JSON, and
``benchmarks/render.py`` prints it beside the numbers in BENCHMARKS.md, so a table always says which
code, which machine and which command produced it.

Example:
    >>> block = provenance("memstrata bench locomo locomo10.json")
    >>> sorted(block)
    ['command', 'commit', 'date', 'machine']
"""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

NOT_RECORDED = "not recorded"
_REPO = Path(__file__).resolve().parents[2]


def git_commit(folder: Path = _REPO) -> str:
    """The short commit of the checkout holding ``folder``, with ``+changes`` if its tracked files differ.

    Returns ``"not recorded"`` outside a git checkout or without git (an installed wheel, say).
    """
    if not (folder / ".git").exists():  # an installed package: a git folder above it is another project's
        return NOT_RECORDED
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return NOT_RECORDED
    return f"{head}+changes" if changed else head or NOT_RECORDED


def machine() -> dict[str, Any]:
    """CPU cores, memory (GiB, rounded) and platform of this machine."""
    return {
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "platform": f"{platform.system()} {platform.machine()}",
    }


def _memory_gib() -> int | str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return NOT_RECORDED
    return round(total / 2**30)


def provenance(command: str) -> dict[str, Any]:
    """The block a results JSON stores under ``provenance``.

    Args:
        command: the command line that produced the result, as a user would type it.

    Returns:
        ``commit`` (see :func:`git_commit`), ``date`` (UTC, ISO 8601), ``machine`` (see :func:`machine`) and
        ``command``.
    """
    return {
        "commit": git_commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "command": command,
    }
