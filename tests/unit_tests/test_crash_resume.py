"""Crash and resume: an ingest killed with SIGKILL at each stage, then run again, equals a clean run record by record.

The ingest runs in a subprocess that kills itself the moment a chosen stage reports
progress (so every kill point is reached for sure, not by timing). Covered by
construction: every registered kind, a plugin kind with ``derive``, the edge and
counter tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from memstrata.memory.levels import levels

SCRIPT = r"""
import os, signal, sys
sys.path.insert(0, "tests")
from conftest import EXAMPLE, HashEmbeddings
from test_levels import SpeakerDigest, one_digest_per_speaker
from memstrata import Memstrata
from memstrata.memory.levels import Level, register

register(Level(kind="speaker_digest", unit=SpeakerDigest, role="event", scopes=("Long",),
               description="one digest per speaker", derive=one_digest_per_speaker))
stage, seen = sys.argv[2], []

def on_progress(event):
    seen.append(event["stage"])
    if event["stage"] == stage and seen.count(stage) == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)

if stage.startswith("upsert:"):  # die just before the nth write of one kind, in the middle of a stage
    from memstrata.memory.store import MemoryStore
    plain = MemoryStore.upsert

    def upsert(self, kind, *args, **kwargs):
        seen.append(f"upsert:{kind}")
        if f"upsert:{kind}" == stage and seen.count(stage) == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)
        return plain(self, kind, *args, **kwargs)

    MemoryStore.upsert = upsert

Memstrata(path=sys.argv[1], embeddings=HashEmbeddings()).ingest(EXAMPLE, user_id="u", on_progress=on_progress)
"""
STAGES = [
    ("turns", 1),
    ("contexts", 1),
    ("segment", 1),
    ("upsert:episode", 1),
    ("upsert:fact", 1),
    ("summaries", 1),
    ("summaries", 2),
    ("upsert:episode", 3),
    ("summaries", 3),
    ("entities", 1),
]


def _ingest(folder: Path, stage: str = "never", nth: int = 1) -> int:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, str(folder), stage, str(nth)],
        cwd=REPO,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
    ).returncode


DIGEST = r"""
import json, sys
sys.path.insert(0, "tests")
from conftest import HashEmbeddings
from memstrata.memory.store import MemoryStore

store = MemoryStore(path=sys.argv[1], embeddings=HashEmbeddings())
out = {}
for kind in store.stored_kinds():
    rows = {}
    for r in store.get(kind, user_id="u", with_vectors=True):
        blob = json.dumps([r.document, r.payload, [round(float(x), 6) for x in r.metadata["_vector"]]], sort_keys=True)
        rows[f"{r.metadata['conversation_id']}/{r.unit_id}"] = blob
    out[kind] = rows
for name, table in (("edges", store.edges.table), ("counters", store.counters.table)):
    out[name] = {r.key: json.dumps(r.fields, sort_keys=True) for r in table.get(user_id="u")}
print(json.dumps(out))
"""


def _digest(folder: Path) -> dict[str, dict[str, str]]:
    """Every record of user ``u`` in every unit collection and table: document, payload and vector, by id.

    Read in a process of its own: an embedded Chroma folder is only consistent within one process.
    """
    done = subprocess.run(
        [sys.executable, "-c", DIGEST, str(folder)],
        cwd=REPO,
        timeout=300,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


CHECK = r"""
import json, sys
sys.path.insert(0, "tests")
from conftest import HashEmbeddings
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.invariants import check_store
print(json.dumps([str(p) for p in check_store(MemoryStore(path=sys.argv[1], embeddings=HashEmbeddings()), "u")]))
"""


def _check(folder: Path) -> list[str]:
    """What ``memstrata check`` finds in user ``u``'s memory, read in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-c", CHECK, str(folder)],
        cwd=REPO,
        timeout=300,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # JSON: a problem's sentence may quote ids


def _orphans(digest: dict[str, dict[str, str]]) -> list[str]:
    """Stored units whose parent is not stored (an episode without its summary, a fact without its episode)."""
    ids = {key for rows in digest.values() for key in rows}
    out = []
    for kind in ("episode", "fact"):
        for key, blob in digest.get(kind, {}).items():
            payload = json.loads(blob)[1]
            parent = payload["summary_id"] if kind == "episode" else payload["episode_id"]
            if f"{payload['conversation_id']}/{parent}" not in ids:
                out.append(f"{key} -> {parent}")
    return out


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, str]]:
    folder = tmp_path_factory.mktemp("clean")
    assert _ingest(folder) == 0
    return _digest(folder)


