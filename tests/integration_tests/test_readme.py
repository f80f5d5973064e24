"""Every README block marked "runs as a test" runs, offline, as a user would paste it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.integration
MARK = "# runs as a test"
BLOCKS = [b for b in re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S) if b.startswith(MARK)]


def test_the_readme_has_runnable_examples() -> None:
    assert len(BLOCKS) >= 4


def test_the_readme_is_short() -> None:
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_the_readme_headline_numbers_are_the_committed_run() -> None:
    """The README's recall table says what ``benchmarks/results/locomo.json`` says, to one decimal."""
    run = json.loads((REPO / "benchmarks/results/locomo.json").read_text())
    text = (REPO / "README.md").read_text()
    budgets = [str(b) for b in run["budgets"]]
    assert f"{run['questions']:,} questions" in text and len(run["conversations"]) == 10 and "all ten LoCoMo" in text
    header = re.search(r"^\| context budget \(tokens\) \| (.*) \|$", text, re.M)
    assert header and header.group(1).split(" | ") == budgets
    ours = run["methods"]["memstrata"]["recall_all"]
    best = max((m for m in run["methods"] if m != "memstrata"), key=lambda m: run["methods"][m]["recall_all"]["1500"])
    for label, recall in (("memstrata", ours), (f"best baseline ({best})", run["methods"][best]["recall_all"])):
        row = re.search(rf"^\| {re.escape(label)} \| (.*) \|$", text, re.M)
        assert row, label
        assert row.group(1).split(" | ") == [f"{100 * recall[b]:.1f}" for b in budgets], label


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code: str, tmp_path) -> None:
    env = {**os.environ, "MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1"}
    env.pop("MEMSTRATA_MODEL", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
