"""What a write costs: episodes close on message time, and no text is encoded twice.

Past-dated messages written one at a time (a backfill, or a client that sends each message's own time) are not
each their own episode, as they were while the wall clock decided that a tail had gone quiet; a re-sent or
unchanged text is answered from the store's memory of what it encoded (:mod:`memstrata.memory.store.encoded`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import HashEmbeddings, assert_store_ok

from memstrata import Memstrata
from memstrata.memory.store.encoded import EncodedTexts


def _session_1(locomo_path: Path) -> list[dict]:
    conv = json.loads(locomo_path.read_text())[0]["conversation"]
    return [
        {"speaker": t["speaker"], "text": t["text"], "timestamp": f"2023-05-08T13:{i:02d}:00"}
        for i, t in enumerate(conv["session_1"])
    ]


def _episodes(mem: Memstrata, user: str) -> list[tuple]:
    rows = mem.store.get("episode", user_id=user)
    return sorted((r.payload["session_id"], tuple(r.payload["turn_ids"]), bool(r.payload.get("open"))) for r in rows)


def test_past_dated_messages_written_one_at_a_time_are_not_each_an_episode(tmp_path: Path, locomo_path: Path) -> None:
    messages = _session_1(locomo_path)
    mem = Memstrata(path=tmp_path / "s", embeddings=HashEmbeddings())
    mem.ingest(messages, user_id="batch", conversation_id="c")
    for m in messages:
        mem.ingest([m], user_id="stream", conversation_id="c")
    stream, batch = _episodes(mem, "stream"), _episodes(mem, "batch")
    # Not one episode per message (18 before episodes closed on message time). The topic cuts are still decided
    # over the tail as it was when it filled (the stream) or over the whole input (one call), so the two may cut
    # the first full tail differently: here 2 episodes against 3, over the same turns.
    assert len(stream) <= len(batch) <= 3 < len(messages) / 3
    assert sorted({t for e in stream for t in e[1]}) == sorted({t for e in batch for t in e[1]})
    # a live message (stamped with the clock) finds the backfill's tail long quiet: it closes
    mem.ingest([{"speaker": "Caroline", "text": "Back again!"}], user_id="stream", conversation_id="c")
    assert not [e for e in _episodes(mem, "stream") if e[0] == "1" and e[2]]  # session 1 is over: closed
    assert [e for e in _episodes(mem, "batch") if e[0] == "1" and e[2]]  # the batch's tail: still open
    assert_store_ok(mem.store, "stream")
    mem.close()


def test_a_text_is_encoded_once_per_store_and_the_memory_is_bounded() -> None:
    class Counting(HashEmbeddings):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            self.seen += texts
            return super().embed_documents(texts)

    embedder = Counting()
    cache = EncodedTexts(embedder, max_texts=2)
    first = cache.embed(["a", "b", "a"])
    assert embedder.seen == ["a", "b"] and first[0] == first[2] == embedder.embed_documents(["a"])[0]
    embedder.seen.clear()
    assert cache.embed(["b", "a"]) == [first[1], first[0]] and embedder.seen == []
    cache.embed(["c"])  # holds two: "b" was used least recently
    embedder.seen.clear()
    cache.embed(["a", "b"])
    assert embedder.seen == ["b"]
    assert cache.stats()["held"] == 2
    with pytest.raises(ValueError, match="max_texts"):
        EncodedTexts(embedder, max_texts=-1)


def test_a_chat_message_does_not_encode_its_open_episodes_unchanged_texts_again(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "s", embeddings=HashEmbeddings())
    said = ["I adopted a cat named Miso.", "She is grey and loves boxes.", "Tomorrow I fly to Lisbon."]
    for i, text in enumerate(said):
        mem.ingest([{"speaker": "Ann", "text": text, "timestamp": f"2024-05-01T10:0{i}:00"}], user_id="ann")
    stats = mem.store.encoded.stats()
    assert stats["hits"] > 0 and stats["misses"] < stats["hits"] + stats["misses"]
    before = dict(stats)
    mem.ingest([{"speaker": "Ann", "text": said[0], "timestamp": "2024-05-01T10:00:00"}], user_id="ann")  # re-sent
    assert mem.store.encoded.stats()["misses"] == before["misses"]  # nothing new to encode
    mem.close()