@pytest.mark.parametrize(("stage", "nth"), STAGES, ids=[f"{s}-{n}" for s, n in STAGES])
def test_killed_ingest_resumes_to_exactly_a_clean_run(clean, tmp_path: Path, stage: str, nth: int) -> None:
    assert _ingest(tmp_path, stage, nth) == -9  # it really died there
    crashed = _digest(tmp_path)
    assert crashed != clean  # and left the store incomplete
    assert _orphans(crashed) == []  # but never a unit whose parent is not stored
    assert _ingest(tmp_path) == 0
    resumed = _digest(tmp_path)
    assert set(resumed) >= {lv.kind for lv in levels()} | {"speaker_digest", "edges", "counters"}
    for kind, rows in clean.items():
        assert resumed[kind].keys() == rows.keys(), (
            f"{kind}: lost {rows.keys() - resumed[kind].keys()}, extra {resumed[kind].keys() - rows.keys()}"
        )
        assert resumed[kind] == rows, kind
    assert _check(tmp_path) == []


# ---- LLM mode: the real llama.cpp server decides segments, facts, summaries, supersession and tree text ----

LLM_SCRIPT = r"""
import json, os, signal, sys
sys.path.insert(0, "tests")
from conftest import HashEmbeddings
from plugins.llm_server import make_chat_model
from memstrata import Memstrata
from memstrata.memory.store import MemoryStore

folder, stage, nth, url, source = sys.argv[1:6]
seen = []

def on_progress(event):
    seen.append(event["stage"])
    if event["stage"] == stage and seen.count(stage) == int(nth):
        os.kill(os.getpid(), signal.SIGKILL)

plain = MemoryStore.upsert

def upsert(self, kind, *args, **kwargs):
    seen.append(f"upsert:{kind}")
    if f"upsert:{kind}" == stage and seen.count(stage) == int(nth):
        os.kill(os.getpid(), signal.SIGKILL)
    return plain(self, kind, *args, **kwargs)

MemoryStore.upsert = upsert
mem = Memstrata(path=folder, embeddings=HashEmbeddings(), model=make_chat_model(url), max_fanout=1)
stats = mem.ingest(source, user_id="u", conversation_id="priya-tom", close=True, on_progress=on_progress)
print(json.dumps({k: v["calls"] for k, v in stats.get("llm", {}).items()}))
"""
LLM_STAGES = [("segment", 1), ("upsert:fact", 1), ("summaries", 1)]


def _ingest_llm(folder: Path, url: str, source: Path, stage: str = "never", nth: int = 1) -> tuple[int, str]:
    """The ingest's return code, and (when it finished) the model calls per node as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", LLM_SCRIPT, str(folder), stage, str(nth), url, str(source)],
        cwd=REPO,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, -9), done.stderr[-3000:]
    return done.returncode, done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


@pytest.fixture(scope="module")
def two_sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from test_llm_server import small_conversation

    path = tmp_path_factory.mktemp("llm-source") / "priya-tom.json"
    path.write_text(json.dumps({"conversation_id": "priya-tom", "messages": small_conversation()}))
    return path


@pytest.fixture(scope="module")
def clean_llm(
    llama_server: str, two_sessions: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, str]]:
    folder = tmp_path_factory.mktemp("clean-llm")
    code, calls = _ingest_llm(folder, llama_server, two_sessions)
    assert code == 0
    assert {"segment", "facts", "summarize"} <= {k for k, n in json.loads(calls).items() if n}, calls
    return _digest(folder)


@pytest.mark.parametrize(("stage", "nth"), LLM_STAGES, ids=[f"{s}-{n}" for s, n in LLM_STAGES])
def test_killed_llm_mode_ingest_resumes_to_exactly_a_clean_run(
    clean_llm: dict[str, dict[str, str]], llama_server: str, two_sessions: Path, tmp_path: Path, stage: str, nth: int
) -> None:
    """The model decides episode boundaries and writes facts and summaries; greedy decoding makes a redone
    episode's text the same, so the resumed store equals the clean one record by record.
    """
    assert clean_llm["episode"] and clean_llm["summary"] and clean_llm["fact"]
    assert _ingest_llm(tmp_path, llama_server, two_sessions, stage, nth)[0] == -9
    crashed = _digest(tmp_path)
    assert crashed != clean_llm and _orphans(crashed) == []
    assert _ingest_llm(tmp_path, llama_server, two_sessions)[0] == 0
    resumed = _digest(tmp_path)
    for kind, rows in clean_llm.items():
        assert resumed[kind].keys() == rows.keys(), (
            f"{kind}: lost {rows.keys() - resumed[kind].keys()}, extra {resumed[kind].keys() - rows.keys()}"
        )
        assert resumed[kind] == rows, kind
    assert _check(tmp_path) == []
