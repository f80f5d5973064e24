"""A conversation's closed facts held between writes: always what a fresh read of the store gives.

The entities, themes and persona stages read every closed fact of a conversation with its vector; the store keeps
them in this process (:mod:`memstrata.memory.store.held_facts`) and brings them up to date from its write log. These
tests compare what it returns with a read from Chroma that holds nothing, after writes of this process, of another
process (its own caches and write log) and deletes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
from conftest import EXAMPLE, REPO

from memstrata import Memstrata
from memstrata.memory.store import held_facts
from memstrata.memory.store.reads import closed_facts
from memstrata.memory.themes.graph import KINDS, is_theme_edge

MESSAGES = json.loads(EXAMPLE.read_text())["messages"]


def _fresh(mem: Memstrata, user: str, conv: str) -> tuple[list[Any], dict[str, Any]]:
    """A read of the stored facts and episodes that holds nothing and uses no write log."""
    return held_facts._closed(held_facts._read(mem.store, user, conv))


def _other_process(data_dir: str, code: str) -> None:
    """Another process writes to the same folder (its own store object, caches and write log)."""
    script = (
        "import sys, json; sys.path.insert(0, 'tests'); from conftest import HashEmbeddings; "
        "from memstrata import Memstrata; "
        f"m = Memstrata(path={data_dir!r}, embeddings=HashEmbeddings()); {code}; m.close()"
    )
    subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, check=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )


def _same(held: tuple[list[Any], dict[str, Any]], fresh: tuple[list[Any], dict[str, Any]]) -> None:
    (facts, vectors), (want, want_vectors) = held, fresh
    assert [f.model_dump() for f in facts] == [f.model_dump() for f in want]
    assert vectors.keys() == want_vectors.keys()
    for fact_id, vector in vectors.items():
        assert np.allclose(vector, want_vectors[fact_id], atol=1e-6)


def _message(i: int, text: str) -> dict[str, Any]:
    return {"speaker": "Priya", "text": text, "timestamp": f"2024-06-0{1 + i}T09:00:00"}


def test_the_held_facts_follow_this_processs_writes_and_equal_a_fresh_read(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    first = closed_facts(mem.store, "ann", "c")
    assert first == ([], {})  # an empty user holds nothing and reads nothing wrong
    mem.ingest({"conversation_id": "c", "messages": MESSAGES}, user_id="ann", close=True)
    facts, _ = closed_facts(mem.store, "ann", "c")
    assert facts and ("ann", "c") in mem.store.caches.facts
    _same((facts, _), _fresh(mem, "ann", "c"))
    # later writes of this process, each closing its episode, are applied from the write log
    for i, text in enumerate(["I adopted a grey cat called Miso.", "My sister Lena moved to Porto last spring."]):
        mem.ingest([_message(i, text)], user_id="ann", conversation_id="c", close=True)
        held = closed_facts(mem.store, "ann", "c")
        _same(held, _fresh(mem, "ann", "c"))
    assert any("Miso" in f.text for f in held[0]) and any("Porto" in f.text for f in held[0])
    mem.close()
    assert not mem.store.caches.facts  # closing the store drops them


def test_another_processs_write_and_delete_are_noticed(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": MESSAGES}, user_id="ann", close=True)
    before, _ = closed_facts(mem.store, "ann", "c")
    message = {"speaker": "Priya", "text": "My locker code at the gym is ANN-4417.", "timestamp": "2024-06-01T09:00:00"}
    _other_process(data_dir, f"m.ingest([{message!r}], user_id='ann', conversation_id='c', close=True)")
    held = closed_facts(mem.store, "ann", "c")
    assert len(held[0]) > len(before) and any("ANN-4417" in f.text for f in held[0])
    _same(held, _fresh(mem, "ann", "c"))
    _other_process(data_dir, "m.delete(user_id='ann', conversation_id='c')")
    assert closed_facts(mem.store, "ann", "c") == ([], {})  # nothing of the deleted conversation is held any more
    mem.close()


def test_an_episode_another_process_closes_under_its_own_id_brings_its_facts_in(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "c", "messages": MESSAGES}, user_id="ann")  # the session's tail stays open
    tail = mem.store.get("episode", user_id="ann", conversation_id="c", where={"open": True})
    assert len(tail) == 1 and tail[0].payload["fact_ids"]
    facts, _ = closed_facts(mem.store, "ann", "c")
    assert not {f.id for f in facts} & set(tail[0].payload["fact_ids"])  # an open episode's facts wait
    # another process closes that episode in place: the same id, stored again with open=False
    _other_process(
        data_dir,
        "from memstrata.memory.levels import Episode; "
        "r = m.store.get('episode', user_id='ann', conversation_id='c', where={'open': True}, with_vectors=True)[0]; "
        "e = Episode.model_validate(r.payload).model_copy(update={'open': False}); "
        "m.store.upsert('episode', [e], documents=[e.embed_text()], vectors=[r.metadata['_vector']], "
        "extra=[e.metadata()])",
    )
    held = closed_facts(mem.store, "ann", "c")
    assert set(tail[0].payload["fact_ids"]) <= {f.id for f in held[0]}
    _same(held, _fresh(mem, "ann", "c"))
    mem.close()


def test_users_and_conversations_are_held_apart_and_bounded(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    for user, conv in (("ann", "c"), ("bob", "c"), ("ann", "d")):
        secret = _message(0, f"The code of {user}'s {conv} locker is {user.upper()}-{conv.upper()}-77.")
        mem.ingest({"conversation_id": conv, "messages": [*MESSAGES[:6], secret]}, user_id=user, close=True)
    for user, conv in (("ann", "c"), ("bob", "c"), ("ann", "d")):
        facts, _ = closed_facts(mem.store, user, conv)
        codes = {w for f in facts for w in f.text.split() if w.endswith(("-77.", "-77"))}
        assert codes and all(c.startswith(f"{user.upper()}-{conv.upper()}") for c in codes)
        assert all(f.user_id == user and f.conversation_id == conv for f in facts)
    caches = mem.store.caches
    assert set(caches.facts) == {("ann", "c"), ("bob", "c"), ("ann", "d")}
    caches.drop_user("ann")
    assert set(caches.facts) == {("bob", "c")}
    for i in range(held_facts.MAX_HELD + 2):
        closed_facts(mem.store, "bob", f"x{i}")
    assert len(caches.facts) == held_facts.MAX_HELD and ("bob", "c") not in caches.facts
    mem.close()


def _stored_theme_edges(mem: Memstrata, user: str, conv: str) -> set[tuple[str, str, str, float]]:
    """The conversation's theme graph as a read of the edge table that holds nothing gives it."""
    return {
        (e.src, e.rel, e.dst, round(e.weight, 4))
        for e in mem.store.edges.get(user, conversation_id=conv)
        if is_theme_edge(e)
    }


