"""The command line tells the truth about what it was given and what it holds.

Stored text comes out as it was written (never read as console markup, never as HTML); every failure is one line
on stderr with exit code 2 (1 for problems ``check`` found, 130 for an interrupted ingest); a command that only
reads creates nothing. Commands run in-process through typer's CliRunner on one store per module, written with
hash embeddings (fast, offline): escaping and exit codes do not depend on the embedder.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from conftest import HashEmbeddings
from typer.testing import CliRunner, Result

import memstrata.cli as cli
from memstrata.client import Memstrata
from memstrata.context import Context

USER = "ann[/b]"  # ids are input too, and are printed in titles and messages
CONV = "chat[i]"  # an opening tag: read as markup, it vanished without an error
HOSTILE = ("[/b]", "[bold]x[/bold]", "x[0:2]", "[s3:t2]", "[link=http://e]y[/link]", ":thumbs_up:")
MESSAGES = [
    {"speaker": "Ann", "text": "Close it with [/b] please", "timestamp": "2024-03-01 10:00 [/b]"},
    {"speaker": "Bob", "text": "I wrote [bold]x[/bold] and x[0:2] :thumbs_up:", "timestamp": "2024-03-01 10:01"},
    {
        "speaker": "Ann",
        "text": "See [s3:t2] or [link=http://e]y[/link] <script>alert(1)</script>",
        "timestamp": "2024-03-01 10:02",
    },
]
UPDATED = "Close it with [/b] please, [bold]now[/bold]"
RUNNER = CliRunner()
HASH = HashEmbeddings()  # one instance: the store caches by embedder, and remembers which one wrote it


class _HashMemstrata(Memstrata):
    """What the CLI builds, on hash embeddings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, embeddings=HASH, **kwargs)


@pytest.fixture(scope="module", autouse=True)
def _hash_embeddings() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "Memstrata", _HashMemstrata)
        yield


def run(*args: str, stdin: str | None = None, env: dict[str, str | None] | None = None) -> Result:
    """One command, wide enough that no table cell is wrapped, with no model configured."""
    quiet = {"COLUMNS": "400", "MEMSTRATA_MODEL": None, "MEMSTRATA_INGEST_MODEL": None, "MEMSTRATA_CHROMA_URL": None}
    return RUNNER.invoke(cli.app, list(args), input=stdin, env={**quiet, **(env or {})})


def one_line_error(done: Result, code: int = 2) -> str:
    """The failure's stderr, checked to be one line, no traceback, with the exit code."""
    assert done.exit_code == code, (done.exit_code, done.output, done.exception)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.output, done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("truth") / "store"
    source = folder.parent / "hostile.json"
    source.write_text(json.dumps(MESSAGES), encoding="utf-8")
    done = run("ingest", str(source), "-u", USER, "-c", CONV, "--close", "--data-dir", str(folder))
    assert done.exit_code == 0, done.output
    done = run("update", "-u", USER, "-c", CONV, "--turn", "s1:t0", "--text", UPDATED, "--data-dir", str(folder))
    assert done.exit_code == 0, done.output  # so `history` has an event quoting stored text
    return folder


def _ok(done: Result) -> str:
    assert done.exit_code == 0, (done.output, done.exception)
    return done.stdout


# ---- stored text is data ----------------------------------------------------------------------------------------


def test_every_command_prints_stored_markup_as_written(store: Path) -> None:
    at = ("-u", USER, "--data-dir", str(store))
    asked = _ok(run("ask", "what about [/b] and x[0:2]?", *at))
    for text in (MESSAGES[1]["text"], MESSAGES[2]["text"], UPDATED):
        assert text in asked  # in the evidence table and in the packed context
    listed = _ok(run("list", *at))
    assert all(m in listed for m in (UPDATED, MESSAGES[1]["text"], MESSAGES[2]["text"], USER, CONV))
    tree = _ok(run("inspect", *at))
    assert all(text in tree for text in (USER, CONV, "[/b] please", "2024-03-01 10:00 [/b]"))
    for unit, text in (("s1:t2", MESSAGES[2]["text"]), ("s1:t1", MESSAGES[1]["text"])):
        assert text in _ok(run("inspect", *at, "--unit", unit))
    episode = _ok(run("inspect", *at, "--unit", "ep:s1:0-2"))
    assert all(h in episode for h in HOSTILE)
    for view, shown in (
        (["--tree"], (USER, CONV)),
        (["--window", "2024-03"], (CONV, "[/b] please", "2024-03-01 10:00 [/b]")),
        (["--themes"], (CONV,)),
        (["--entities"], (USER, CONV)),
        (["--persona", "Ann"], ("Ann",)),
    ):
        out = _ok(run("inspect", *at, *view))
        assert all(text in out for text in shown), (view, out)
    assert f"checked user {USER!r}: 1 conversation, 3 turns" in _ok(run("check", *at))
    events = [json.loads(line) for line in _ok(run("history", *at)).splitlines()]
    assert [(e["event"], e["before"], e["after"]) for e in events] == [("update", MESSAGES[0]["text"], UPDATED)]


