"""Shared fixtures: real MiniLM, embedded Chroma in a temp dir, and a cheap deterministic embedder."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.pop("MEMSTRATA_MODEL", None)

pytest_plugins = ["plugins.llm_server", "plugins.chroma_server"]

REPO = Path(__file__).resolve().parents[1]
# The tests live in unit_tests/ and integration_tests/ (by what most of a file's tests use; each test's own marker is
# set below). A test module imports another's helpers and fixtures, and a test's subprocess imports this module
# first, whichever folder it is in: both folders are importable.
for _folder in ("integration_tests", "unit_tests"):
    if str(REPO / "tests" / _folder) not in sys.path:
        sys.path.insert(0, str(REPO / "tests" / _folder))
LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
EXAMPLE = REPO / "examples" / "conversation.json"
# one short session about Ann, for persona tests: where she lives, her work, a hobby and a value
PORTO = [
    ("Ann", "I live in Porto with my husband Tom."),
    ("Bo", "Nice city! What do you do there?"),
    ("Ann", "I work as a nurse at the city hospital."),
    ("Bo", "That sounds demanding."),
    ("Ann", "I love painting landscapes on weekends."),
    ("Bo", "Lovely hobby."),
    ("Ann", "I believe everyone deserves kindness."),
    ("Bo", "True."),
]


def session_messages(n: int, when: str, lines: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Session ``n``'s messages, all at ``when``, with ids ``s<n>:<i>``."""
    return [
        {"speaker": sp, "text": t, "timestamp": when, "session": str(n), "id": f"s{n}:{i}"}
        for i, (sp, t) in enumerate(lines)
    ]


class HashEmbeddings(Embeddings):
    """Deterministic bag-of-words vectors: fast, offline, and similar texts stay similar."""

    name = "test-hash-bow"
    dimension = 64

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dimension)
        for word in text.lower().split():
            v[int(hashlib.md5(word.strip(".,!?").encode()).hexdigest(), 16) % self.dimension] += 1.0
        n = np.linalg.norm(v) or 1.0
        return (v / n).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


@pytest.fixture(scope="session")
def minilm():
    from memstrata.memory.embeddings import MiniLMEmbeddings

    return MiniLMEmbeddings()


@pytest.fixture
def hash_embeddings() -> HashEmbeddings:
    return HashEmbeddings()


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "chroma")


@pytest.fixture(scope="session")
def locomo_path() -> Path:
    if not LOCOMO.is_file():
        pytest.fail(f"LoCoMo data missing at {LOCOMO}: ../shared must sit beside the repo")
    return LOCOMO


def run_bench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``memstrata bench ARGS`` in a fresh process, offline, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "memstrata.cli", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def assert_store_ok(store, user_id: str, conversation_id: str | None = None) -> None:
    """``memstrata check`` finds nothing wrong in this user's memory."""
    from memstrata.memory.store.invariants import check_store

    problems = check_store(store, user_id, conversation_id)
    assert problems == [], "\n".join(map(str, problems[:20]))


# ---- unit, integration, slow: set here from what each test uses, so a new test is sorted without a mark ----
#
#   pytest -m unit                   no real model or server: hash embeddings, embedded Chroma in a temp folder
#   pytest -m integration            the real MiniLM weights, a `chroma run` server or the llama.cpp server
#   pytest -m "not slow"             everything but the tests in SLOW (20 s or more each, about 33 min in all)
#   pytest -m "unit and not slow"    the quick loop
#
# Every test is exactly one of unit and integration. A unit test that loads the MiniLM weights or starts a
# real server fails and says so (see ``_unit_tests_stay_offline``): add it to INTEGRATION below.

REAL_SERVERS = {"chroma_server", "llama_server", "llama_server_factory"}
"""Fixtures that start a real server process (``tests/plugins``)."""
LLAMA_SERVERS = {"llama_server", "llama_server_factory"}
REAL_FIXTURES = {"minilm", *REAL_SERVERS}

REAL_PARAMS = {("test_edges_counters.py", "backend"): "chroma", ("test_levels.py", "store"): "server"}
"""Parametrized fixtures that ask for ``chroma_server`` (``request.getfixturevalue``) for one of their params."""

INTEGRATION = {
    # the packaged MiniLM, in this process or in the command a test runs
    "test_bench.py::test_bench_scale_smoke",
    "test_bench_tenants.py::test_bench_tenants_smoke",
    "test_bench_chat.py::test_the_command_writes_json_and_a_plot",
    "test_chat_writes.py::test_three_messages_written_one_at_a_time_are_three_turns_and_the_cat_is_found",
    "test_chat_writes.py::test_a_retrieval_before_the_first_write_leaves_nothing_that_breaks_the_next",
    "test_chat_writes.py::test_the_cli_appends_a_json_list_to_a_stored_conversation",
    "test_chat_writes.py::test_inspect_shows_each_conversations_own_summaries_in_text_and_html",
    "test_check.py::test_the_cli_prints_what_it_checked_then_each_problem",
    # a real `langgraph dev` server, which loads MiniLM at its first run
    "test_deploy_auth.py::test_through_the_server_each_caller_reaches_only_their_own_memory",
    "test_deploy_auth.py::test_through_the_server_a_run_asking_for_more_is_refused_with_its_reason",
    "test_deploy_auth.py::test_through_the_server_no_token_no_run_and_threads_are_private",
}
"""Tests (``file::function``, or a whole ``file``) that use the real model where no fixture shows it."""

