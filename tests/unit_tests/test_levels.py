"""The level abstraction: a new unit kind plugs in with its module alone; the store's three parts share a tenant."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from conftest import EXAMPLE

from memstrata import Memstrata
from memstrata.context import Context
from memstrata.memory.index import MemoryIndex
from memstrata.memory.levels import Level, Turn, get_level, levels, register, scope_table, unregister
from memstrata.memory.models import Unit
from memstrata.memory.store import Edge, MemoryStore
from memstrata.runtime.search import scope_kinds


class SpeakerDigest(Unit):
    """A toy kind: everything one speaker said in a conversation, as one searchable unit."""

    speaker: str
    text: str
    turn_ids: list[str]


def one_digest_per_speaker(turns: Sequence[Turn]) -> list[Unit]:
    by_speaker: dict[str, list[Turn]] = {}
    for turn in turns:
        by_speaker.setdefault(turn.speaker, []).append(turn)
    return [
        SpeakerDigest(
            user_id=ts[0].user_id,
            conversation_id=ts[0].conversation_id,
            id=f"digest:{speaker}",
            speaker=speaker,
            text=" ".join(t.text for t in ts),
            turn_ids=[t.id for t in ts],
        )
        for speaker, ts in by_speaker.items()
    ]


@pytest.fixture
def toy_kind() -> Iterator[Level]:
    level = register(
        Level(
            kind="speaker_digest",
            unit=SpeakerDigest,
            role="event",
            scopes=("Long",),
            description="one digest per speaker",
            derive=one_digest_per_speaker,
        )
    )
    yield level
    unregister(level.kind)


def test_a_registered_kind_is_ingested_searched_traced_and_forgotten(toy_kind, data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    stats = mem.ingest(EXAMPLE, user_id="u")
    assert stats["derived_written"] == {"speaker_digest": 2}
    assert {r.unit_id for r in mem.store.get("speaker_digest", user_id="u")} == {"digest:Priya", "digest:Tom"}
    assert mem.ingest(EXAMPLE, user_id="u")["turns_added"] == 0
    assert mem.store.count("speaker_digest", user_id="u") == 2  # re-ingesting adds nothing

    assert "speaker_digest" in scope_table()["Long"] and "speaker_digest" not in scope_table()["Short"]
    only_toy = {scope: ["speaker_digest"] for scope in ("Short", "Long", "Mixed")}
    result = mem.retrieve(
        "What does Tom like doing?",
        user_id="u",
        retrieval={"scope_kinds": only_toy},
    )
    lookup = next(e for e in result.trace["events"] if e["node"] == "lookup_level1")
    assert lookup["found_by"].get("speaker_digest", 0) > 0
    assert any(e.found_by == "speaker_digest" and e.level == "level1" for e in result.evidence)

    removed = mem.delete_user(user_id="u")
    assert removed["speaker_digest"] == 2
    assert all(mem.store.count(lv.kind, user_id="u") == 0 for lv in levels())


def test_a_stored_kind_is_forgotten_even_after_it_is_unregistered(toy_kind, data_dir, hash_embeddings) -> None:
    mem = Memstrata(path=data_dir, embeddings=hash_embeddings)
    mem.ingest(EXAMPLE, user_id="u")
    unregister(toy_kind.kind)
    fresh = MemoryStore(path=data_dir, embeddings=hash_embeddings)
    assert "speaker_digest" in fresh.stored_kinds()
    assert fresh.delete_user(user_id="u")["speaker_digest"] == 2


def test_unknown_kinds_and_bad_declarations_are_clear_errors() -> None:
    with pytest.raises(KeyError, match="registered kinds"):
        get_level("nope")
    with pytest.raises(ValueError, match="unknown scope"):
        Level(kind="x", unit=Unit, role="event", description="", scopes=("Sometimes",))
    with pytest.raises(ValueError, match="only one raw kind"):
        register(Level(kind="other_turns", unit=Turn, role="raw", description=""))


def test_scope_routing_is_a_table() -> None:
    table = scope_table()
    both = ["turn", "passage", "summary", "fact"]  # a long turn's passages are searched wherever turns are
    assert table["Short"][:4] == both and table["Mixed"][:4] == both
    assert "passage" not in table["Long"]
    assert table["Long"][:2] == ["summary", "fact"] and "turn" not in table["Long"]
    assert scope_kinds(
        Context(
            user_id="u",
            retrieval={"scope_kinds": {"Long": ["turn"]}},
        )
    ) == {"Long": ["turn"]}


@pytest.fixture(params=["embedded", "server"])
def store(request: pytest.FixtureRequest, tmp_path, hash_embeddings) -> MemoryStore:
    if request.param == "embedded":
        return MemoryStore(path=tmp_path / "chroma", embeddings=hash_embeddings)
    server = request.getfixturevalue("chroma_server")
    return MemoryStore(url=server.url, embeddings=hash_embeddings)


def test_edges_and_counters_live_beside_the_units_and_never_bump_the_snapshot(store: MemoryStore) -> None:
    user = f"u-{id(store)}"  # the server is shared by the session: a user of this test's own
    turns = [
        Turn(user_id=user, conversation_id="c", session_id="1", position=i, speaker="Ann", text=f"line {i}")
        for i in range(3)
    ]
    store.upsert("turn", turns, documents=[t.render() for t in turns], extra=[t.metadata() for t in turns])
    index = MemoryIndex.load(store, user_id=user)
    version = store.versions.get(user)
    store.edges.add(user, [Edge(conversation_id="c", src="s1:t0", rel="mentions", dst="s1:t2")])
    store.counters.record_recall(user, [("c", "turn", "s1:t0")], at=1.0)
    store.counters.reinforce(user, [("c", "turn", "s1:t1")], at=2.0)
    assert store.versions.get(user) == version
    assert MemoryIndex.fresh(store, user_id=user) is index  # the snapshot is still trusted, no rebuild
    assert [(e.src, e.dst) for e in store.edges.get(user, src="s1:t0")] == [("s1:t0", "s1:t2")]
    counters = store.counters.get(user, [("c", "turn", "s1:t0"), ("c", "turn", "s1:t1")])
    assert counters[("c", "turn", "s1:t0")].recall_count == 1
    assert counters[("c", "turn", "s1:t1")].reinforcement_count == 1
    removed = store.delete_user(user)
    assert removed["turn"] == 3 and removed["edges"] == 1 and removed["counters"] == 2
    assert store.edges.count(user) == 0 and store.counters.all(user) == []