def test_errors_quoting_input_print_it_as_written(store: Path) -> None:
    at = ("--data-dir", str(store))
    line = one_line_error(run("ask", "q", "-u", "x[/b]", *at))
    assert "no memory for user 'x[/b]'" in line
    line = one_line_error(run("inspect", "-u", USER, "--unit", "[bold]u[/bold]", *at))
    assert "no unit '[bold]u[/bold]'" in line
    line = one_line_error(run("list", "-u", USER, "-c", "[s3:t2]", *at))
    assert "conversation '[s3:t2]'" in line


class _Tags(HTMLParser):
    """Every start tag's name and attribute names."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, set[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {name for name, _ in attrs}))


def _tags(page: str) -> list[tuple[str, set[str]]]:
    parser = _Tags()
    parser.feed(page)
    return parser.tags


def test_html_pages_escape_stored_text_and_the_question(store: Path, tmp_path: Path) -> None:
    at = ("-u", USER, "--data-dir", str(store))
    memory, trace = tmp_path / "memory.html", tmp_path / "trace.html"
    _ok(run("inspect", *at, "--html", str(memory)))
    _ok(run("ask", 'see x" onmouseover="alert(1) <script>alert(2)</script>', *at, "--html", str(trace)))
    for page in (memory.read_text(encoding="utf-8"), trace.read_text(encoding="utf-8")):
        assert "<script>alert(" not in page
        assert [tag for tag, _ in _tags(page)].count("script") == 1  # the page's own search script
        assert not any("onmouseover" in attrs for _, attrs in _tags(page))
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in memory.read_text(encoding="utf-8")


def test_the_persona_view_prints_its_speaker_items_and_turns_as_written(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstrata.memory.levels import Persona, PersonaItem
    from memstrata.views import persona

    item = PersonaItem(text="likes x[0:2] and [bold]y[/bold]", fact_id="fact[/b]", turn_ids=["s1:t2"])
    version = Persona(
        user_id=USER, conversation_id=CONV, speaker="Ann [/b]", dimension="interests", version=1, items=[item]
    )  # offline on hash embeddings no persona is built: this one is read as if stored
    monkeypatch.setattr(persona, "read_personas", lambda *a, **k: [version])
    out = _ok(run("inspect", "-u", USER, "--data-dir", str(store), "--persona", "Ann [/b]"))
    assert all(text in out for text in ("Ann [/b]", CONV, item.text, "[fact[/b]]", MESSAGES[2]["text"])), out


# ---- nothing created by reading ---------------------------------------------------------------------------------


def test_reading_commands_and_a_failed_ingest_create_no_store(tmp_path: Path) -> None:
    typo = tmp_path / "no-such-store"
    at = ("--data-dir", str(typo))
    for command in (
        ["history", "-u", "ann"],
        ["check", "-u", "ann"],
        ["forget", "-u", "ann", "--yes"],
        ["reindex"],
        ["ask", "q", "-u", "ann"],
        ["list", "-u", "ann"],
    ):
        assert f"no memstrata store at {typo}" in one_line_error(run(*command, *at)), command
        assert not typo.exists(), command
    assert "no such file" in one_line_error(run("ingest", str(tmp_path / "missing.json"), "-u", "ann", *at))
    assert not typo.exists()
    for name, text in (("bad.json", '{"bad'), ("no-text.json", '[{"speaker": "Ann"}]')):
        (tmp_path / name).write_text(text, encoding="utf-8")
        one_line_error(run("ingest", str(tmp_path / name), "-u", "ann", *at))
        assert not typo.exists(), name  # the store it opened held nothing, and is gone


# ---- unknown user or conversation, and what check checked ----------------------------------------------------------


def test_an_unknown_user_or_conversation_is_one_line_and_exit_2_for_every_reading_command(store: Path) -> None:
    at = ("--data-dir", str(store))
    for who in (["-u", "nobody"], ["-u", USER, "-c", "nope"]):
        for command in (
            ["ask", "q"],
            ["list"],
            ["inspect"],
            ["history"],
            ["check"],
            ["update", "--turn", "s1:t0", "--text", "x", *(["-c", "nope"] if "-c" not in who else [])],
            ["delete", "--yes", *(["-c", "nope"] if "-c" not in who else [])],
        ):
            assert "no memory for" in one_line_error(run(*command, *who, *at)), (command, who)
    assert "no memory for user 'nobody'" in one_line_error(run("forget", "-u", "nobody", "--yes", *at))


def test_check_says_what_it_checked_and_exits_1_on_problems(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memstrata.memory.store import invariants

    at = ("-u", USER, "--data-dir", str(store))
    out = _ok(run("check", *at, "-c", CONV))
    assert out.strip().startswith(f"checked conversation {CONV!r} of user {USER!r}: 1 conversation, 3 turns, ")
    assert out.strip().endswith("units: no problems")
    problem = invariants.Problem("turn", CONV, "summary x[0:2]", "it links to turn [/b], which is not stored")
    monkeypatch.setattr(invariants, "check_store", lambda *a, **k: [problem])
    done = run("check", *at)
    assert "1 problem(s)" in one_line_error(done, code=1)
    assert str(problem) in done.stdout


# ---- an unreachable Chroma server ---------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when this returns: nothing listens there


def test_an_unreachable_chroma_server_is_one_line_and_exit_2_for_every_command(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    source = tmp_path / "m.json"
    source.write_text(json.dumps(MESSAGES[:1]), encoding="utf-8")
    for command in (
        ["ingest", str(source), "-u", "ann"],
        ["ask", "q", "-u", "ann"],
        ["inspect", "-u", "ann"],
        ["list", "-u", "ann"],
        ["update", "-u", "ann", "-c", "c", "--turn", "s1:t0", "--text", "x"],
        ["delete", "-u", "ann", "-c", "c", "--yes"],
        ["history", "-u", "ann"],
        ["check", "-u", "ann"],
        ["forget", "-u", "ann", "--yes"],
        ["reindex"],
    ):
        line = one_line_error(run(*command, "--chroma-url", url))
        assert f"the Chroma server at {url} is unreachable" in line and "chroma run" in line, command
        assert "--chroma-url" in line


# ---- ingest: Ctrl-C, stdin ------------------------------------------------------------------------------------------


def test_ctrl_c_during_ingest_says_the_same_command_resumes_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(self: Memstrata, source: Any, **kwargs: Any) -> dict[str, Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(Memstrata, "ingest", interrupted)
    source = tmp_path / "m.json"
    source.write_text(json.dumps(MESSAGES), encoding="utf-8")
    line = one_line_error(run("ingest", str(source), "-u", "ann", "--data-dir", str(tmp_path / "s")), code=130)
    assert "interrupted" in line and "same command again" in line and "resume" in line


def test_ingest_dash_reads_json_from_stdin(store: Path) -> None:
    at = ("-u", "piped", "--data-dir", str(store))
    message = [{"speaker": "Cy", "text": "Sent through a pipe [/b]", "timestamp": "2024-03-02 09:00"}]
    _ok(run("ingest", "-", *at, "-c", "pipe", stdin=json.dumps(message)))
    assert "Cy: Sent through a pipe [/b]" in _ok(run("list", *at))
    assert "<stdin>: malformed JSON" in one_line_error(run("ingest", "-", *at, stdin="{not json"))


# ---- a blank user -------------------------------------------------------------------------------------------------


def test_a_blank_user_is_one_line_and_exit_2_for_every_command(store: Path) -> None:
    at = ("--data-dir", str(store))
    for blank in ("", "   "):
        for command in (
            ["ingest", "-", "-c", "x"],
            ["ask", "q"],
            ["inspect"],
            ["list"],
            ["update", "-c", CONV, "--turn", "s1:t0", "--text", "x"],
            ["delete", "-c", CONV, "--yes"],
            ["history"],
            ["check"],
            ["forget", "--yes"],
        ):
            assert "--user is empty" in one_line_error(run(*command, "-u", blank, *at, stdin="[]")), command


# ---- a model with no endpoint, and the model options passed on -----------------------------------------------

NO_ENDPOINT = {"OPENAI_API_KEY": None, "OPENAI_BASE_URL": None, "OPENAI_API_BASE": None, "MEMSTRATA_BASE_URL": None}


def test_a_model_without_a_key_or_base_url_fails_before_any_work(store: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    source = tmp_path / "m.json"
    source.write_text(json.dumps(MESSAGES), encoding="utf-8")
    line = one_line_error(
        run("ingest", str(source), "-u", "ann", "--model", "gpt-x", "--data-dir", str(fresh), env=NO_ENDPOINT)
    )
    assert "OPENAI_API_KEY" in line and "--base-url" in line and not fresh.exists()
    line = one_line_error(
        run("ask", "q", "-u", USER, "--data-dir", str(store), env={**NO_ENDPOINT, "MEMSTRATA_MODEL": "gpt-x"})
    )
    assert "$MEMSTRATA_MODEL 'gpt-x'" in line and "OPENAI_API_KEY" in line


@pytest.mark.skipif(
    "base_url" not in {f.name for f in dataclasses.fields(Context)},
    reason="memstrata.context.Context has no base_url and ingest_model settings yet",
)
def test_base_url_and_ingest_model_reach_memstrata_only_when_given(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, Any]] = []

    class Recording(_HashMemstrata):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            seen.append(kwargs)
            super().__init__(*args, **kwargs)

    def no_work(self: Memstrata, source: Any, **kwargs: Any) -> dict[str, Any]:
        return {"turns_seen": 0}

    monkeypatch.setattr(cli, "Memstrata", Recording)
    monkeypatch.setattr(Memstrata, "ingest", no_work)
    source = tmp_path / "m.json"
    source.write_text(json.dumps(MESSAGES), encoding="utf-8")
    given = ["--model", "small", "--ingest-model", "big", "--base-url", "http://127.0.0.1:9/v1"]
    _ok(run("ingest", str(source), "-u", "ann", *given, "--data-dir", str(tmp_path / "s"), env=NO_ENDPOINT))
    _ok(run("ingest", str(source), "-u", "ann", "--data-dir", str(tmp_path / "s")))
    assert seen[0]["model"] == "small" and seen[0]["ingest_model"] == "big"
    assert seen[0]["base_url"] == "http://127.0.0.1:9/v1"
    assert not {"model", "ingest_model", "base_url"} & set(seen[1])
    monkeypatch.setattr(Memstrata, "ask", lambda *a, **k: (_ for _ in ()).throw(ValueError("stopped here")))
    assert "stopped here" in one_line_error(run("ask", "q", "-u", USER, *given, "--data-dir", str(store)))
    assert seen[-1]["base_url"] == "http://127.0.0.1:9/v1" and seen[-1]["ingest_model"] == "big"


# ---- users, export and import ----------------------------------------------------------------------------------


def test_export_then_import_into_an_empty_store_then_export_is_byte_identical(store: Path, tmp_path: Path) -> None:
    listed = _ok(run("users", "--data-dir", str(store)))
    assert USER in listed.splitlines()
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _ok(run("export", str(first), "-u", USER, "--data-dir", str(store)))
    other = tmp_path / "other"
    imported = json.loads(_ok(run("import", str(first), "--data-dir", str(other))))
    assert imported["turns"] == len(MESSAGES)
    _ok(run("export", str(second), "-u", USER, "--data-dir", str(other)))
    assert first.read_bytes() == second.read_bytes()
    assert "no problems" in _ok(run("check", "-u", USER, "--data-dir", str(other)))
    # a second import over a user with memory is refused, in one line, and leaves the store as it was
    assert "already" in one_line_error(run("import", str(first), "--data-dir", str(other)))
    stdout = _ok(run("export", "-", "-u", USER, "--data-dir", str(other)))
    assert stdout.encode("utf-8") == first.read_bytes()  # '-' writes the same lines to standard output
    assert "not a memstrata export" in one_line_error(
        run("import", "-", "--as", "zed", "--data-dir", str(other), stdin='{"x": 1}\n')
    )


def test_check_repair_rebuilds_what_is_derived_and_leaves_the_store_clean(tmp_path: Path) -> None:
    folder, source = tmp_path / "store", tmp_path / "hostile.json"
    source.write_text(json.dumps(MESSAGES), encoding="utf-8")
    at = ("-u", USER, "--data-dir", str(folder))
    _ok(run("ingest", str(source), "-c", CONV, "--close", *at))
    mem = _HashMemstrata(path=folder)
    episode = mem.store.get("episode", user_id=USER)[0]
    mem.store.delete("episode", user_id=USER, conversation_id=CONV, unit_ids=[episode.unit_id])  # facts orphaned
    mem.close()
    broken = run("check", *at)
    assert broken.exit_code == 1 and "problem(s)" in broken.stderr
    repaired = run("check", "--repair", *at)
    assert repaired.exit_code == 0 and "no problems" in repaired.stdout and "rebuilt" in repaired.stderr
    assert all(m["text"] in _ok(run("list", *at)) for m in MESSAGES)  # every turn kept
