"""Two writers appending to one conversation: no fact outlives its episode, whatever the order of their writes.

Each writer reads the conversation, cuts its open tail, deletes the episodes the cut replaced (facts, episode,
summary) and stores the new ones (summary, episode, facts). The first tests put one interleaving of two writers in
order on an embedded store, as ``tests/unit_tests/test_chat_writes.py`` does, by wrapping a function to run the other
writer's
step at the right moment; each fails without its fix. The last runs ``scripts/stress_two_writers.py`` against a real
``chroma run`` for a few runs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, HashEmbeddings, assert_store_ok

from memstrata import Memstrata
from memstrata.memory.levels import Episode, Fact
from memstrata.memory.store.invariants import check_store

START = datetime(2024, 3, 4, 10, 0)


def _chat(n: int, first: int = 0) -> list[dict[str, Any]]:
    """Messages ``first`` .. ``first + n - 1``, a minute apart, each a statement the clause extractor makes facts of."""
    said = ["I adopted a grey cat called Miso.", "My sister lives in Porto.", "I work as a nurse at the clinic."]
    return [
        {
            "speaker": "Ann" if i % 2 == 0 else "Bo",
            "text": f"{said[i % len(said)]} (message {i})",
            "timestamp": (START + timedelta(minutes=i)).isoformat(),
            "id": f"m{i}",
        }
        for i in range(first, first + n)
    ]


def _orphans(mem: Memstrata) -> list[str]:
    return [str(p) for p in check_store(mem.store, "u") if p.invariant == "parent" and p.unit.startswith("fact ")]


@pytest.fixture
def mem(tmp_path: Path) -> Memstrata:
    return Memstrata(path=tmp_path / "store", embeddings=HashEmbeddings())


def _write(mem: Memstrata, messages: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    return mem.ingest(messages, user_id="u", conversation_id="c", now=START + timedelta(minutes=30), **kwargs)


def test_facts_that_land_after_another_writer_deleted_their_episode_are_dropped(
    mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstrata.nodes.ingest import distill
    from memstrata.nodes.ingest import episodes as episode_stage

    _write(mem, _chat(3))
    real, deleted = distill.replace_facts, []

    def facts_after_the_other_writers_delete(
        store: Any, user_id: str, episodes: Any, facts: Any, batch: int, vectors: Any = None
    ) -> int:
        # The other writer read the episodes after this one stored its new tail (summary, episode) and before its
        # facts: the tail is unfinished to it, and its own cut (one message longer) replaces it. Its read of the
        # tail's facts finds none yet, so it deletes the episode and summary only; then these facts land.
        if not deleted:
            old = store.get("episode", user_id=user_id, conversation_id="c", unit_ids=[e.id for e in episodes])
            episode_stage._drop_stale(store, user_id, "c", old, [])
            deleted.extend(r.unit_id for r in old)
        return real(store, user_id, episodes, facts, batch, vectors)

    monkeypatch.setattr(distill, "replace_facts", facts_after_the_other_writers_delete)
    # close=True: a write that cuts and distils the tail (an append that closes nothing writes no episode)
    _write(mem, _chat(1, first=3), close=True)
    assert deleted == ["ep:s1:0-3"]
    assert mem.store.get("fact", user_id="u", conversation_id="c", where={"episode_id": {"$in": deleted}}) == []
    assert_store_ok(mem.store, "u")
    monkeypatch.undo()
    _write(mem, _chat(1, first=4))  # the next write cuts the tail again and stores it whole
    covered = {t for r in mem.store.get("episode", user_id="u") for t in r.payload["turn_ids"]}
    assert covered == {f"m{i}" for i in range(5)}
    assert_store_ok(mem.store, "u")


def test_facts_stored_while_another_writer_deletes_their_episode_go_with_it(
    mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstrata.nodes.ingest import episodes as episode_stage
    from memstrata.nodes.ingest.facts import replace_facts

    _write(mem, _chat(4))
    (tail,) = mem.store.get("episode", user_id="u", conversation_id="c")
    episode = Episode.model_validate(tail.payload)
    facts = [
        Fact.model_validate(r.payload)
        for r in mem.store.get("fact", user_id="u", conversation_id="c", where={"episode_id": episode.id})
    ]
    assert facts
    real, landed = episode_stage._drop_episode_units, []

    def facts_land_between_the_reads(store: Any, user_id: str, conv_id: str, ids: list[str], **kwargs: Any) -> None:
        real(store, user_id, conv_id, ids, **kwargs)
        if not landed:  # the other writer, storing this episode again, stores its facts now and reads the episode back
            landed.append(replace_facts(store, user_id, [episode], facts, 64))

    monkeypatch.setattr(episode_stage, "_drop_episode_units", facts_land_between_the_reads)
    episode_stage._drop_stale(mem.store, "u", "c", [tail], [])
    assert landed == [len(facts)]  # its read came before the delete: it saw the episode and kept them
    assert mem.store.get("fact", user_id="u", conversation_id="c") == []  # the deleter's second read took them
    assert _orphans(mem) == []


def test_the_graph_stage_does_not_bring_back_the_facts_of_an_episode_deleted_since_it_read_them(
    mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memstrata.nodes.ingest import entities as entity_stage
    from memstrata.nodes.ingest import episodes as episode_stage

    real, deleted = entity_stage._write, []

    def write_after_a_delete(store: Any, user_id: str, conv_id: str, stored: list[Fact], *rest: Any) -> Any:
        # This write's graph stage read the closed facts; the other writer, which had read the first episode open,
        # then deleted it and its facts. The stage's facts (linked for the first time) are rewritten now.
        if not deleted:
            first = min({f.episode_id for f in stored})
            old = store.get("episode", user_id=user_id, conversation_id=conv_id, unit_ids=[first])
            episode_stage._drop_stale(store, user_id, conv_id, old, [])
            deleted.append(first)
        return real(store, user_id, conv_id, stored, *rest)

    monkeypatch.setattr(entity_stage, "_write", write_after_a_delete)
    _write(mem, _chat(9), close=True)
    assert deleted and mem.store.get("episode", user_id="u", conversation_id="c", unit_ids=deleted) == []
    assert _orphans(mem) == []
    monkeypatch.undo()
    _write(mem, _chat(1, first=9), close=True)  # the conversation's next write redoes the episode and the graph
    assert_store_ok(mem.store, "u")


def _strays(mem: Memstrata, episode_id: str, n: int = 2) -> list[str]:
    """Store copies of ``n`` stored facts under an episode id that is not stored: what the race left before it was
    closed (facts of an open tail that another writer re-cut and deleted). Their ids.
    """
    stored = mem.store.get("fact", user_id="u", conversation_id="c", with_vectors=True)[:n]
    strays = [Fact.model_validate({**r.payload, "episode_id": episode_id, "id": ""}) for r in stored]
    mem.store.upsert(
        "fact",
        strays,
        documents=[f.embed_text() for f in strays],
        vectors=[r.metadata["_vector"] for r in stored],
        extra=[f.metadata() for f in strays],
    )
    assert len(_orphans(mem)) == n
    return [f.id for f in strays]


def test_the_next_write_that_cuts_a_session_deletes_facts_left_without_their_episode(mem: Memstrata) -> None:
    _write(mem, _chat(6))
    _strays(mem, "ep:s1:0-2")
    _write(mem, _chat(1, first=6))  # closes nothing: it only appends, and reads no fact
    assert _orphans(mem) != []
    _write(mem, _chat(1, first=7), close=True)
    assert _orphans(mem) == []
    assert_store_ok(mem.store, "u")


def test_the_graph_themes_and_persona_leave_out_a_fact_whose_episode_is_gone(mem: Memstrata) -> None:
    from memstrata.memory.store.reads import closed_facts

    _write(mem, _chat(9), close=True)
    strays = _strays(mem, "ep:s1:0-2")
    facts, vectors = closed_facts(mem.store, "u", "c")
    assert facts
    assert not set(strays) & ({f.id for f in facts} | set(vectors))


# ---- the stress script, a few runs through a real server -------------------------------------------------
def _script() -> Any:
    path = REPO / "scripts" / "stress_two_writers.py"
    spec = importlib.util.spec_from_file_location("stress_two_writers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_two_processes_appending_through_a_server_leave_a_sound_store(chroma_server: Any) -> None:
    runs = _script().stress(chroma_server.url, 2, messages=8)
    assert [r.problems for r in runs] == [[], []], json.dumps([r.problems for r in runs], indent=1)[:3000]
