"""The two HTML pages, rendered in a real headless Chromium: they load offline, run their script, show the levels."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLE, HashEmbeddings

from memstrata import Memstrata
from memstrata.views.pages import memory_page, trace_page

FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs it with apt-get install -y chromium")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return path


def _render(chromium: str, page: Path, tmp_path: Path) -> str:
    """The DOM after the page's script ran; fails on any console error. Also takes a screenshot."""
    profile = tmp_path / "profile"
    dom = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    errors = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not errors, errors
    shot = tmp_path / (page.stem + ".png")
    subprocess.run(
        [
            chromium,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={shot}",
            "--window-size=1200,900",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert shot.stat().st_size > 5000
    return dom.stdout


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory) -> Memstrata:
    memory = Memstrata(path=tmp_path_factory.mktemp("chroma"), embeddings=HashEmbeddings())
    memory.ingest(EXAMPLE, user_id="demo")
    return memory


def test_memory_page_renders_every_level(chromium: str, mem: Memstrata, tmp_path: Path) -> None:
    page = tmp_path / "memory.html"
    page.write_text(memory_page(mem.store, user_id="demo"), encoding="utf-8")
    html = page.read_text()
    assert "<script src" not in html and "http" not in re.sub(r"<!doctype[^>]*>", "", html)  # nothing from a CDN
    dom = _render(chromium, page, tmp_path)
    assert 'data-ready="1"' in dom  # the script ran
    assert "priya-tom" in dom and dom.count('class="kind">episode') >= 3 and "Tidewater Labs" in dom
    assert re.search(r'id="shown">\d+<', dom)


def test_memory_page_draws_the_edges_when_there_are_some(chromium: str, mem: Memstrata, tmp_path: Path) -> None:
    edges = mem.store.edges.get("demo")
    assert any(e.src == "ent:priya" for e in edges)  # ingestion wrote the entity graph (and the tree's links)
    page = tmp_path / "graph.html"
    page.write_text(memory_page(mem.store, user_id="demo"), encoding="utf-8")
    dom = _render(chromium, page, tmp_path)
    # the themes' fact-to-fact similarity edges are left out of the drawing (they would crowd out the rest)
    drawn = [e for e in edges if not (e.rel == "similar" and e.src_kind == e.dst_kind == "fact")]
    assert len(drawn) < len(edges)  # there were some to leave out
    nodes = {n for e in drawn for n in (e.src, e.dst)}
    assert 'id="graph"' in dom and dom.count("<circle") == len(nodes) and "ent:priya" in dom
    assert dom.count("<line") == len(drawn)
    mem.store.edges.delete_user("demo")
    assert 'id="graph"' not in memory_page(mem.store, user_id="demo")  # no edges: no drawing


def test_trace_page_shows_path_evidence_and_context(chromium: str, mem: Memstrata, tmp_path: Path) -> None:
    result = mem.retrieve("Where does Priya work?", user_id="demo")
    page = tmp_path / "trace.html"
    page.write_text(trace_page(result), encoding="utf-8")
    dom = _render(chromium, page, tmp_path)
    assert 'data-ready="1"' in dom
    for node in ("decompose", "predict_scope", "lookup_level1", "gate", "reflect"):
        assert f"<td>{node}</td>" in dom
    assert 'id="evidence"' in dom and "Tidewater" in dom and 'id="context"' in dom
    assert "none (offline)" in dom


def test_hostile_memories_are_escaped(mem: Memstrata, tmp_path: Path) -> None:
    mem.ingest([{"speaker": "Eve", "text": "<script>alert(1)</script> hi"}], user_id="eve")
    html = memory_page(mem.store, user_id="eve")
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)" in html