def _held_theme_edges(mem: Memstrata, user: str, conv: str) -> set[tuple[str, str, str, float]]:
    closed_facts(mem.store, user, conv)  # as the themes stage calls them: the facts first
    return {
        (e.src, e.rel, e.dst, round(e.weight, 4))
        for e in held_facts.held_edges(mem.store, user, conv, KINDS)
        if is_theme_edge(e)
    }


def test_the_held_theme_graph_and_speakers_equal_a_fresh_read_after_every_kind_of_write(
    data_dir, hash_embeddings
) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    assert _held_theme_edges(mem, "ann", "c") == set()  # an empty user
    assert held_facts.speakers(mem.store, "ann", "c") == []
    mem.ingest({"conversation_id": "c", "messages": MESSAGES}, user_id="ann", close=True)
    graph = _held_theme_edges(mem, "ann", "c")
    assert graph and graph == _stored_theme_edges(mem, "ann", "c")
    assert held_facts.speakers(mem.store, "ann", "c") == sorted({m["speaker"] for m in MESSAGES})
    # this process's closes: the themes stage diffs against the held graph and records what it wrote
    texts = ["I adopted a grey cat called Zorbel.", "My sister Lena moved to Porto last spring."]
    for i, text in enumerate(texts):
        message = {**_message(i, text), "speaker": "Wren"}  # a new speaker, learnt from the write log
        mem.ingest([message], user_id="ann", conversation_id="c", close=True)
        assert _held_theme_edges(mem, "ann", "c") == _stored_theme_edges(mem, "ann", "c")
        assert "Wren" in held_facts.speakers(mem.store, "ann", "c")
    held = mem.store.caches.facts[("ann", "c")]
    assert held.edges is not None and held.speakers is not None
    # another stage's edges of the same conversation (the entity graph's) do not send the themes back to the store
    before = held.edges
    mem.ingest([_message(3, "I ride my bike to the market on Saturdays.")], user_id="ann", conversation_id="c")
    _held_theme_edges(mem, "ann", "c")
    assert mem.store.caches.facts[("ann", "c")].edges is before
    # a delete in this process takes edges away outside the themes stage: read again, equal to the store
    mem.delete(user_id="ann", conversation_id="c", turn_id=_turn_with(mem, "ann", "c", "Zorbel"))
    assert _held_theme_edges(mem, "ann", "c") == _stored_theme_edges(mem, "ann", "c")
    # another process's close: its facts are seen first, and the graph comes back from the store with them
    message = {"speaker": "Priya", "text": "My locker code at the gym is ANN-4417.", "timestamp": "2024-06-09T09:00:00"}
    _other_process(data_dir, f"m.ingest([{message!r}], user_id='ann', conversation_id='c', close=True)")
    assert _held_theme_edges(mem, "ann", "c") == _stored_theme_edges(mem, "ann", "c")
    assert held_facts.speakers(mem.store, "ann", "c") == sorted({*(m["speaker"] for m in MESSAGES), "Wren"})
    mem.close()


def _turn_with(mem: Memstrata, user: str, conv: str, word: str) -> str:
    [turn] = [r.unit_id for r in mem.store.get("turn", user_id=user, conversation_id=conv) if word in r.payload["text"]]
    return turn
