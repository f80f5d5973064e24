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


def _summaries(mem: Memstrata, user: str) -> list:
    return sorted(mem.store.get("summary", user_id=user), key=lambda r: r.unit_id)


def test_past_dated_messages_written_one_at_a_time_are_not_each_an_episode(tmp_path: Path, locomo_path: Path) -> None:
    messages = _session_1(locomo_path)
    mem = Memstrata(path=tmp_path / "s", embeddings=HashEmbeddings())
    mem.ingest(messages, user_id="batch", conversation_id="c")
    for m in messages:
        mem.ingest([m], user_id="stream", conversation_id="c")
    stream, batch = _episodes(mem, "stream"), _episodes(mem, "batch")
    # The same closed episodes (18 before episodes closed on message time): one call replays its messages as a
    # stream. The open tail starts at the same turn; the stream's stops at its last write that cut it, the later
    # messages having closed nothing (they wait raw after it), while one call's runs to the end.
    assert [e for e in stream if not e[2]] == [e for e in batch if not e[2]]
    assert 1 < len(batch) <= 3 < len(messages) / 3
    (s_open,), (b_open,) = [e for e in stream if e[2]], [e for e in batch if e[2]]
    assert s_open[1][0] == b_open[1][0] and b_open[1][-1] == "s1:t17"
    closed = {e[1] for e in batch if not e[2]}
    assert [r.document for r in _summaries(mem, "stream") if tuple(r.payload["turn_ids"]) in closed] == [
        r.document for r in _summaries(mem, "batch") if tuple(r.payload["turn_ids"]) in closed
    ]
    # a live message (stamped with the clock) finds the backfill's tail long quiet: it closes
    mem.ingest([{"speaker": "Caroline", "text": "Back again!"}], user_id="stream", conversation_id="c")
    assert not [e for e in _episodes(mem, "stream") if e[0] == "1" and e[2]]  # session 1 is over: closed
    assert [e for e in _episodes(mem, "batch") if e[0] == "1" and e[2]]  # the batch's tail: still open
    # closed by the same later write, the two are the same
    mem.ingest([{"speaker": "Caroline", "text": "Back again!"}], user_id="batch", conversation_id="c")
    assert [e for e in _episodes(mem, "stream") if e[0] == "1"] == [e for e in _episodes(mem, "batch") if e[0] == "1"]
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


def test_a_chat_message_that_closes_nothing_encodes_its_turn_only(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "s", embeddings=HashEmbeddings())
    said = ["I adopted a cat named Miso.", "She is grey and loves boxes.", "Tomorrow I fly to Lisbon."]
    mem.ingest([{"speaker": "Ann", "text": said[0], "timestamp": "2024-05-01T10:00:00"}], user_id="ann")
    for i, text in enumerate(said[1:], 1):
        before = mem.store.encoded.stats()["misses"]
        out = mem.ingest([{"speaker": "Ann", "text": text, "timestamp": f"2024-05-01T10:0{i}:00"}], user_id="ann")
        assert mem.store.encoded.stats()["misses"] == before + 1  # its turn; its view is pooled, nothing else runs
        assert set(out["stage_seconds"]) == {"turns", "contexts"} and out["summaries_written"] == 0
    assert [r.payload["turn_ids"] for r in mem.store.get("episode", user_id="ann")] == [["s1:t0"]]
    hits = mem.retrieve("Where do I fly tomorrow?", user_id="ann", context_budget=200)
    assert said[2] in hits.context  # waiting raw in the open tail, and found
    assert_store_ok(mem.store, "ann")
    stats = mem.store.encoded.stats()
    before = dict(stats)
    mem.ingest([{"speaker": "Ann", "text": said[0], "timestamp": "2024-05-01T10:00:00"}], user_id="ann")  # re-sent
    assert mem.store.encoded.stats()["misses"] == before["misses"]  # nothing new to encode
    mem.close()
