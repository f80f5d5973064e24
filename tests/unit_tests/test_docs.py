"""The docs site builds with ``mkdocs build --strict``, and its generated pages hold what the code holds."""

from __future__ import annotations

import dataclasses
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1", "NO_COLOR": "1"}
    env.pop("MEMSTRATA_MODEL", None)
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return out


def _page(site: Path, name: str) -> str:
    return html.unescape((site / name / "index.html").read_text())


def test_the_configuration_page_lists_every_context_field(site: Path) -> None:
    from memstrata.context import GROUPS, Context

    page = _page(site, "configuration")
    cells = set(re.findall(r"<tr>\s*<td><code>([\w.]+)</code></td>", page))
    own = {f.name for f in dataclasses.fields(Context)} - set(GROUPS)
    grouped = {f"{name}.{f.name}" for name, kind in GROUPS.items() for f in dataclasses.fields(kind)}
    assert cells == own | grouped and len(own) + len(GROUPS) <= 40  # issue 55: at most 40 fields of its own
    assert "<td><code>themes.search_k</code></td>\n<td><code>int</code></td>\n<td><code>8</code></td>" in page
    assert "<td><code>level1_k</code></td>\n<td><code>int</code></td>\n<td><code>10</code></td>" in page


def test_the_cli_page_shows_every_command_help(site: Path) -> None:
    import typer

    from memstrata.cli import app

    def paths(command: object, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        found = [prefix]
        for name, sub in getattr(command, "commands", {}).items():
            found += paths(sub, (*prefix, name))
        return found

    page = _page(site, "cli")
    commands = paths(typer.main.get_command(app))
    assert len(commands) > 10
    for path in commands:
        title = " ".join(("memstrata", *path))
        assert f"<code>{title}</code>" in page, title
        assert f"Usage: {title} " in page, title
    assert "\x1b[" not in page


def test_the_architecture_page_draws_both_compiled_graphs(site: Path) -> None:
    from memstrata.graphs.ingestion import graph as ingestion
    from memstrata.graphs.retrieval import graph as retrieval

    page = _page(site, "architecture")
    drawings = re.findall(r'<pre class="mermaid"><code>(.*?)</code></pre>', page, re.S)
    assert len(drawings) == 2

    def lines(text: str) -> list[str]:  # Markdown turns the drawing's tabs into spaces
        return [line.strip() for line in text.strip().splitlines()]

    for drawing, graph in zip(drawings, (ingestion, retrieval), strict=True):
        assert lines(drawing) == lines(graph.get_graph().draw_mermaid())


def test_the_api_reference_documents_the_public_surface(site: Path) -> None:
    client = _page(site, "reference/client")
    for method in ("ingest", "retrieve", "ask", "astream", "memories", "update", "delete", "history"):
        assert f'id="memstrata.client.Memstrata.{method}"' in client, method
    assert 'id="memstrata.integrations.middleware.MemstrataMiddleware"' in _page(site, "reference/integrations")
    assert 'id="memstrata.result.RetrievalResult"' in _page(site, "reference/results")
