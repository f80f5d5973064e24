"""``memstrata bench tenants``: many users in one store, a user's query among them against the same user alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import run_bench
from memstrata_bench.locomo import load_locomo
from memstrata_bench.tenants import SOURCE, copy_tenants, first_sessions, moved, questions_within, tenant

from memstrata import Memstrata


def test_the_copies_are_other_users_with_their_own_names_and_vectors(tmp_path: Path, locomo_path: Path, minilm) -> None:
    conv = load_locomo(locomo_path, conversations=["conv-26"])[0]
    mem = Memstrata(path=tmp_path / "store", embeddings=minilm)
    mem.ingest(first_sessions(conv, 1), user_id=SOURCE)
    turns = copy_tenants(mem.store, conv, [1, 2], noise=0.5)
    source = mem.store.get("turn", user_id=SOURCE, with_vectors=True)
    assert turns == 2 * len(source) == 2 * len([t for t in conv.turns if t.session == 1])
    copied = mem.store.get("turn", user_id=tenant(2), with_vectors=True)
    assert sorted(r.metadata["unit_id"] for r in copied) == sorted(r.metadata["unit_id"] for r in source)
    assert {r.metadata["speaker"] for r in copied} == {"Caroline0002", "Melanie0002"}
    a = {r.metadata["unit_id"]: np.asarray(r.metadata["_vector"]) for r in source}
    b = {r.metadata["unit_id"]: np.asarray(r.metadata["_vector"]) for r in copied}
    cosines = [float(a[k] @ b[k]) for k in a]
    assert min(cosines) > 0.8 and max(cosines) < 0.99  # moved, not the source's own vectors
    hit = mem.retrieve("Caroline0001 support group", user_id=tenant(1), context_budget=300).evidence
    assert hit and {e.speaker for e in hit} <= {"Caroline0001", "Melanie0001"}
    assert not mem.retrieve("support group", user_id=tenant(3)).evidence  # a user with no memory finds nothing
    mem.close()


def test_moved_vectors_keep_about_the_cosine_the_noise_says() -> None:
    vectors = np.random.default_rng(1).normal(size=(200, 384))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    out = moved(vectors, 0.5, seed=3)
    assert np.allclose(np.linalg.norm(out, axis=1), 1)
    assert abs(float(np.mean(np.sum(out * vectors, axis=1))) - 1 / np.sqrt(1.25)) < 0.02
    assert moved(vectors, 0, seed=3) is vectors


def test_bench_tenants_smoke(tmp_path: Path, locomo_path: Path) -> None:
    """The command end to end at its smallest: alone, then among 4 users, with queries in their own processes."""
    out, plot = tmp_path / "tenants.json", tmp_path / "tenants.png"
    done = run_bench(
        "tenants",
        str(locomo_path),
        "--users",
        "4",
        "--warm-users",
        "2",
        "--sessions",
        "1",
        "--out",
        str(out),
        "--plot",
        str(plot),
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    conv = load_locomo(locomo_path, conversations=["conv-26"])[0]
    questions = len(questions_within(conv, 1))
    assert result["users"] == 4 and result["questions"] == questions > 1 and result["deployment"] == "embedded"
    alone, shared = result["alone"], result["shared"]
    assert alone["cold_queries"] == 1 and alone["warm_queries"] == questions - 1
    assert shared["cold_queries"] == 4 and shared["warm_queries"] == 2 * (questions - 1)
    assert alone["foreign_citations"] == shared["foreign_citations"] == 0
    assert result["source_same_citations"] is True  # tenant-0000 is found the same among others as alone
    assert alone["recall_all"] > 0 and shared["query_process_peak_mb"] > 0
    assert "noise" in result["provenance"]["note"] and plot.stat().st_size > 0
