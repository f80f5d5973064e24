"""The Chroma store: tenant isolation, embedder identity, delete-a-user, idempotent writes."""

from __future__ import annotations

import pytest

from memstrata.errors import EmbedderMismatchError, StoreError
from memstrata.memory.levels import Turn, levels
from memstrata.memory.store import MemoryStore
from memstrata.memory.store.tenant import scope_key

KINDS = [lv.kind for lv in levels()]


def _turns(user: str, n: int = 3, conv: str = "c1") -> list[Turn]:
    return [
        Turn(user_id=user, conversation_id=conv, session_id="1", position=i, speaker="A", text=f"{user} fact {i}")
        for i in range(n)
    ]


def _write(store: MemoryStore, turns: list[Turn]) -> None:
    store.upsert(
        "turn",
        turns,
        documents=[t.render() for t in turns],
        extra=[{"session_id": t.session_id, "position": t.position} for t in turns],
    )


def test_one_user_never_sees_another(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, _turns("alice"))
    _write(store, _turns("bob"))
    seen = store.get("turn", user_id="alice")
    assert {r.metadata["user_id"] for r in seen} == {"alice"} and len(seen) == 3
    hits = store.query("turn", user_id="alice", text="bob fact 1", k=10)
    assert hits and all(h.metadata["user_id"] == "alice" for h in hits)
    # The same unit id under another user is a different record.
    assert store.get("turn", user_id="bob", conversation_id="c1", unit_ids=["s1:t0"])[0].document.startswith("A: bob")


@pytest.mark.parametrize("user", ["", "   "])
def test_reads_require_a_user(data_dir, hash_embeddings, user: str) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    with pytest.raises(StoreError, match="user_id is required"):
        store.get("turn", user_id=user)


def test_reads_by_scope_key_stay_in_the_tenant(data_dir, hash_embeddings) -> None:
    """Two users with the same conversation id: a read naming the conversation uses the one scope clause."""
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, _turns("alice"))
    _write(store, _turns("bob"))
    wheres: list = []
    read = store.units.chroma.read
    store.units.chroma.read = lambda kind, how, **ask: wheres.append(ask.get("where")) or read(kind, how, **ask)  # type: ignore[method-assign]
    assert len(store.get("turn", user_id="alice", conversation_id="c1")) == 3
    assert wheres == [{"scope": scope_key("alice", "c1")}] and scope_key("alice", "c1") != scope_key("bob", "c1")
    store.units.chroma.read = read  # type: ignore[method-assign]
    for user in ("alice", "bob"):
        seen = store.get("turn", user_id=user, conversation_id="c1", where={"session_id": "1"})
        assert len(seen) == 3 and {r.metadata["user_id"] for r in seen} == {user}
        assert store.count("turn", user_id=user, conversation_id="c1") == 3
        hits = store.query("turn", user_id=user, conversation_id="c1", text="alice bob fact", k=10)
        assert len(hits) == 3 and {h.metadata["user_id"] for h in hits} == {user}


def test_upsert_is_idempotent(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, _turns("alice"))
    _write(store, _turns("alice"))
    assert store.count("turn", user_id="alice") == 3


def test_delete_user_removes_every_trace(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, _turns("alice"))
    _write(store, _turns("bob"))
    removed = store.delete_user("alice")
    assert removed["turn"] == 3
    for kind in KINDS:
        assert store.count(kind, user_id="alice") == 0
    assert store.count("turn", user_id="bob") == 3
    reopened = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    assert reopened.count("turn", user_id="alice") == 0


def test_other_embedder_is_a_clear_error_and_reindex_fixes_it(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, _turns("alice"))

    class Other(type(hash_embeddings)):
        name = "other-embedder"

    other = MemoryStore(path=data_dir, embeddings=Other())
    with pytest.raises(EmbedderMismatchError, match=r"test-hash-bow.*other-embedder.*reindex"):
        other.count("turn", user_id="alice")
    fixed = MemoryStore(path=data_dir, embeddings=Other())
    assert fixed.reindex()["turn"] == 3
    assert fixed.count("turn", user_id="alice") == 3
    assert fixed.collection("turn").metadata["embedder"] == "other-embedder"


def test_telemetry_is_off(data_dir, hash_embeddings) -> None:
    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    assert store.client.get_settings().anonymized_telemetry is False


def test_opening_a_store_leaves_blas_threads_alone_unless_told_to_cap_them(tmp_path, hash_embeddings) -> None:
    from threadpoolctl import threadpool_info, threadpool_limits

    from memstrata.context import Context
    from memstrata.runtime.resolve import release_store, resolve_store

    def blas_threads() -> set[int]:
        return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}

    if not blas_threads():
        pytest.skip("numpy has no BLAS thread pool threadpoolctl can see")
    with threadpool_limits(limits=2, user_api="blas"):
        if blas_threads() != {2}:
            pytest.skip("this BLAS cannot run 2 threads here")
        left = Context(user_id="u", data_dir=str(tmp_path / "a"), embeddings=hash_embeddings)
        resolve_store(left)
        assert blas_threads() == {2}  # the default (None) leaves the process's BLAS alone: process tuning is opt-in
        capped = Context(user_id="u", data_dir=str(tmp_path / "b"), embeddings=hash_embeddings, blas_threads=1)
        resolve_store(capped)
        assert blas_threads() == {1}  # asked for: one thread
        release_store(left), release_store(capped)


def test_collections_save_their_index_every_hnsw_sync_records_old_ones_too(data_dir, hash_embeddings) -> None:
    """Chroma keeps each write in its log until the collection's index is saved, and later writes pay for that log
    (issue 50: a chat message 66 -> 150 ms over 300 messages at Chroma's default of 1,000).
    """
    import chromadb

    from memstrata.memory.embeddings import embedder_identity
    from memstrata.memory.store.tables import COLLECTION_PREFIX
    from memstrata.memory.store.unit_collections import HNSW_SYNC

    store = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    _write(store, _turns("alice"))
    assert store.collection("turn").configuration["hnsw"]["sync_threshold"] == HNSW_SYNC
    store.close()
    # a collection made with Chroma's default, as stores written before HNSW_SYNC were
    name, dim = embedder_identity(hash_embeddings)
    client = chromadb.PersistentClient(path=str(data_dir))
    old = client.get_or_create_collection(
        COLLECTION_PREFIX + "fact", metadata={"embedder": name, "dimension": dim, "hnsw:space": "cosine"}
    )
    assert old.configuration["hnsw"]["sync_threshold"] > HNSW_SYNC
    reopened = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    assert reopened.collection("fact").configuration["hnsw"]["sync_threshold"] == HNSW_SYNC
    assert client.get_collection(COLLECTION_PREFIX + "fact").configuration["hnsw"]["sync_threshold"] == HNSW_SYNC
    assert [r.unit_id for r in reopened.get("turn", user_id="alice")] == ["s1:t0", "s1:t1", "s1:t2"]
