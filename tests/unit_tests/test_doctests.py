"""Every example in a docstring of the package runs and shows what it says (a stale example fails here)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import memstrata

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(memstrata.__path__, "memstrata.") if m.name != "memstrata.__main__"
)


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_hold(name: str) -> None:
    module = importlib.import_module(name)
    tests = doctest.DocTestFinder(exclude_empty=True).find(module, name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_the_package_has_examples_to_run() -> None:
    found = sum(
        len(doctest.DocTestFinder(exclude_empty=True).find(importlib.import_module(n), n))
        for n in ("memstrata.memory.search.packing", "memstrata.memory.levels.level2.passage")
    )
    assert found >= 2
