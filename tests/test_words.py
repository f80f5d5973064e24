"""The persisted word index (issue 12): the bounded path's lexical reads, tenant-safe, ranked, kept with every write."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from memstrata.context import Context
from memstrata.memory.index.bounded import WorkingSet
from memstrata.memory.levels import Turn
from memstrata.memory.store import MemoryStore, tenant
from memstrata.memory.store.words import WORDS_FILE, query_term
from memstrata.runtime.search import bounds as bounds_of


def _turn(user: str, i: int, text: str, conv: str = "c1") -> Turn:
    return Turn(user_id=user, conversation_id=conv, session_id=str(1 + i // 5), position=i, speaker="A", text=text)


def _write(store: MemoryStore, turns: list[Turn]) -> None:
    store.upsert(
        "turn",
        turns,
        documents=[t.render() for t in turns],
        extra=[{"session_id": t.session_id, "position": t.position} for t in turns],
    )


def _ids(records: list) -> list[str]:
    return [r.unit_id for r in records]


def _spy_word_reads(store: MemoryStore, monkeypatch) -> set[str]:
    """The names of the store's word reads of turns (``containing``, ``matching``) as the bounded path makes them."""
    used: set[str] = set()

    def spy(method, name, kind, *a, **k):
        if kind == "turn":
            used.add(name)
        return method(kind, *a, **k)

    for name in ("containing", "matching"):
        method = getattr(store, name)
        monkeypatch.setattr(store, name, lambda kind, *a, _m=method, _n=name, **k: spy(_m, _n, kind, *a, **k))
    return used


def _marathon_run(store: MemoryStore, embeddings):
    """One bounded run of the query "marathon Priya" over user ``u``'s six marathon turns."""
    vec = np.asarray(embeddings.embed_documents(["marathon"]), dtype=np.float32)
    bounds = bounds_of(Context(user_id="u", bounded_sessions=10))
    return WorkingSet(store, user_id="u", bounds=bounds).ensure(["marathon Priya"], vec)


