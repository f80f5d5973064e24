"""``docs/papers.md`` stays true where a test can tell: its code references exist, its equation labels match the code.

The page has one table per paper (a ``## <paper>`` section), one row per mechanism: ``| mechanism | code | status |``.
A code reference is a dotted path in backticks (```memstrata.memory.search.hmem_score.fuse```). A row whose mechanism
starts with an equation label ("Eq. 3: ...") is that equation's row:

- faithful or adapted: the label and the paper's name appear in the source of the row's first code reference, the
  place that computes it;
- absent: no module the row names shows that label together with the paper's name (a module that does not compute an
  equation says what it computes instead of naming it).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
from conftest import REPO

PAGE = REPO / "docs" / "papers.md"
PAPERS = ("HyMem", "H-Mem", "xMemory", "Bi-Mem", "HMO")
STATUSES = ("faithful", "adapted", "absent")
REFERENCE = re.compile(r"`(memstrata(?:_bench)?(?:\.\w+)+)`")
# "Eq. 3", "Eqs. 1-3", "Eq. (5)", "Eqs. 9, 10 and 11", "Equation 4"
LABEL = re.compile(
    r"\b(?:Eqs?\.|Equations?)\s*\(?(\d+)\)?((?:\s*(?:[-–]|,|and)\s*\(?\d+\)?)*)",
)


@dataclass(frozen=True)
class Row:
    """One mechanism row of the page."""

    paper: str
    mechanism: str
    references: tuple[str, ...]
    status: str
    line: int

    @property
    def equations(self) -> set[int]:
        """The equations the row is about: the label its mechanism starts with (none if it starts otherwise)."""
        m = LABEL.match(self.mechanism.strip())
        return numbers(m) if m else set()


def numbers(match: re.Match[str]) -> set[int]:
    """The equation numbers one label names: a single one, a range (1-3) or a list (9, 10 and 11)."""
    found = {int(match.group(1))}
    last = int(match.group(1))
    for sep, n in re.findall(r"\s*([-–]|,|and)\s*\(?(\d+)\)?", match.group(2) or ""):
        n = int(n)
        found |= set(range(last, n + 1)) if sep in "-–" and n > last else {n}
        last = n
    return found


def labels(source: str) -> set[int]:
    """Every equation number a source text names."""
    return {n for m in LABEL.finditer(source) for n in numbers(m)}


def parse(text: str) -> list[Row]:
    """The mechanism rows of every paper's table (header and separator rows skipped)."""
    rows: list[Row] = []
    paper = None
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            heading = line[3:].strip()
            paper = next((p for p in PAPERS if heading == p or heading.startswith(f"{p} ")), None)
            assert paper is not None, f"line {i}: a section must be one of the papers {PAPERS}, not {heading!r}"
            continue
        if paper is None or not line.startswith("|") or set(line) <= set("|- "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells == ["mechanism", "code", "status"]:
            continue
        assert len(cells) == 3, f"line {i}: a row has three cells (mechanism, code, status), got {len(cells)}"
        status = re.match(r"\*\*(\w+)\*\*", cells[2])
        rows.append(Row(paper, cells[0], tuple(REFERENCE.findall(cells[1])), status.group(1) if status else "", i))
    return rows


def resolve(path: str) -> tuple[ModuleType, Any]:
    """The deepest importable module of a dotted path, and the object the rest of the path names in it."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        obj: Any = module
        for name in parts[cut:]:
            obj = attribute(obj, name, path)
        return module, obj
    msg = f"{path}: no importable module"
    raise AssertionError(msg)


def attribute(obj: Any, name: str, path: str) -> Any:
    """``obj.name``, counting a dataclass or pydantic field without a class-level default as an attribute (a group
    of settings, made by its factory, is its default: ``Context.themes.search_k``).
    """
    if hasattr(obj, name):
        return getattr(obj, name)
    made = getattr(obj, "__dataclass_fields__", {}).get(name)
    if made is not None and made.default_factory is not dataclasses.MISSING:
        return made.default_factory()
    fields = {*getattr(obj, "__dataclass_fields__", {}), *getattr(obj, "model_fields", {})}
    assert name in fields, f"{path}: {name!r} is not defined in {getattr(obj, '__name__', obj)!r}"
    return None


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return parse(PAGE.read_text())


def test_the_page_covers_each_paper_with_rows_of_one_status_and_code(rows: list[Row]) -> None:
    assert {r.paper for r in rows} == set(PAPERS)
    for r in rows:
        assert r.status in STATUSES, f"line {r.line}: the status must start with one of {STATUSES} in bold"
        assert r.references, f"line {r.line}: a row names the code that implements it (or where it would belong)"


def test_every_code_reference_exists(rows: list[Row]) -> None:
    for path in sorted({p for r in rows for p in r.references}):
        resolve(path)


def test_each_implemented_equation_is_named_where_the_page_says_it_is_computed(rows: list[Row]) -> None:
    checked = 0
    for r in rows:
        if not r.equations or r.status == "absent":
            continue
        module, _ = resolve(r.references[0])
        source = inspect.getsource(module)
        missing = r.equations - labels(source)
        assert not missing, f"line {r.line}: {module.__name__} does not name {r.paper}'s Eq. {sorted(missing)}"
        assert r.paper in source, f"line {r.line}: {module.__name__} does not name {r.paper}"
        checked += 1
    assert checked >= 18  # the page's implemented equation rows: HyMem 1, H-Mem 3, xMemory 4, Bi-Mem 5, HMO 5


def test_no_module_names_an_equation_the_page_marks_absent_there(rows: list[Row]) -> None:
    absent = [r for r in rows if r.equations and r.status == "absent"]
    assert absent, "the page marks some equations absent (Bi-Mem's Eq. 9-11, HMO's Eq. 2)"
    for r in absent:
        for path in r.references:
            module, _ = resolve(path)
            source = inspect.getsource(module)
            named = r.equations & labels(source)
            assert not (named and r.paper in source), (
                f"line {r.line}: {module.__name__} names {r.paper}'s Eq. {sorted(named)}, which the page marks absent "
                "there: say what the code computes instead"
            )


def test_equation_labels_are_read_as_ranges_and_lists() -> None:
    assert labels("H-Mem's Eq. 1-3 and Eqs. 9, 10 and 11; Eq. (5)") == {1, 2, 3, 5, 9, 10, 11}
    assert Row("HMO", "Eq. 6, §3.4: the drift gate", ("x",), "adapted", 1).equations == {6}
    assert Row("HMO", "§3.4: the drift gate (Eq. 6)", ("x",), "adapted", 1).equations == set()