SLOW = {
    # seconds on 2 cores (pytest --durations), all parametrized cases together; 20 s or more is slow
    "test_bench_longmemeval.py::test_the_command_with_minilm_runs_bm25_dense_and_memstrata": 58,
    "test_crash_resume.py::test_killed_llm_mode_ingest_resumes_to_exactly_a_clean_run": 1480,
    "test_crash_resume.py::test_killed_ingest_resumes_to_exactly_a_clean_run": 110,
    "test_bench.py::test_bench_scale_smoke": 137,
    "test_bench_tenants.py::test_bench_tenants_smoke": 53,
    "test_isolation.py::test_a_thousand_queries_through_every_entry_point_never_cross_tenants": 86,
    "test_readme.py::test_readme_example_runs": 59,
    "test_locomo_integration.py": 39,  # its module fixture ingests a LoCoMo conversation with MiniLM
    "test_bench.py::test_baselines_on_conv26": 30,
    "test_concurrency.py::test_eight_processes_ingest_eight_users_at_once": 23,
    "test_concurrency.py::test_a_server_stopped_mid_ingest_is_a_clear_error_and_a_rerun_loses_nothing": 20,
    "test_two_writers_stress.py::test_two_processes_appending_through_a_server_leave_a_sound_store": 23,
    "test_served_users.py::test_twenty_users_stream_at_once_and_each_sees_only_their_own_memory": 67,
    "test_deploy_auth.py::test_through_the_server_each_caller_reaches_only_their_own_memory": 27,
}
"""Tests (``file::function``, or a whole ``file``) that take 20 s or more, with the seconds they took."""


def _keys(item: pytest.Item) -> set[str]:
    name = item.path.name
    return {name, f"{name}::{getattr(item, 'originalname', item.name)}"}


def _uses_real_things(item: pytest.Item) -> bool:
    if REAL_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("llm_server"):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    return any(params.get(fixture) == value for (file, fixture), value in REAL_PARAMS.items() if file == item.path.name)


def _check_lists(items: list[pytest.Item]) -> None:
    """A test named in INTEGRATION or SLOW that its collected module does not hold was renamed: say so."""
    modules = {item.path.name: item.module for item in items if isinstance(item, pytest.Function)}
    gone = [
        key
        for key in (*INTEGRATION, *SLOW)
        if "::" in key and (module := modules.get(key.split("::")[0])) and not hasattr(module, key.split("::")[1])
    ]
    if gone:
        msg = f"tests/conftest.py lists tests that do not exist: {', '.join(sorted(gone))}"
        raise pytest.UsageError(msg)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test ``unit`` or ``integration`` (and ``llm_server``, ``slow``) from what it uses."""
    _check_lists(items)
    for item in items:
        keys = _keys(item)
        if LLAMA_SERVERS & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("llm_server"):
            item.add_marker(pytest.mark.llm_server)
        integration = item.get_closest_marker("integration") is not None
        if not integration and (_uses_real_things(item) or keys & INTEGRATION):
            item.add_marker(pytest.mark.integration)
            integration = True
        if not integration:
            item.add_marker(pytest.mark.unit)
        if keys & SLOW.keys() and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


def _not_in_a_unit_test(what: str) -> NoReturn:
    pytest.fail(f"a test marked unit {what}: add it to INTEGRATION in tests/conftest.py", pytrace=False)


_running: list[pytest.Item] = []  # the test being run, which a session-scoped fixture's request does not name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> None:
    """A real server started for a unit test (e.g. through ``request.getfixturevalue``) fails that test."""
    if fixturedef.argname in REAL_SERVERS and _running and _running[-1].get_closest_marker("unit") is not None:
        _not_in_a_unit_test(f"starts {fixturedef.argname}")


_FAILED = pytest.StashKey[bool]()  # the test's own call failed


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def _unit_tests_stay_offline(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test marked unit may not load the MiniLM weights: it fails, so ``-m unit`` stays offline."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    loaded: list[str] = []

    def refuse(path: str, device: str) -> NoReturn:
        loaded.append(path)
        _not_in_a_unit_test("loads the MiniLM weights")

    monkeypatch.setattr("memstrata.memory.embeddings._load_model", refuse)
    yield
    if loaded and not request.node.stash.get(_FAILED, False):  # the code under test swallowed the failure
        _not_in_a_unit_test("loads the MiniLM weights")
