"""BENCHMARKS.md states what the committed results files say: its current tables are benchmarks/render.py's output."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "BENCHMARKS.md"
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("benchmarks_render", ROOT / "benchmarks" / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_table(text: str) -> list[list[str]]:
    """The cells of the first Markdown table in ``text``, header first, the separator row left out."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return [rows[0], *rows[2:]]


def test_the_committed_tables_are_what_the_results_files_render_to(render: ModuleType) -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert render.replace(doc, render.render(render.load())) == doc, (
        "BENCHMARKS.md is stale: run `python benchmarks/render.py` and commit it"
    )


def test_the_first_table_is_locomo_json() -> None:
    """Read without the renderer: every number of BENCHMARKS.md's first table is locomo.json's, rounded."""
    result = json.loads((RESULTS / "locomo.json").read_text(encoding="utf-8"))
    header, *rows = first_table(DOC.read_text(encoding="utf-8"))
    budgets = [cell.removeprefix("B=") for cell in header if cell.startswith("B=")]
    assert budgets == [str(b) for b in result["budgets"]]
    assert {row[0] for row in rows} == set(result["methods"])
    for name, *cells in rows:
        stats = result["methods"][name]
        for budget, cell in zip(budgets, cells, strict=False):
            shown_all, shown_frac = (float(x) for x in cell.split(" / "))
            assert shown_all == pytest.approx(100 * stats["recall_all"][budget], abs=0.05 + 1e-9), (name, budget)
            assert shown_frac == pytest.approx(100 * stats["recall_frac"][budget], abs=0.05 + 1e-9), (name, budget)
        p50, p95 = (float(x) for x in cells[-1].split(" / "))
        assert p50 == pytest.approx(stats["latency_ms"]["p50"], abs=0.5 + 1e-9)
        assert p95 == pytest.approx(stats["latency_ms"]["p95"], abs=0.5 + 1e-9)


def test_every_current_table_names_its_commit_date_machine_and_command(render: ModuleType) -> None:
    doc = DOC.read_text(encoding="utf-8")
    for name in render.FILES:
        block = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))["provenance"]
        assert block["commit"] == "not recorded" or re.fullmatch(r"[0-9a-f]{7,40}(\+changes)?", block["commit"])
        assert re.match(r"\d{4}-\d{2}-\d{2}", block["date"])
        assert set(block["machine"]) == {"cores", "memory_gib", "platform"}
        assert block["command"] and f"`{block['command']}`" in doc, name


def test_the_history_is_linked_and_newest_first() -> None:
    assert "(docs/benchmarks/history.md)" in DOC.read_text(encoding="utf-8")
    history = (ROOT / "docs" / "benchmarks" / "history.md").read_text(encoding="utf-8")
    dates = re.findall(r"^_Added (\d{4}-\d{2}-\d{2})", history, flags=re.MULTILINE)
    assert len(dates) > 20 and dates == sorted(dates, reverse=True)


def test_percentages_round_the_stored_decimal_half_up(render: ModuleType) -> None:
    assert render.pct(0.7005) == "70.1"  # 100 * 0.7005 is 70.04999... in binary floating point
    assert render.pct(0.83984375) == "84.0"


def test_a_document_without_its_markers_is_refused(render: ModuleType) -> None:
    with pytest.raises(ValueError, match="markers"):
        render.replace("# Benchmarks\n", "table")
