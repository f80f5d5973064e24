"""A turn longer than the encoder reads: stored with its passages, found by any part, quoted by the matching part.

Real embeddings, a real embedded Chroma store, no model. The reproduction is issue 51's: a 21k-character pasted
message with a passport number in its middle was in the context only at budget 8,000.
"""

from __future__ import annotations

import itertools
import random
import re

import pytest

from memstrata import Memstrata
from memstrata.memory.levels import PASSAGE
from memstrata.memory.levels.level2.passage import ENCODER_TOKENS, Passage, turn_passages
from memstrata.memory.levels.level2.turn import Turn
from memstrata.memory.store.invariants import check_store
from memstrata.memory.tokens import TokenCounter

SECRET = "By the way, my passport number is XK-4411."
WORDS = re.findall(
    r"\w+",
    "the of and to in is that for it with as was on be at by this had not are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do first "
    "any my now such like our over",
)


def pasted(chars: int = 21_000, *, seed: int = 3) -> str:
    """About ``chars`` characters of filler sentences with the secret in the middle."""
    rng = random.Random(seed)
    sentences, size = [], 0
    while size < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "."
        sentences.append(sentence)
        size += len(sentence) + 1
    sentences.insert(len(sentences) // 2, SECRET)
    return " ".join(sentences)


def chat(text: str) -> list[dict[str, str]]:
    return [
        {"speaker": "Ann", "text": "Hello, can you help me plan a trip?", "timestamp": "2024-01-01T10:00:00"},
        {"speaker": "Ann", "text": text, "timestamp": "2024-01-01T10:01:00"},
        {"speaker": "Bot", "text": "Sure, I can help with that trip.", "timestamp": "2024-01-01T10:02:00"},
    ]


@pytest.fixture(scope="module")
def mem(tmp_path_factory: pytest.TempPathFactory, minilm) -> Memstrata:
    m = Memstrata(path=tmp_path_factory.mktemp("long"), embeddings=minilm)
    m.ingest(chat(pasted()), user_id="u", conversation_id="c")
    yield m
    m.close()


def stored_passages(mem: Memstrata, user: str = "u") -> list[Passage]:
    return [Passage.model_validate(r.payload) for r in mem.store.get(PASSAGE.kind, user_id=user)]


def test_passages_cut_a_long_turn_verbatim_and_whole() -> None:
    text = pasted()
    turn = Turn(user_id="u", session_id="1", position=1, speaker="Ann", text=text)
    counter = TokenCounter()
    parts = turn_passages(turn, counter)
    assert len(parts) > 20
    assert all(text[p.start : p.end] == p.text for p in parts)
    assert all(counter.count(p.text) <= 128 for p in parts)
    # consecutive and covering: only the spaces between them are left out
    assert all(text[a.end : b.start].strip() == "" for a, b in itertools.pairwise(parts))
    assert parts[0].start == 0 and parts[-1].end == len(text)
    # cut at sentence ends where one falls inside a passage: no passage ends inside a word
    assert sum(p.text.endswith(".") for p in parts) >= len(parts) - 1
    assert [p for p in parts if SECRET in p.text]


def test_a_turn_the_encoder_reads_whole_has_no_passages() -> None:
    short = Turn(user_id="u", session_id="1", position=0, speaker="Ann", text="word " * (ENCODER_TOKENS - 10))
    assert turn_passages(short, TokenCounter()) == []


@pytest.mark.parametrize("query", ["What is my passport number?", "passport number XK-4411"])
@pytest.mark.parametrize("budget", [300, 1500, 3000])
def test_the_passport_number_is_found_below_the_message_size(mem: Memstrata, query: str, budget: int) -> None:
    result = mem.retrieve(query, user_id="u", context_budget=budget)
    assert "XK-4411" in result.context
    assert result.context_tokens <= budget
    quoted = [e for e in result.evidence if e.excerpt]
    assert len(quoted) == 1
    start, end = quoted[0].excerpt
    whole = pasted()
    assert whole[start:end] in quoted[0].text  # verbatim, between ellipses
    assert quoted[0].text.startswith("…") and quoted[0].text.endswith("…")
    assert quoted[0].turn_id == "s1:t1"


def test_the_whole_turn_is_returned_when_it_fits(mem: Memstrata) -> None:
    result = mem.retrieve("What is my passport number?", user_id="u", context_budget=8000)
    assert pasted() in result.context
    assert not any(e.excerpt for e in result.evidence)


def test_passages_are_stored_and_checked(mem: Memstrata) -> None:
    parts = stored_passages(mem)
    assert len(parts) == len(
        turn_passages(Turn(user_id="u", session_id="1", position=1, speaker="Ann", text=pasted()), TokenCounter())
    )
    assert {p.turn_id for p in parts} == {"s1:t1"}
    assert check_store(mem.store, "u") == []


def test_an_update_and_a_delete_take_the_passages_with_them(tmp_path, minilm) -> None:
    m = Memstrata(path=tmp_path, embeddings=minilm)
    try:
        m.ingest(chat(pasted(6000)), user_id="u", conversation_id="c")
        before = stored_passages(m)
        assert before
        m.update("s1:t1", pasted(9000, seed=5), user_id="u", conversation_id="c")
        after = stored_passages(m)
        assert after and {p.text for p in after} != {p.text for p in before}
        assert check_store(m.store, "u") == []
        m.update("s1:t1", "Never mind, it was nothing.", user_id="u", conversation_id="c")
        assert stored_passages(m) == []
        assert check_store(m.store, "u") == []
        m.update("s1:t1", pasted(6000), user_id="u", conversation_id="c")
        assert stored_passages(m)
        m.delete("s1:t1", user_id="u", conversation_id="c")
        assert stored_passages(m) == []
        assert check_store(m.store, "u") == []
    finally:
        m.close()


def test_a_long_message_written_alone_gets_its_passages_and_a_rebuild_keeps_them(tmp_path, minilm) -> None:
    """A chat app writes one message at a time into an empty user; the long one waits in the open tail."""
    m = Memstrata(path=tmp_path, embeddings=minilm)
    try:
        for message in chat(pasted(8000)):
            m.ingest([message], user_id="u", conversation_id="c")
        parts = stored_passages(m)
        assert parts and {p.turn_id for p in parts} == {"s1:t1"}
        assert check_store(m.store, "u") == []
        result = m.retrieve("passport number", user_id="u", context_budget=300)
        assert "XK-4411" in result.context
        m.rebuild(user_id="u")
        assert sorted(p.id for p in stored_passages(m)) == sorted(p.id for p in parts)
        assert check_store(m.store, "u") == []
    finally:
        m.close()


def test_a_broken_passage_is_reported(mem: Memstrata) -> None:
    part = stored_passages(mem)[0]
    wrong = part.model_copy(update={"text": "not what the turn says"})
    mem.store.upsert(PASSAGE.kind, [wrong], documents=[wrong.embed_text()], extra=[wrong.metadata()])
    try:
        problems = check_store(mem.store, "u")
        assert [p.invariant for p in problems] == ["passage"]
    finally:
        mem.store.upsert(PASSAGE.kind, [part], documents=[part.embed_text()], extra=[part.metadata()])
    assert check_store(mem.store, "u") == []
