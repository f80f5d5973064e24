"""The command line, run as a user would: ``python -m memstrata`` on the bundled example, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE, REPO

pytestmark = pytest.mark.integration


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memstrata", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "160"},
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    done = _run("ingest", str(EXAMPLE), "--user", "demo", "--data-dir", str(folder))
    assert done.returncode == 0, done.stderr[-2000:]
    return folder


def test_ask_prints_the_best_evidence_ranked_before_the_context(store: Path) -> None:
    done = _run("ask", "When did Tom run the Brighton half marathon?", "--user", "demo", "--data-dir", str(store))
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    ranked, context = out.index("best evidence, ranked"), out.index("packed context")
    assert ranked < context
    first_row = out[ranked:context].split("│ 2 │")[0]  # everything before the second row
    assert "Brighton half marathon" in first_row and "s2:t2" in first_row
    assert "via summary" in out[ranked:context]


def test_ask_json_stays_machine_readable(store: Path) -> None:
    done = _run("ask", "Where does Priya work?", "--user", "demo", "--data-dir", str(store), "--json")
    result = json.loads(done.stdout)
    assert result["evidence"] and {"found_by", "level", "score_parts"} <= set(result["evidence"][0])


def test_errors_reach_the_user_as_one_line_not_a_traceback(store: Path, tmp_path: Path) -> None:
    done = _run("ingest", str(tmp_path / "missing.json"), "--user", "demo", "--data-dir", str(store))
    assert done.returncode == 2 and "no such file" in done.stderr and "Traceback" not in done.stderr


def test_inspect_lists_entities_and_shows_one_with_its_facts_and_raw_turns(store: Path) -> None:
    listed = _run("inspect", "--user", "demo", "--data-dir", str(store), "--entities")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "entities of demo" in listed.stdout and "Priya" in listed.stdout and "speaker" in listed.stdout
    one = _run("inspect", "--user", "demo", "--data-dir", str(store), "--entity", "miso")
    assert one.returncode == 0, one.stderr[-2000:]
    assert "Miso comes with Priya" in one.stdout and "s1:t4" in one.stdout and "relations" in one.stdout
    missing = _run("inspect", "--user", "demo", "--data-dir", str(store), "--entity", "Nobody Atall")
    assert missing.returncode == 2 and "no entity named" in missing.stderr and "Traceback" not in missing.stderr


def test_reading_commands_never_create_a_store_and_say_what_is_missing(store: Path, tmp_path: Path) -> None:
    """A mistyped --data-dir, an unknown user or conversation, a bad --html folder, an absurd budget: one clear
    line and exit code 2, never a traceback, and nothing created.
    """
    typo = tmp_path / "no-such-store"
    done = _run("ask", "Where does Priya work?", "--user", "demo", "--data-dir", str(typo))
    assert done.returncode == 2 and f"no memstrata store at {typo}" in done.stderr and not typo.exists()
    done = _run("inspect", "--user", "demo", "--data-dir", str(typo))
    assert done.returncode == 2 and not typo.exists()
    afile = tmp_path / "a-file"
    afile.write_text("x")
    done = _run("ask", "Where?", "--user", "demo", "--data-dir", str(afile))
    assert done.returncode == 2 and "(it is a file)" in done.stderr
    done = _run("ask", "Where does Priya work?", "--user", "nobody", "--data-dir", str(store))
    assert done.returncode == 2 and "no memory for user 'nobody'" in done.stderr
    done = _run("ask", "Where does Priya work?", "--user", "demo", "-c", "nope", "--data-dir", str(store))
    assert done.returncode == 2 and "no memory for conversation 'nope' of user 'demo'" in done.stderr
    done = _run(
        "ask", "Where?", "--user", "demo", "--html", str(tmp_path / "missing" / "t.html"), "--data-dir", str(store)
    )
    assert done.returncode == 2 and "does not exist" in done.stderr
    for bad in (["--budget", "100000000000"], ["--budget", "0"], ["--top", "-1"]):
        done = _run("ask", "Where?", "--user", "demo", *bad, "--data-dir", str(store))
        assert done.returncode == 2 and "Traceback" not in done.stderr
    for done in (_run("ask", "x", "-u", "nobody", "--data-dir", str(store)),):
        assert "Traceback" not in done.stderr


def test_version() -> None:
    from importlib.metadata import version

    done = _run("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"memstrata {version('memstrata')}"


def test_ask_with_an_unreachable_model_says_so_shows_the_evidence_and_exits_2(store: Path) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "160",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
        "OPENAI_API_KEY": "sk-none",
    }  # port 9: nothing listens, every connection is refused at once
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memstrata",
            "ask",
            "Where does Priya work?",
            "--user",
            "demo",
            "--data-dir",
            str(store),
            "--model",
            "any-model",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env=env,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: answer failed: " in done.stderr and "Traceback" not in done.stderr
    assert "Tidewater" in done.stdout  # the evidence is still shown


def test_flags_show_no_value_and_every_option_has_help() -> None:
    import typer
    from typer.testing import CliRunner

    from memstrata.cli import app

    group = typer.main.get_command(app)  # typer's own click: options are told by their type name
    assert len(group.commands) >= 10
    for name, command in group.commands.items():
        options = [p for p in command.params if p.param_type_name == "option"]
        for param in options:
            assert (param.help or "").strip(), f"memstrata {name} {param.opts[0]} has no help text"
        shown = CliRunner().invoke(app, [name, "--help"], env={"NO_COLOR": "1"}, terminal_width=200)
        assert shown.exit_code == 0, shown.output
        flags = [o for p in options if p.is_flag for o in p.opts]
        for line in shown.output.splitlines():
            if any(f" {flag} " in line for flag in flags if flag != "--help"):
                assert "<bool>" not in line, line  # a flag takes no value, so none is shown
