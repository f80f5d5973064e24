"""Late chunking: offline facts and extractive summaries get their vectors pooled from their turns' token vectors.

The quotes (which characters of which turn a unit was cut from), the bounded memory of token vectors, and a real
ingestion with MiniLM: pooled where the turns' tokens are at hand, encoded where they are not.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from conftest import HashEmbeddings, assert_store_ok

from memstrata import Memstrata
from memstrata.memory.embeddings import TokenVectors
from memstrata.memory.extractive import extractive_summary
from memstrata.memory.facts.clauses import clause_spans, clauses, extract_facts
from memstrata.memory.late_chunking import pooled_vector, quote_vector, unit_vectors
from memstrata.memory.levels import Fact, Turn
from memstrata.memory.store.encoded import EncodedTexts


def _locomo_texts(locomo_path: Path) -> list[str]:
    conv = json.loads(locomo_path.read_text())[0]["conversation"]
    return [t["text"] for k, v in conv.items() if k.startswith("session_") and isinstance(v, list) for t in v]


def test_each_clause_is_cut_from_the_characters_its_span_names(locomo_path: Path) -> None:
    texts = [*_locomo_texts(locomo_path), "Well, you know, I moved to Porto; honestly, it is sunny and warm."]
    verbatim = total = 0
    for text in texts:
        spans = clause_spans(text)
        assert [c for c, _, _ in spans] == clauses(text)
        plain = text.replace("\u2019", "'").replace("\u2018", "'")
        for clause, start, end in spans:
            total += 1
            verbatim += plain[start:end] == clause
            # a filler inside a clause is cut out of its text, never out of its span
            assert plain[start:end].startswith(clause.split(",")[0]) and 0 <= start < end <= len(text)
    assert total > 500 and verbatim >= total - 5
    assert clause_spans("Yeah, I moved to Porto; you know, it is sunny.") == [
        ("I moved to Porto", 6, 22),
        ("it is sunny", 34, 45),
    ]


def test_offline_facts_and_summaries_quote_their_turns() -> None:
    turns = [
        Turn(user_id="u", session_id="1", position=0, speaker="Ann", text="Hi! I adopted a cat named Miso in Porto."),
        Turn(user_id="u", session_id="1", position=1, speaker="Bob", text="Lovely. My sister Eve lives in Lisbon."),
    ]
    facts = extract_facts(turns, episode_id="ep:s1:0-1", speakers=["Ann", "Bob"])
    assert facts and all(len(f.quotes) == 1 for f in facts)
    by_id = {t.id: t for t in turns}
    for fact in facts:
        turn_id, start, end = fact.quotes[0]
        assert by_id[turn_id].text[start:end] in {
            "I adopted a cat named Miso in Porto",
            "My sister Eve lives in Lisbon",
        }
    summary = extractive_summary([(t.speaker, t.text) for t in turns], datetime(2024, 5, 1))
    for index, start, end in summary.quotes:
        sentence = turns[index].text[start:end]
        assert f"{turns[index].speaker}: {sentence}" in summary.text
    assert len(summary.quotes) >= 2


def test_the_memory_of_token_vectors_is_bounded_and_only_kept_when_asked() -> None:
    class Tokens(HashEmbeddings):
        def embed_with_tokens(self, texts: list[str]) -> tuple[list[list[float]], list[TokenVectors]]:
            tokens = [
                TokenVectors(np.ones((len(t.split()), 4), dtype=np.float16), np.array([[0, 1]] * len(t.split())))
                for t in texts
            ]
            return self.embed_documents(texts), tokens

    cache = EncodedTexts(Tokens(), max_tokens=5)
    cache.embed(["one two three"])
    assert cache.tokens_of("one two three") is None  # not asked to keep them
    cache.embed(["four five", "six seven eight"], keep_tokens=True)
    assert cache.tokens_of("four five") is not None and cache.stats()["tokens_held"] == 5
    cache.embed(["nine ten"], keep_tokens=True)  # 7 tokens > 5: the least recently used text goes
    assert cache.tokens_of("six seven eight") is None and cache.stats()["tokens_held"] == 4
    assert len(cache.embed(["one two three"], keep_tokens=True)) == 1  # a held vector: nothing encoded, no tokens
    assert cache.tokens_of("one two three") is None
    cache.clear()
    assert cache.stats()["tokens_held"] == 0 and cache.tokens_of("four five") is None
    with pytest.raises(ValueError, match="max_tokens"):
        EncodedTexts(Tokens(), max_tokens=-1)


def test_a_quote_pools_its_tokens_and_its_speakers_name() -> None:
    turn = Turn(user_id="u", session_id="1", position=0, speaker="Ann", text="I moved to Porto.")
    line = turn.embed_text()  # "Ann: I moved to Porto."
    words = [(0, 3), (5, 6), (7, 12), (13, 15), (16, 21)]  # Ann | I | moved | to | Porto
    vectors = np.zeros((7, 7), dtype=np.float16)
    for i in range(7):
        vectors[i, i] = 1
    tokens = TokenVectors(vectors, np.array([[0, 0], *words, [0, 0]]))  # [CLS] ... [SEP]
    held = {line: tokens}
    got = pooled_vector([(turn.id, 2, 16)], {turn.id: turn}, held.get)  # "moved to Porto"
    assert got is not None and np.flatnonzero(got).tolist() == [1, 3, 4, 5]  # Ann, moved, to, Porto
    assert pooled_vector([(turn.id, 2, 16)], {}, held.get) is None  # the turn is not at hand
    assert pooled_vector([(turn.id, 40, 60)], {turn.id: turn}, held.get) is None  # past what was encoded
    assert quote_vector(tokens, [(100, 200)]) is None


def test_pooled_ingestion_pools_where_the_turns_tokens_are_at_hand_and_encodes_elsewhere(
    minilm, tmp_path: Path
) -> None:
    said = [
        "I adopted a grey cat named Miso last week, she loves cardboard boxes.",
        "That is lovely! My sister Eve just moved to Lisbon for a new job at a bakery.",
        "I am training for the Porto half marathon in October with my running club.",
    ]
    messages = [
        {"speaker": "Ann" if i % 2 == 0 else "Bob", "text": t, "timestamp": f"2024-05-01T10:0{i}:00"}
        for i, t in enumerate(said)
    ]
    mem = Memstrata(path=tmp_path / "s", embeddings=minilm)
    out = mem.ingest(
        messages,
        user_id="u",
        conversation_id="c",
        close=True,
        episodes={"span_vectors": "pooled"},
    )
    facts = mem.store.get("fact", user_id="u", with_vectors=True)
    summaries = mem.store.get("summary", user_id="u", with_vectors=True)
    assert facts and out["vectors_pooled"] == len(facts) + len(summaries)
    for row in facts:
        encoded = np.asarray(minilm.embed_documents([row.document])[0])
        cosine = float(np.dot(encoded, row.metadata["_vector"]))
        assert 0.5 < cosine < 0.9999  # close to its text's own vector, but pooled in context, not re-encoded
    facts_only = mem.ingest(
        messages,
        user_id="v",
        conversation_id="c",
        close=True,
        episodes={"span_vectors": "facts"},
    )
    assert facts_only["vectors_pooled"] == facts_only["facts_written"]  # its summaries were encoded
    assert (
        mem.ingest(messages, user_id="w", conversation_id="c", close=True)["vectors_pooled"]  # the default: encoded
        == 0
    )
    hits = mem.retrieve("Where did Eve move for her job?", user_id="u", context_budget=120)
    assert "Lisbon" in hits.context
    assert_store_ok(mem.store, "u")
    mem.close()
    # Another process: the turns were encoded elsewhere, so a write that distills them again encodes its units.
    again = Memstrata(path=tmp_path / "s", embeddings=minilm)
    out = again.ingest(
        [
            {
                "speaker": "Ann",
                "text": "Miso also hides in the laundry basket every morning.",
                "timestamp": "2024-05-01T10:05:00",
            }
        ],
        user_id="u",
        conversation_id="c",
        close=True,
        episodes={"span_vectors": "pooled"},
    )
    assert out["facts_written"] >= 1
    assert_store_ok(again.store, "u")
    again.close()


def test_units_of_an_embedder_without_token_vectors_are_encoded(tmp_path: Path) -> None:
    mem = Memstrata(path=tmp_path / "s", embeddings=HashEmbeddings())
    out = mem.ingest(
        [{"speaker": "Ann", "text": "I adopted a grey cat named Miso last week in Porto."}],
        user_id="u",
        close=True,
    )
    assert out["facts_written"] >= 1 and out["vectors_pooled"] == 0
    turn = Turn(user_id="u", session_id="1", position=0, speaker="Ann", text="x")
    fact = Fact.model_validate(mem.store.get("fact", user_id="u")[0].payload)
    vectors, pooled = unit_vectors(
        [fact], {fact.conversation_id: {turn.id: turn}}, lambda _: None, mem.store.encoded.embed
    )
    assert pooled == 0 and len(vectors[0]) == len(HashEmbeddings().embed_query("x"))
    mem.close()
