"""The bounded search path (issue 12): candidates read from Chroma instead of the whole memory in memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from conftest import EXAMPLE, REPO

from memstrata import Memstrata
from memstrata.context import Context
from memstrata.memory.index import MemoryIndex
from memstrata.memory.index.bounded import WorkingSet, content_words
from memstrata.memory.levels import levels
from memstrata.memory.query import Query
from memstrata.memory.search.scoring import score_query
from memstrata.memory.tree.search import _REINFORCEMENT, load_reinforcement
from memstrata.runtime.search import bounds as bounds_of
from memstrata.runtime.search import weights as weights_of

QUERIES = [
    "When did Tom run the Brighton half marathon?",
    "Where is Priya moving?",
    "What is the cat called?",
    "Who is Rui?",
]


def _messages() -> list[dict]:
    return json.loads(EXAMPLE.read_text())["messages"]


def _scores(index: MemoryIndex, vecs: np.ndarray) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for text, vec in zip(QUERIES, vecs, strict=True):
        ranked, parts = score_query(
            index,
            Query(id="q0", text=text),
            vec,
            event_kinds=list(index.events),
            top_events=10,
            weights=weights_of(Context(user_id="t")),
            now=None,
        )
        out[text] = {f"{t.conversation_id}/{t.id}": float(parts["score"][i]) for i, t in enumerate(index.turns)}
        out[text] |= {f"{kind}:{index.events[kind].units[row].id}": s for kind, row, s in ranked}
    return out


def test_content_words_are_the_longest_non_stop_words() -> None:
    assert content_words("What did Priya say about the Brighton half marathon?", 3) == [
        "Brighton",
        "marathon",
        "Priya",
    ]  # ties in length: alphabetical
    assert content_words("What is it?", 3) == []


def test_candidates_covering_a_small_store_score_exactly_like_the_full_snapshot(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="u")
    mem.ingest({"conversation_id": "other", "messages": _messages()[:12]}, user_id="u")
    full = MemoryIndex.build(mem.store, "u", None)
    vecs = np.asarray(hash_embeddings.embed_documents(QUERIES), dtype=np.float32)
    ws = WorkingSet(
        mem.store,
        user_id="u",
        bounds=bounds_of(
            Context(
                user_id="u",
                scale={"dense_k": 500, "event_k": 500, "sessions": 500},
            )
        ),
    )
    bounded = ws.ensure(QUERIES, vecs)
    assert bounded.bounded is not None and full.bounded is None
    assert {k: len(t) for k, t in bounded.tables.items()} == {k: len(t) for k, t in full.tables.items()}
    got, want = _scores(bounded, vecs), _scores(full, vecs)
    for text in QUERIES:
        assert got[text].keys() == want[text].keys()
        for key, value in want[text].items():
            assert abs(got[text][key] - value) < 1e-6, (text, key)
    reads = ws.reads
    assert ws.ensure(QUERIES[:2], vecs[:2]) is bounded and ws.reads == reads  # known queries read nothing


def test_small_bounds_load_whole_sessions_of_the_best_candidates_only(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="u")
    full = MemoryIndex.build(mem.store, "u", None)
    vec = np.asarray(hash_embeddings.embed_documents(QUERIES[:1]), dtype=np.float32)
    index = WorkingSet(
        mem.store,
        user_id="u",
        bounds=bounds_of(
            Context(
                user_id="u",
                scale={"dense_k": 3, "event_k": 3, "lexical_k": 2, "sessions": 1},
            )
        ),
    ).ensure(QUERIES[:1], vec)
    sessions = {(t.conversation_id, t.session_id) for t in index.turns}
    assert len(sessions) == 1 and len(index.turns) < len(full.turns)
    whole = [t for t in full.turns if (t.conversation_id, t.session_id) in sessions]
    assert [t.id for t in index.turns] == [t.id for t in whole]  # the session is whole, in order
    best = max(range(len(full.turns)), key=lambda i: float(full.turn_vecs[i] @ vec[0]))
    assert (full.turns[best].conversation_id, full.turns[best].session_id) in sessions
    assert len(index.tables["turn_context"]) == len(whole)  # each loaded turn has its view


def test_retrieval_on_the_bounded_path_matches_the_snapshot_path(data_dir, hash_embeddings, monkeypatch) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="u")
    ensured = []  # the queries each run's working set was grown with: none on the snapshot path
    ensure = WorkingSet.ensure
    monkeypatch.setattr(
        WorkingSet, "ensure", lambda ws, texts, vectors: ensured.append(list(texts)) or ensure(ws, texts, vectors)
    )
    for query in QUERIES:
        snapshot = mem.retrieve(query, user_id="u")
        assert snapshot.evidence and not ensured, query  # something to compare, found on the snapshot path
        bounded = mem.retrieve(query, user_id="u", scale={"max_turns": 0}, tiers=False)  # the archive alone
        assert ensured, query  # the bounded path did run
        ensured.clear()
        assert [(e.turn_id, round(e.score, 6)) for e in bounded.evidence] == [
            (e.turn_id, round(e.score, 6)) for e in snapshot.evidence
        ], query


def test_a_bounded_snapshot_reads_the_reinforcement_of_its_own_summaries_only(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="u")
    mem.ingest({"conversation_id": "other", "messages": _messages()[:12]}, user_id="u")
    counters = mem.store.counters
    vec = np.asarray(hash_embeddings.embed_documents(QUERIES[:1]), dtype=np.float32)
    index = WorkingSet(
        mem.store,
        user_id="u",
        bounds=bounds_of(
            Context(
                user_id="u",
                scale={"dense_k": 3, "event_k": 3, "lexical_k": 2, "sessions": 1},
            )
        ),
    ).ensure(QUERIES[:1], vec)
    held = {(u.conversation_id, u.id) for u in index.events["summary"].units}
    stored = {
        (c.conversation_id, c.unit_id): (c.reinforcement_count, c.reinforced_at)
        for c in counters.all("u", kind="summary")
    }
    assert held < stored.keys() and any(n for n, _ in stored.values())  # a part of the user's reinforced summaries

    def no_full_read(*args, **kwargs):
        msg = "a bounded snapshot read every summary's counters"
        raise AssertionError(msg)

    monkeypatch.setattr(counters, "all", no_full_read)
    load_reinforcement(index, counters, "u")
    got = {(conv, sid): value for conv, part in index.held[_REINFORCEMENT].parts.items() for sid, value in part.items()}
    assert got == {key: stored.get(key, (0, None)) for key in held}


def test_a_finished_retrieval_leaves_no_working_set_behind(data_dir, hash_embeddings, monkeypatch) -> None:
    from memstrata.memory.index import bounded

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="u")
    built: list[bounded.WorkingSet] = []
    original = bounded.WorkingSet._build

    def spy(self: bounded.WorkingSet) -> MemoryIndex:
        built.append(self)
        return original(self)

    monkeypatch.setattr(bounded.WorkingSet, "_build", spy)
    for query in QUERIES:
        assert mem.retrieve(query, user_id="u", scale={"max_turns": 0}, tiers=False).evidence  # the archive alone
    assert len({id(ws) for ws in built}) == len(QUERIES)  # each retrieval built its own working set...
    assert not any(ws in mem.store.caches.runs.values() for ws in built)  # ...and dropped it at its answer


def test_the_bounded_path_stays_in_its_tenant_and_sees_other_processes_writes(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    messages = _messages()
    # Both users hold the same conversation id; bob's copy says something alice's never does.
    mem.ingest({"conversation_id": "shared", "messages": messages}, user_id="alice")
    secret = [{**m, "text": m["text"] + " Bob's zeppelin hangar code is 4471."} for m in messages[:6]]
    mem.ingest({"conversation_id": "shared", "messages": secret}, user_id="bob")
    for query in ["zeppelin hangar code", *QUERIES]:
        result = mem.retrieve(
            query,
            user_id="alice",
            scale={"max_turns": 0},
        )
        assert result.evidence
        assert all("zeppelin" not in e.text for e in result.evidence)
    assert any(
        "zeppelin" in e.text
        for e in mem.retrieve(
            "zeppelin hangar code",
            user_id="bob",
            scale={"max_turns": 0},
        ).evidence
    )
    script = (
        "import sys, json; sys.path.insert(0, 'tests'); from conftest import HashEmbeddings; "
        "from memstrata import Memstrata; "
        f"m = Memstrata(path={data_dir!r}, embeddings=HashEmbeddings()); "
        "m.ingest({'conversation_id': 'later', 'messages': [{'speaker': 'Priya', 'text': "
        "'My new neighbour keeps a tortoise named Ferdinand.', 'timestamp': '2024-09-01T10:00:00'}]}, "
        "user_id='alice')"
    )
    subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, check=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    found = mem.retrieve(
        "What is the tortoise called?",
        user_id="alice",
        scale={"max_turns": 0},
    )
    assert any("Ferdinand" in e.text for e in found.evidence)
    assert not any(
        "Ferdinand" in e.text
        for e in mem.retrieve(
            "What is the tortoise called?",
            user_id="bob",
            scale={"max_turns": 0},
        ).evidence
    )


def test_a_follow_up_reads_only_its_new_vector_and_words(data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="u")
    vec = np.asarray(hash_embeddings.embed_documents(QUERIES[:1]), dtype=np.float32)
    ws = WorkingSet(
        mem.store,
        user_id="u",
        bounds=bounds_of(
            Context(
                user_id="u",
                scale={"sessions": 1},
            )
        ),
    )
    ws.ensure(QUERIES[:1], vec)
    reads = ws.reads
    # an offline rewrite: the question's vector again, its words in another order and case
    ws.ensure(["marathon brighton Tom"], vec)
    assert ws.reads == reads + 1  # only the named entities' facts are looked up again
    ws.ensure(["marathon Brighton medal"], vec)  # one new word: one read of turns, one per event kind with text
    event_kinds = levels(role="event", searched=True)  # passage, summary, fact, tree_node, theme, persona
    assert len(event_kinds) == 6
    assert ws.reads == reads + 1 + 1 + len(event_kinds)


def test_sessions_come_from_the_cache_until_the_store_changes_under_them(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    session_reads: list[str] = []
    read = mem.store.get

    def counted(kind, **kw):
        if "session_key" in (kw.get("where") or {}):
            session_reads.append(kind)
        return read(kind, **kw)

    monkeypatch.setattr(mem.store, "get", counted)
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="u")
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="v")  # same ids, another user
    vecs = np.asarray(hash_embeddings.embed_documents(QUERIES), dtype=np.float32)
    bounds = bounds_of(
        Context(
            user_id="u",
            scale={"dense_k": 500, "event_k": 500, "sessions": 500},
        )
    )
    first = WorkingSet(mem.store, user_id="u", bounds=bounds)
    cold = first.ensure(QUERIES, vecs)
    cache = mem.store.caches.sessions
    assert cache.units == len(cold.tables["turn"]) + len(cold.tables["turn_context"])
    assert sorted(session_reads) == ["turn", "turn_context"]
    warm = WorkingSet(mem.store, user_id="u", bounds=bounds).ensure(QUERIES, vecs)
    assert len(session_reads) == 2  # the second retrieval checked ids only
    assert [t.id for t in warm.turns] == [t.id for t in cold.turns]
    assert np.array_equal(warm.tables["turn"].vecs, cold.tables["turn"].vecs)
    assert {t.id for t in WorkingSet(mem.store, user_id="v", bounds=bounds).ensure(QUERIES, vecs).turns} == {
        t.id for t in cold.turns
    }  # v's own records: same ids, read for v
    # a turn forgotten under a cached session is gone from the next retrieval
    gone = cold.turns[3]
    mem.store.delete_turns("u", gone.conversation_id, [gone.id])
    after = WorkingSet(mem.store, user_id="u", bounds=bounds).ensure(QUERIES, vecs)
    assert gone.id not in {t.id for t in after.turns}
    assert len(after.turns) == len(cold.turns) - 1
    # a turn added to a cached session by a write that bypasses this process's write log (as another process's)
    record = mem.store.get(
        "turn", user_id="u", conversation_id=gone.conversation_id, unit_ids=[cold.turns[4].id], with_vectors=True
    )[0]
    text = "zzyzx qwv"  # matches no query, so only its session can bring it
    meta = {k: v for k, v in record.metadata.items() if k != "_vector"} | {
        "unit_id": "late-turn",
        "payload": json.dumps(record.payload | {"id": "late-turn", "text": text}),
    }
    mem.store.collection("turn").add(
        ids=[mem.store.storage_key("u", gone.conversation_id, "late-turn")],
        documents=[text],
        metadatas=[meta],
        embeddings=hash_embeddings.embed_documents([text]),
    )
    small = bounds_of(
        Context(
            user_id="u",
            scale={"dense_k": 1, "event_k": 1, "lexical_k": 1, "sessions": 500},
        )
    )
    later = WorkingSet(mem.store, user_id="u", bounds=small).ensure(QUERIES, vecs)
    assert "late-turn" in {t.id for t in later.turns}
    cache.put(user_id="u", sessions={}, limit=0)  # the bound holds
    assert cache.units == 0


def test_the_bounded_path_reads_entity_edges_only_of_conversations_its_query_names(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest({"conversation_id": "priya-tom", "messages": _messages()}, user_id="u")
    renamed = [{**m, "text": m["text"].replace("Tom", "Omar").replace("Priya", "Lena")} for m in _messages()]
    renamed = [{**m, "speaker": {"Tom": "Omar", "Priya": "Lena"}.get(m["speaker"], m["speaker"])} for m in renamed]
    mem.ingest({"conversation_id": "lena-omar", "messages": renamed}, user_id="u")
    reads: list[tuple[tuple, str | None]] = []
    get = mem.store.edges.get

    def spy(user_id: str, **kw: object) -> list:
        reads.append((tuple(kw.get("conversations") or ()), kw.get("src_kind")))
        return get(user_id, **kw)

    named: list[str] = []
    build = WorkingSet._build
    monkeypatch.setattr(WorkingSet, "_build", lambda ws: named.extend(ws.named_conversations) or build(ws))
    query = "What did Tom's teacher say about the bowing?"
    mem.store.edges.get = spy
    bounded = mem.retrieve(query, user_id="u", scale={"max_turns": 0}, tiers=False, max_iterations=0)  # no follow-up
    mem.store.edges.get = get
    # both conversations hold a candidate entity sharing a word with the query ("Omar's teacher" too) ...
    assert set(named) == {"priya-tom", "lena-omar"}
    # ... but only the one whose entity the query names was stepped through: only its entity edges were read
    assert set(reads) == {(("priya-tom",), "entity")}
    snapshot = mem.retrieve(query, user_id="u", max_iterations=0)
    # the head, where the named conversation's turns rank (the two conversations' equal texts tie further down,
    # and the bounded path breaks those ties in the order its reads return)
    assert [(e.conversation_id, e.turn_id, round(e.score, 6)) for e in bounded.evidence[:10]] == [
        (e.conversation_id, e.turn_id, round(e.score, 6)) for e in snapshot.evidence[:10]
    ]
