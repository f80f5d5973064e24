"""One owner for per-process search state: the store's caches, cleared on close and bounded by ``cache_mb``."""

from __future__ import annotations

import gc
import json
import weakref
from collections import OrderedDict
from typing import Any

import pytest
from conftest import EXAMPLE

from memstrata import Memstrata
from memstrata.memory.index import MemoryIndex
from memstrata.memory.index.caches import user_bytes

MESSAGES = json.loads(EXAMPLE.read_text())["messages"]
CODES = {"ann": "ANN-4417", "bob": "BOB-8032", "cat": "CAT-2956"}
QUESTION = "What is the code of my storage locker at the gym?"


def _ingest(mem: Memstrata, user: str, code: str) -> None:
    """The example conversation, plus one message only this user wrote."""
    secret = {
        "speaker": "Priya",
        "text": f"The code of my storage locker at the gym is {code}.",
        "timestamp": "2024-05-30T09:00:00",
    }
    mem.ingest({"conversation_id": "c", "messages": [*MESSAGES, secret]}, user_id=user, close=True)


def _codes_seen(mem: Memstrata, user: str, **settings: Any) -> set[str]:
    found = mem.retrieve(QUESTION, user_id=user, **settings)
    text = " ".join(e.text for e in found.evidence)
    return {code for code in CODES.values() if code in text}


def test_closing_a_store_leaves_nothing_of_it_in_the_process(data_dir, hash_embeddings) -> None:
    from memstrata.memory.index import active, bounded, sessions, snapshot
    from memstrata.runtime import search

    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    _ingest(mem, "ann", CODES["ann"])
    _ingest(mem, "bob", CODES["bob"])
    assert _codes_seen(mem, "ann", gc_freeze=False) == {CODES["ann"]}  # the whole-memory snapshot
    assert _codes_seen(
        mem,
        "bob",
        scale={"max_turns": 0},
    ) == {CODES["bob"]}  # the bounded path (sessions, latest)
    assert _codes_seen(mem, "bob", scale={"max_turns": 0}, tiers=True) == {CODES["bob"]}  # HMO's tiers
    caches = mem.store.caches
    held = weakref.ref(caches.snapshots[("ann", None)])
    assert caches.users() == ["ann", "bob"] and caches.sessions.units and caches.tiers and caches.vectors
    mem.close()
    assert caches.is_empty() and caches.users() == [] and caches.held_bytes() == 0
    gc.collect()
    assert held() is None  # the snapshot itself is gone, not only forgotten
    # no module keeps a registry of stores: the caches hang on the store alone
    for module in (snapshot, bounded, active, sessions, search):
        registries = [
            name
            for name, value in vars(module).items()
            if not name.startswith("__") and isinstance(value, dict | OrderedDict | weakref.WeakKeyDictionary)
        ]
        assert registries == [], module.__name__
    for gone in ("_CACHE", "_RUN_CACHE", "_LATEST", "_HELD", "_CACHES", "_VECTORS", "_SIZES", "drop_store_keys"):
        assert not any(hasattr(m, gone) for m in (snapshot, bounded, active, sessions, search)), gone


def test_beyond_the_budget_the_least_recently_used_user_goes_first_and_comes_back_intact(
    data_dir, hash_embeddings, monkeypatch
) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    for user, code in CODES.items():
        _ingest(mem, user, code)
    caches = mem.store.caches
    assert _codes_seen(mem, "ann") == {CODES["ann"]}
    one = user_bytes(caches, "ann")
    budget = 2.5 * one / 2**20  # room for two such users, not three
    assert _codes_seen(mem, "bob", cache_mb=budget) == {CODES["bob"]}
    assert caches.users() == ["ann", "bob"]
    first_ann = caches.snapshots[("ann", None)]
    assert _codes_seen(mem, "cat", cache_mb=budget) == {CODES["cat"]}
    assert caches.users() == ["bob", "cat"]  # ann, the least recently used, went
    assert not any(key[0] == "ann" for cache in (caches.snapshots, caches.sizes) for key in cache)
    assert caches.held_bytes() <= budget * 2**20
    builds: list[str] = []
    build = MemoryIndex.build.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        MemoryIndex,
        "build",
        classmethod(lambda cls, store, user, *a, **kw: builds.append(user) or build(cls, store, user, *a, **kw)),
    )
    assert _codes_seen(mem, "ann", cache_mb=budget) == {CODES["ann"]}  # rebuilt, hers alone
    assert builds == ["ann"] and caches.snapshots[("ann", None)] is not first_ann
    assert caches.users() == ["cat", "ann"]  # and bob, now the least recently used, went
    assert _codes_seen(mem, "cat", cache_mb=budget) == {CODES["cat"]} and builds == ["ann"]  # cat stayed warm
    mem.close()


def test_two_stores_in_one_process_keep_and_drop_only_their_own(tmp_path, hash_embeddings) -> None:
    one = Memstrata(path=str(tmp_path / "one"), embeddings=hash_embeddings)
    two = Memstrata(path=str(tmp_path / "two"), embeddings=hash_embeddings)
    assert one.store is not two.store and one.store.caches is not two.store.caches
    _ingest(one, "ann", CODES["ann"])  # the same user id in both stores, with different memories
    _ingest(two, "ann", CODES["bob"])
    _ingest(one, "cat", CODES["cat"])
    assert _codes_seen(one, "ann") == {CODES["ann"]}
    assert _codes_seen(two, "ann") == {CODES["bob"]}
    kept = two.store.caches.snapshots[("ann", None)]
    # store one goes over a tiny budget: its own least recently used user goes, store two keeps its ann
    tiny = 1.5 * user_bytes(one.store.caches, "ann") / 2**20
    assert _codes_seen(one, "cat", cache_mb=tiny) == {CODES["cat"]}
    assert one.store.caches.users() == ["cat"] and two.store.caches.users() == ["ann"]
    assert two.store.caches.snapshots[("ann", None)] is kept
    one.close()  # closing one store leaves the other's caches alone
    assert one.store.caches.is_empty() and two.store.caches.snapshots[("ann", None)] is kept
    assert _codes_seen(two, "ann") == {CODES["bob"]}
    two.close()


@pytest.mark.parametrize("large", [False, True])
def test_a_user_with_no_memory_is_queried_and_cached_without_error(data_dir, hash_embeddings, large: bool) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    _ingest(mem, "ann", CODES["ann"])  # the store exists; "nobody" never wrote
    settings = {"scale.max_turns": 0} if large else {}
    found = mem.retrieve(QUESTION, user_id="nobody", **settings)
    assert found.evidence == []
    caches = mem.store.caches
    assert "nobody" in caches.users() and user_bytes(caches, "nobody") > 0
    assert caches.touch("nobody", budget_mb=0.0) == []  # alone: kept, though over any budget
    assert _codes_seen(mem, "ann", cache_mb=0.0) == {CODES["ann"]}
    assert caches.users() == ["ann"]  # the empty user went first
    mem.close()
