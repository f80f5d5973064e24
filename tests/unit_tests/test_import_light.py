"""Importing memstrata loads none of the heavy libraries (issue 55): they load where they are used.

``import memstrata`` resolves its public names lazily (PEP 562), and the modules that need networkx
(traversal, themes) or bm25s (which imports scipy) import them inside the functions that use them. A module-level
import of one of them on the client's path fails these tests, which name the import chain that brought it in.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO

HEAVY = ("scipy", "networkx", "matplotlib")


def _imported(statement: str) -> tuple[list[str], str]:
    """The heavy packages in ``sys.modules`` after ``statement`` in a fresh interpreter, and its importtime."""
    code = f"{statement}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=True,
    )
    return done.stdout.split(), done.stderr


def _chain(importtime: str, module: str) -> str:
    """Who imported ``module`` first, innermost first (importtime prints a module after what it imported)."""
    rows = [line.split("|")[-1] for line in importtime.splitlines() if line.startswith("import time:")]
    start = next(i for i, name in enumerate(rows) if name.strip().split(".")[0] == module)
    chain, depth = [rows[start].strip()], len(rows[start]) - len(rows[start].lstrip())
    for name in rows[start + 1 :]:
        indent = len(name) - len(name.lstrip())
        if indent < depth:
            chain.append(name.strip())
            depth = indent
    return " <- ".join(chain)


@pytest.mark.parametrize("statement", ["import memstrata", "from memstrata import Memstrata"])
def test_importing_memstrata_loads_no_heavy_library(statement: str) -> None:
    heavy, importtime = _imported(statement)
    assert not heavy, "; ".join(_chain(importtime, m) for m in heavy)


def test_the_public_names_still_resolve() -> None:
    import memstrata
    from memstrata.client import Memstrata
    from memstrata.context import Context
    from memstrata.errors import AnswerError, LLMError, StoreError
    from memstrata.result import Evidence, RetrievalResult

    for value in (AnswerError, Context, Evidence, LLMError, Memstrata, RetrievalResult, StoreError):
        assert getattr(memstrata, value.__name__) is value
    assert set(memstrata.__all__) <= set(dir(memstrata))
    with pytest.raises(AttributeError, match="no attribute 'Memstrat'"):
        _ = memstrata.Memstrat


def test_every_public_error_lives_in_memstrata_errors_and_is_importable_from_memstrata() -> None:
    """No module of the library defines its own error class: each is in ``memstrata.errors``, exported there and
    by ``memstrata`` (bench commands aside: they are not the library's API).
    """
    import ast
    import builtins

    import memstrata
    import memstrata.errors as errors

    defined: dict[str, str] = {}
    for path in (REPO / "memstrata").rglob("*.py"):
        if "bench" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            bases = {getattr(b, "id", getattr(b, "attr", "")) for b in getattr(node, "bases", [])}
            if isinstance(node, ast.ClassDef) and any(
                b.endswith("Error") or (isinstance(getattr(builtins, b, None), type) and b.endswith("Exception"))
                for b in bases
            ):
                defined[node.name] = str(path.relative_to(REPO))
    assert defined, "the scan found no error class at all"
    assert {name: where for name, where in defined.items() if where != "memstrata/errors.py"} == {}
    assert sorted(defined) == sorted(errors.__all__)
    for name in errors.__all__:
        assert name in memstrata.__all__
        assert getattr(memstrata, name) is getattr(errors, name)