def test_the_word_index_stays_in_its_tenant(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    # Same conversation id, same unit ids; only alice ever mentions the zeppelin.
    _write(store, [_turn("alice", 0, "The zeppelin hangar code is 4471."), _turn("alice", 1, "Tea at noon.")])
    _write(store, [_turn("bob", 0, "My hangar is empty."), _turn("bob", 1, "Tea at noon, zeppelins never.")])
    assert store.words_ready("turn")
    alice = store.matching("turn", user_id="alice", words=["zeppelin", "hangar"], limit=10)
    assert _ids(alice) == ["s1:t0"] and alice[0].metadata["user_id"] == "alice"
    assert "4471" in alice[0].document and alice[0].metadata["_vector"] is not None
    bob = store.matching("turn", user_id="bob", words=["zeppelin", "hangar"], limit=10, conversation_id="c1")
    assert sorted(_ids(bob)) == ["s1:t0", "s1:t1"]  # "zeppelins" holds the stem; bob's own rows only
    assert all("4471" not in r.document and r.metadata["user_id"] == "bob" for r in bob)
    assert store.matching("turn", user_id="carol", words=["zeppelin"], limit=10) == []
    assert store.matching("turn", user_id="alice", words=["zeppelin"], limit=10, conversation_id="c2") == []
    store.delete_user("alice")
    assert store.matching("turn", user_id="alice", words=["zeppelin"], limit=10) == []
    assert _ids(store.matching("turn", user_id="bob", words=["zeppelin"], limit=10)) == ["s1:t1"]


def test_the_words_return_their_best_matches_not_the_first_stored(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    filler = "we talked about the weather, the traffic, the news and then the garden for a moment"
    turns = [_turn("u", i, f"{filler} ({i})") for i in range(8)]
    turns += [_turn("u", 8, "Gardening: my garden, my gardens!"), _turn("u", 9, "The garden by the lighthouse")]
    _write(store, turns)
    assert _ids(store.matching("turn", user_id="u", words=["gardening"], limit=1)) == ["s2:t8"]
    assert len(store.matching("turn", user_id="u", words=["Garden"], limit=20)) == 10  # any case, any form
    # A unit holding both words ranks first, though each alone is matched more often elsewhere.
    assert _ids(store.matching("turn", user_id="u", words=["garden", "lighthouse"], limit=2))[0] == "s2:t9"
    # Writing a unit again replaces its words; deleting it removes them.
    _write(store, [turns[8].model_copy(update={"text": "Pottery instead."})])
    assert _ids(store.matching("turn", user_id="u", words=["pottery"], limit=1)) == ["s2:t8"]
    assert "s2:t8" not in _ids(store.matching("turn", user_id="u", words=["garden"], limit=20))
    store.delete("turn", user_id="u", conversation_id="c1", unit_ids=["s2:t8"])
    assert store.matching("turn", user_id="u", words=["pottery"], limit=5) == []


def test_query_terms_are_single_quoted_tokens() -> None:
    assert query_term("Caroline's") == '"Caroline"'
    assert query_term("AND") == '"AND"'  # never an FTS5 operator
    assert query_term("--") is None


def test_a_store_written_before_the_index_reads_by_containment_until_indexed(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, [_turn("u", i, f"Priya mentioned the marathon number {i}") for i in range(6)])
    for path in Path(data_dir).glob(WORDS_FILE + "*"):
        path.unlink()  # as a version before the word index left the folder
    older = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    assert not older.words_ready("turn")
    used = _spy_word_reads(older, monkeypatch)
    index = _marathon_run(older, hash_embeddings)
    assert len(index.turns) == 6 and used == {"containing"}
    assert older.index_words()["turn"] == 6
    assert older.words_ready("turn")
    used.clear()
    index = _marathon_run(older, hash_embeddings)
    assert len(index.turns) == 6 and used == {"matching"}


def test_the_size_check_is_answered_by_the_word_index_as_chroma_answers_it(data_dir, hash_embeddings) -> None:
    """``holds_more_than`` (the snapshot-or-bounded choice) counts the word index's rows, from an empty user on."""
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    store.collection("turn")  # opened empty: the word index covers it from the start
    counted: list[int] = []
    words_check = store.words.holds_more_than
    store.words.holds_more_than = lambda *a, **k: counted.append(a[1]) or words_check(*a, **k)
    asked = [(n, conv) for n in (0, 2, 3, 6, 7, 9, 10, 11) for conv in (None, "c1", "c2")]
    assert not any(store.holds_more_than("turn", n, user_id="u", conversation_id=c) for n, c in asked)
    assert len(counted) == len(asked)  # an empty user, answered by the index (whose table does not exist yet)
    _write(store, [_turn("u", i, f"Priya ran lap {i}") for i in range(7)])
    _write(store, [_turn("u", i, f"Omar swam length {i}", conv="c2") for i in range(3)])
    _write(store, [_turn("v", i, f"Priya ran lap {i}") for i in range(12)])  # another user, the same conversation id
    store.delete("turn", user_id="u", conversation_id="c1", unit_ids=[_turn("u", 0, "").id])  # c1 keeps 6
    counted.clear()
    by_index = {(n, c): store.holds_more_than("turn", n, user_id="u", conversation_id=c) for n, c in asked}
    assert len(counted) == len(asked)  # every answer came from the word index
    assert [by_index[(n, None)] for n in (7, 9)] == [True, False]  # 9 of u's turns in all
    assert [by_index[(n, "c1")] for n in (3, 6)] == [True, False]
    assert by_index[(2, "c2")] is True and by_index[(3, "c2")] is False
    for path in Path(data_dir).glob(WORDS_FILE + "*"):
        path.unlink()  # the same store read by Chroma alone, as a store the word index does not cover
    by_chroma = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    assert not by_chroma.words_ready("turn")
    assert {(n, c): by_chroma.holds_more_than("turn", n, user_id="u", conversation_id=c) for n, c in asked} == by_index


def test_a_user_holding_most_rows_is_searched_without_the_tag_with_the_same_results(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    for conversation in (None, "c1"):  # a kind never written: no table, no rows, and no error
        assert store.words.search("fact", ["marathon"], user_id="big", conversation_id=conversation, limit=5) == []
    _write(store, [_turn("big", i, f"Priya ran the marathon lap {i}" + " again" * (i % 3)) for i in range(9)])
    _write(store, [_turn("small", i, f"Priya ran the marathon lap {i}") for i in range(2)])
    words, shares = store.words, []
    holds_most = words._holds_most
    monkeypatch.setattr(words, "_holds_most", lambda *a: shares.append(holds_most(*a)) or shares[-1])
    found = {u: words.search("turn", ["marathon", "again"], user_id=u, limit=20) for u in ("big", "small")}
    assert shares == [True, False]  # 9 of 11 rows, then 2 of 11
    # each user's own rows only (both hold the same conversation and unit ids): 11 rows match the words, and
    # without the tag the stored user id keeps the other's out
    assert len(found["big"]) == 9 and len(found["small"]) == 2
    monkeypatch.setattr(words, "_holds_most", lambda *a: False)
    assert words.search("turn", ["marathon", "again"], user_id="big", limit=20) == found["big"]  # same order
    monkeypatch.undo()
    store.delete_user("big")  # its share is read again when it comes back, now as the smaller user
    _write(store, [_turn("big", 0, "Priya ran the marathon lap 0")])
    shares.clear()
    monkeypatch.setattr(words, "_holds_most", lambda *a: shares.append(holds_most(*a)) or shares[-1])
    assert words.search("turn", ["marathon"], user_id="big", limit=20) == [("c1", "s1:t0")] and shares == [False]


def test_an_index_of_another_format_is_not_trusted_until_rebuilt(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, [_turn("u", i, f"Priya mentioned the marathon number {i}") for i in range(4)])
    assert store.words_ready("turn") and store.matching("turn", words=["marathon"], user_id="u", limit=10)
    with sqlite3.connect(Path(data_dir) / WORDS_FILE) as db:  # as an older version would have left it
        db.execute("PRAGMA user_version = 0")
        db.execute("UPDATE \"words_turn\" SET tag = 'u0 c0'")
    older = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    assert older.words.stale and not older.words_ready("turn")  # read with $contains, not an empty index
    assert older.index_words()["turn"] == 4
    assert older.words_ready("turn")
    assert len(older.matching("turn", words=["marathon"], user_id="u", limit=10)) == 4
    assert not MemoryStore(path=data_dir, embeddings=hash_embeddings).words.stale


def test_tenant_tags_are_indexed_whole(data_dir, hash_embeddings) -> None:
    """Every token passes the Porter stemmer; the tags must come out as written, or two could merge."""
    from memstrata.memory.store.words import _tag

    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    users = [f"user-{i}" for i in range(30)]
    for user in users:
        _write(store, [_turn(user, 0, "hello", conv=f"conv-{user}")])
    with sqlite3.connect(Path(data_dir) / WORDS_FILE) as db:
        db.execute('CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, "words_turn", col)')
        tags = {t for (t,) in db.execute("SELECT term FROM temp.v WHERE col = 'tag'")}
    assert tags == {token for user in users for token in _tag(user, f"conv-{user}").split()}


# ---- a store served by `chroma run`: the units' own terms (memstrata.memory.store.terms) ----------------------------
def _server_store(chroma_server, hash_embeddings) -> MemoryStore:
    """A store in a database of its own on the shared server, so its collections start empty here."""
    import chromadb
    from chromadb.config import Settings

    url = urlparse(chroma_server.url)
    name = f"words_{uuid.uuid4().hex[:10]}"
    fastapi = "chromadb.api.fastapi.FastAPI"
    admin = Settings(chroma_api_impl=fastapi, chroma_server_host=url.hostname, chroma_server_http_port=url.port)
    chromadb.AdminClient(admin).create_database(name)
    client = chromadb.HttpClient(
        host=url.hostname, port=url.port, database=name, settings=Settings(anonymized_telemetry=False)
    )
    return MemoryStore(client=client, embeddings=hash_embeddings)


def test_a_server_store_ranks_lexical_reads_by_its_units_terms_within_the_tenant(chroma_server, hash_embeddings):
    store = _server_store(chroma_server, hash_embeddings)
    assert store.words is None and store.terms_ready("turn")  # a new collection carries terms from its first unit
    assert store.words_ready("turn")  # and the bounded path reads them
    _write(store, [_turn("alice", 0, "The zeppelin hangar code is 4471."), _turn("alice", 1, "Tea at noon.")])
    _write(store, [_turn("bob", 0, "My hangar is empty."), _turn("bob", 1, "Tea at noon, zeppelins never.")])
    alice = store.matching("turn", user_id="alice", words=["zeppelin", "hangar"], limit=10)
    assert _ids(alice) == ["s1:t0"] and alice[0].metadata["user_id"] == "alice"
    assert "4471" in alice[0].document and alice[0].metadata["_vector"] is not None
    assert "terms" not in alice[0].metadata  # the index's field, never the unit's
    stored = store.collection("turn").get(ids=[store.storage_key("alice", "c1", "s1:t0")], include=["metadatas"])
    assert tenant.term_key("alice", "zeppelin") in stored["metadatas"][0]["terms"]  # tagged with its user
    assert tenant.term_key("bob", "zeppelin") not in stored["metadatas"][0]["terms"]
    wheres: list = []
    read = store._read
    store._read = lambda kind, how, **ask: wheres.append(ask.get("where")) or read(kind, how, **ask)  # type: ignore[method-assign]
    store.matching("turn", user_id="alice", words=["hangar"], limit=5)
    assert {"terms": {"$contains": tenant.term_key("alice", "hangar")}} in wheres  # one clause: no user clause
    store._read = read  # type: ignore[method-assign]
    bob = store.matching("turn", user_id="bob", words=["zeppelin", "hangar"], limit=10, conversation_id="c1")
    assert sorted(_ids(bob)) == ["s1:t0", "s1:t1"] and all("4471" not in r.document for r in bob)
    assert store.matching("turn", user_id="carol", words=["zeppelin"], limit=10) == []
    filler = "we talked about the weather, the traffic, the news and then the garden for a moment"
    _write(store, [_turn("u", i, f"{filler} ({i})") for i in range(8)] + [_turn("u", 8, "A lighthouse garden")])
    # the rarer word weighs more: the one turn holding both comes first, then the lighthouse, not a garden turn
    assert _ids(store.matching("turn", user_id="u", words=["garden", "lighthouse"], limit=2))[0] == "s2:t8"
    store.delete_user("alice")
    assert store.matching("turn", user_id="alice", words=["zeppelin"], limit=10) == []
    assert _ids(store.matching("turn", user_id="bob", words=["zeppelin"], limit=10)) == ["s1:t1"]


def test_a_server_collection_without_terms_gets_them_from_reindex_and_check_sees_wrong_ones(
    chroma_server, hash_embeddings, monkeypatch
) -> None:
    from memstrata.memory.store.invariants import check_store

    store = _server_store(chroma_server, hash_embeddings)
    _write(store, [_turn("u", i, f"Priya mentioned the marathon number {i}") for i in range(6)])
    col = store.collection("turn")
    col.modify(metadata={k: v for k, v in col.metadata.items() if k != "terms"})  # as a collection made before terms
    col.update(ids=[store.storage_key("u", "c1", "s1:t0")], metadatas=[{"terms": ["zzz"]}])  # and one unit's are wrong
    older = MemoryStore(client=store.client, embeddings=hash_embeddings)
    assert not older.terms_ready("turn")
    used = _spy_word_reads(older, monkeypatch)
    index = _marathon_run(older, hash_embeddings)
    assert len(index.turns) == 6 and used == {"containing"}  # the bounded path: $contains
    assert older.index_words()["turn"] == 6 and older.terms_ready("turn")
    flagged = MemoryStore(client=store.client, embeddings=hash_embeddings)
    assert flagged.terms_ready("turn") and len(flagged.matching("turn", user_id="u", words=["marathon"], limit=10)) == 6
    used = _spy_word_reads(flagged, monkeypatch)
    assert len(_marathon_run(flagged, hash_embeddings).turns) == 6 and used == {"matching"}
    col.modify(metadata={**{k: v for k, v in col.metadata.items() if not k.startswith("hnsw:")}, "terms": True})
    untagged = MemoryStore(client=store.client, embeddings=hash_embeddings)
    assert not untagged.terms_ready("turn")  # terms written before the tag: read by $contains until reindexed
    untagged.index_words()
    assert MemoryStore(client=store.client, embeddings=hash_embeddings).terms_ready("turn")
    col.update(ids=[store.storage_key("u", "c1", "s1:t0")], metadatas=[{"terms": ["zzz"]}])
    problems = [p for p in check_store(flagged, "u") if p.invariant == "words"]
    assert [p.unit for p in problems] == ["turn s1:t0"]
    flagged.index_words()
    assert not [p for p in check_store(flagged, "u") if p.invariant == "words"]
