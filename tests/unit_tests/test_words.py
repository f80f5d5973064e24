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
    store.upsert("turn", turns, documents=[t.render() for t in turns], extra=[t.metadata() for t in turns])


def _ids(records: list) -> list[str]:
    return [r.unit_id for r in records]


def _spy_word_reads(store: MemoryStore, monkeypatch) -> list[str]:
    """The kinds of the store's word reads (``matching``) as the bounded path makes them."""
    used: list[str] = []
    method = store.matching
    monkeypatch.setattr(store, "matching", lambda kind, *a, **k: used.append(kind) or method(kind, *a, **k))
    return used


def _marathon_run(store: MemoryStore, embeddings):
    """One bounded run of the query "marathon Priya" over user ``u``'s six marathon turns."""
    vec = np.asarray(embeddings.embed_documents(["marathon"]), dtype=np.float32)
    bounds = bounds_of(
        Context(
            user_id="u",
            scale={"sessions": 10},
        )
    )
    return WorkingSet(store, user_id="u", bounds=bounds).ensure(["marathon Priya"], vec)


def test_the_word_index_stays_in_its_tenant(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    # Same conversation id, same unit ids; only alice ever mentions the zeppelin.
    _write(store, [_turn("alice", 0, "The zeppelin hangar code is 4471."), _turn("alice", 1, "Tea at noon.")])
    _write(store, [_turn("bob", 0, "My hangar is empty."), _turn("bob", 1, "Tea at noon, zeppelins never.")])
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


def test_the_bounded_path_reads_words_from_the_word_index_and_a_rebuild_keeps_them(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, [_turn("u", i, f"Priya mentioned the marathon number {i}") for i in range(6)])
    used = _spy_word_reads(store, monkeypatch)
    assert len(_marathon_run(store, hash_embeddings).turns) == 6 and "turn" in used
    assert store.index_words()["turn"] == 6  # `memstrata reindex --words`: rebuilt from the stored text
    assert len(store.matching("turn", user_id="u", words=["marathon"], limit=10)) == 6


def test_the_size_check_is_answered_by_the_word_index_as_chroma_answers_it(data_dir, hash_embeddings) -> None:
    """``holds_more_than`` (the snapshot-or-bounded choice) counts the word index's rows, from an empty user on."""
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
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
    by_chroma = MemoryStore(client=store.client, embeddings=hash_embeddings)  # no word index: Chroma counts
    assert by_chroma.words is None
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
    assert store.words is None  # each unit carries its terms from its first write
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
    read = store.units.chroma.read
    store.units.chroma.read = lambda kind, how, **ask: wheres.append(ask.get("where")) or read(kind, how, **ask)  # type: ignore[method-assign]
    store.matching("turn", user_id="alice", words=["hangar"], limit=5)
    assert {"terms": {"$contains": tenant.term_key("alice", "hangar")}} in wheres  # one clause: no user clause
    store.units.chroma.read = read  # type: ignore[method-assign]
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


def test_a_server_store_reads_words_by_terms_and_check_sees_wrong_ones_until_reindexed(
    chroma_server, hash_embeddings, monkeypatch
) -> None:
    from memstrata.memory.store.invariants import check_store

    store = _server_store(chroma_server, hash_embeddings)
    _write(store, [_turn("u", i, f"Priya mentioned the marathon number {i}") for i in range(6)])
    used = _spy_word_reads(store, monkeypatch)
    assert len(_marathon_run(store, hash_embeddings).turns) == 6 and "turn" in used
    assert len(store.matching("turn", user_id="u", words=["marathon"], limit=10)) == 6
    assert not [p for p in check_store(store, "u") if p.invariant == "words"]
    store.collection("turn").update(ids=[store.storage_key("u", "c1", "s1:t0")], metadatas=[{"terms": ["zzz"]}])
    problems = [p for p in check_store(store, "u") if p.invariant == "words"]
    assert [p.unit for p in problems] == ["turn s1:t0"]
    assert store.index_words()["turn"] == 6  # `memstrata reindex --words`: every unit's terms written again
    assert not [p for p in check_store(store, "u") if p.invariant == "words"]
