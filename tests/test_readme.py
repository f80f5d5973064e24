"""Every README block marked "runs as a test" runs, offline, as a user would paste it."""

from __future__ import annotations

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


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code: str, tmp_path) -> None:
    env = {**os.environ, "MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1"}
    env.pop("MEMSTRATA_MODEL", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
