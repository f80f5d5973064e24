"""Export and import (``memstrata.portable``): a byte-identical round trip, another user id, bad files refused
before anything is written, tenants kept apart, and the users of a store.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import HashEmbeddings, assert_store_ok

from memstrata import Memstrata
from memstrata.integrations.store import MemstrataStore
from memstrata.portable import export_user, import_user, load_export, users

SESSION_1 = [
    ("Ann", "I adopted a grey cat named Miső last week.", "2024-03-01T10:00"),
    ("Bo", "Lovely! What does she like?", "2024-03-01T10:01"),
    ("Ann", "She loves cardboard boxes.", "2024-03-01T10:02"),
    ("Bo", "I started a pottery class on Tuesdays.", "2024-03-01T10:03"),
    ("Ann", "I work as a nurse in Lisbon.", "2024-03-01T10:04"),
    ("Ann", "I enjoy hiking in the mountains.", "2024-03-01T10:05"),
]
DELETED = SESSION_1[3]
BO_ONLY = "Zanzibar"  # a word only the other user's memory holds


@dataclass
class Source:
    """The source store (users ann and bo) and ann's export."""

    mem: Memstrata
    export: Path
    excluded: str  # the fact ann removed from her persona


def _ann(mem: Memstrata) -> str:
    """Two sessions (explicit and appended places, timed, untimed and write-stamped messages, metadata, a photo,
    unicode), a deleted and an updated turn, a LangGraph store item, and a fact removed from the persona.
    """
    first = [
        {"speaker": s, "text": t, "timestamp": ts, "session": "1", "position": i}
        for i, (s, t, ts) in enumerate(SESSION_1)
    ]
    first[0]["metadata"] = {"source": "app", "score": 1.5, "pinned": True, "n": 3}
    first[2]["image_caption"] = "a grey cat in a box"
    mem.ingest(first, user_id="ann", conversation_id="chat", close=True)
    appended = {"user_id": "ann", "conversation_id": "chat"}
    # U+2028 inside a text: a record still ends only at "\n"
    trip = {"speaker": "Bo", "text": "Привет! Tokyo 東京 trip\u2028next month?", "session": "2"}
    mem.ingest([{**trip, "timestamp": "2024-03-02T09:00"}], **appended, now="2024-03-02T09:01")
    untimed = {"speaker": "Ann", "text": "Yes, flying on Friday.", "session": "2"}
    mem.ingest([untimed], **appended, now="2024-03-02T09:02", stamp_untimed=False)
    mem.ingest([{"speaker": "Bo", "text": "Have a great trip!", "session": "2"}], **appended, now="2024-03-02T09:03")
    thanks = {"speaker": "Ann", "text": "Thanks, I will send photos.", "session": "2"}
    mem.ingest([thanks], **appended, now="2024-03-02T09:04", stamp_untimed=False)
    mem.delete("s1:t3", user_id="ann", conversation_id="chat")
    mem.update("s1:t1", "Lovely! What does she like to eat?", user_id="ann", conversation_id="chat")
    MemstrataStore(mem).put(("ann", "notes"), "m0", {"speaker": "Ann", "text": "Vet appointment on Monday."})
    fact = mem.persona("Ann", user_id="ann")["basic_info"].items[0].fact_id
    mem.forget_persona_item("Ann", "basic_info", fact, user_id="ann")
    return fact


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory, minilm: Any) -> Iterator[Source]:
    folder = tmp_path_factory.mktemp("portable")
    mem = Memstrata(path=folder / "source", embeddings=minilm)
    excluded = _ann(mem)
    mem.ingest([{"speaker": "Bo", "text": f"I sail to {BO_ONLY} in June."}], user_id="bo", conversation_id="chat")
    export_user(mem, folder / "ann.jsonl", user_id="ann")
    yield Source(mem, folder / "ann.jsonl", excluded)
    mem.close()


@pytest.fixture
def fresh(tmp_path: Path, minilm: Any) -> Iterator[Memstrata]:
    mem = Memstrata(path=tmp_path / "fresh", embeddings=minilm)
    yield mem
    mem.close()


def _records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.split("\n") if line]  # not splitlines: U+2028 is in a text


def test_export_import_export_is_byte_identical_and_the_memory_works(
    source: Source, fresh: Memstrata, tmp_path: Path
) -> None:
    records = _records(source.export.read_text(encoding="utf-8"))
    assert records[0] == {"format": "memstrata-export", "version": 1, "user_id": "ann"}
    assert records[-1]["counts"] == {
        "turns": 10,
        "sessions": 3,
        "items": 1,
        "journal": 2,
        "tombstones": 2,
        "persona_exclusions": 1,
    }
    turns = {r["id"]: r for r in records if r.get("type") == "turn"}
    assert "s1:t3" not in turns and turns["s1:t1"]["text"].endswith("to eat?")
    assert turns["s1:t0"]["metadata"] == {"source": "app", "score": 1.5, "pinned": True, "n": 3}
    assert turns["s2:t1"]["time"] is None and turns["s2:t2"]["time_raw"] is None and turns["s2:t2"]["time"]
    assert [r["closed"] for r in records if r.get("type") == "session"] == [True, False, False]

    counts = import_user(fresh, source.export)
    assert counts["turns"] == 10 and counts["persona_exclusions_unplaced"] == 0
    again = tmp_path / "again.jsonl"
    export_user(fresh, again, user_id="ann")
    assert again.read_bytes() == source.export.read_bytes()

    assert_store_ok(fresh.store, "ann")
    found = fresh.retrieve("What is the name of Ann's cat?", user_id="ann", context_budget=400)
    assert "Miső" in found.context
    assert any("Miső" in f["text"] for f in fresh.memories(user_id="ann", kind="fact"))  # rebuilt from the turns
    assert fresh.history(user_id="ann") == source.mem.history(user_id="ann")
    assert MemstrataStore(fresh).get(("ann", "notes"), "m0").value["text"] == "Vet appointment on Monday."
    assert source.excluded in fresh.persona("Ann", user_id="ann")["basic_info"].excluded
    # the tombstones came along: the deleted message sent again stays deleted
    speaker, text, ts = DELETED
    resent = {"speaker": speaker, "text": text, "timestamp": ts, "session": "1", "position": 3}
    assert fresh.ingest([resent], user_id="ann", conversation_id="chat")["turns_buried"] == 1

    with pytest.raises(ValueError, match=r"already has memory.*replace=True"):
        import_user(fresh, source.export)


def test_replace_deletes_the_users_memory_first(source: Source, fresh: Memstrata) -> None:
    fresh.ingest([{"speaker": "Ann", "text": "Something to be replaced."}], user_id="ann", conversation_id="old")
    import_user(fresh, io.StringIO(source.export.read_text(encoding="utf-8")), replace=True)
    out = io.StringIO()
    export_user(fresh, out, user_id="ann")
    assert out.getvalue() == source.export.read_text(encoding="utf-8")
    assert_store_ok(fresh.store, "ann")


def test_import_under_another_user_id(source: Source, fresh: Memstrata, tmp_path: Path) -> None:
    import_user(fresh, source.export, user_id="ann-copy")
    assert users(fresh) == ["ann-copy"]
    assert_store_ok(fresh.store, "ann-copy")
    copy = tmp_path / "copy.jsonl"
    export_user(fresh, copy, user_id="ann-copy")

    def comparable(path: Path) -> list[str]:  # what names the user differs, nothing else
        out = []
        for r in _records(path.read_text(encoding="utf-8")):
            r.pop("user_id", None)
            if r.get("table") in ("items", "tombstones"):
                r.pop("key")
                r["fields"].pop("namespace", None)
            out.append(json.dumps(r, sort_keys=True))
        return sorted(out)  # rows are sorted by key

    assert comparable(copy) == comparable(source.export)
    item = MemstrataStore(fresh).get(("ann-copy", "notes"), "m0")
    assert item is not None and item.namespace == ("ann-copy", "notes")
    speaker, text, ts = DELETED
    resent = {"speaker": speaker, "text": text, "timestamp": ts, "session": "1", "position": 3}
    assert fresh.ingest([resent], user_id="ann-copy", conversation_id="chat")["turns_buried"] == 1


def _bad_files(good: str) -> dict[str, tuple[str, str]]:
    """Broken versions of a good export, each with the error it must raise."""
    header, turn, *rest, end = good.splitlines(keepends=True)
    body = "".join([turn, *rest])
    empty = json.dumps({**json.loads(turn), "text": " "}, sort_keys=True) + "\n"
    counts = json.loads(end)["counts"]
    twice = json.dumps({"type": "end", "counts": {**counts, "turns": counts["turns"] + 1}}) + "\n"
    return {
        "messages": ('[{"speaker": "Ann", "text": "hi"}]\n', "not a memstrata export"),
        "empty": ("", "not a memstrata export"),
        "version": (header.replace('"version": 1', '"version": 2') + body + end, "version 2 is not supported"),
        "cut off": (header + body, "no end record"),
        "a line lost": (header + "".join(rest) + end, "the end record counts"),
        "empty text": (header + empty + "".join(rest) + end, "empty or missing 'text'"),
        "unknown record": (header + '{"type": "vector", "values": [1.0]}\n' + body + end, "record of type"),
        "twice": (header + turn + body + twice, "a turn id twice"),
    }


@pytest.mark.parametrize(
    "case", ["messages", "empty", "version", "cut off", "a line lost", "empty text", "unknown record", "twice"]
)
def test_a_bad_file_is_refused_before_anything_is_written(tmp_path: Path, case: str) -> None:
    good = _export_text()
    text, error = _bad_files(good)[case]
    path = tmp_path / "bad.jsonl"
    path.write_text(text, encoding="utf-8")
    mem = Memstrata(path=tmp_path / "target", embeddings=HashEmbeddings())
    with pytest.raises(ValueError, match=error):
        import_user(mem, path)
    assert users(mem) == [] and mem.store.count("turn", user_id="ann") == 0
    mem.close()


def _export_text() -> str:
    """A small valid export, written by hand (no store needed to check the checks)."""
    turn = {
        "type": "turn",
        "conversation_id": "chat",
        "session_id": "1",
        "position": 0,
        "id": "s1:t0",
        "speaker": "Ann",
        "text": "I adopted a cat.",
        "image_caption": None,
        "time_raw": "2024-03-01T10:00",
        "time": "2024-03-01T10:00:00",
        "metadata": {},
    }
    second = {**turn, "position": 1, "id": "s1:t1", "text": "She is grey."}
    session = {
        "type": "session",
        "conversation_id": "chat",
        "session_id": "1",
        "closed": True,
        "next": 2,
        "latest": 1.0,
    }
    counts = {"turns": 2, "sessions": 1, "items": 0, "journal": 0, "tombstones": 0, "persona_exclusions": 0}
    records = [
        {"format": "memstrata-export", "version": 1, "user_id": "ann"},
        turn,
        second,
        session,
        {"type": "end", "counts": counts},
    ]
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    assert load_export(io.StringIO(text)).user_id == "ann"  # the base of every bad file is good
    return text


def test_tenants_stay_apart(source: Source, fresh: Memstrata) -> None:
    assert users(source.mem) == ["ann", "bo"]
    text = source.export.read_text(encoding="utf-8")
    assert BO_ONLY not in text and '"bo"' not in text

    fresh.ingest([{"speaker": "Cy", "text": "My bike is red."}], user_id="cy", conversation_id="chat", close=True)
    before, after = io.StringIO(), io.StringIO()
    export_user(fresh, before, user_id="cy")
    import_user(fresh, source.export)
    export_user(fresh, after, user_id="cy")
    assert after.getvalue() == before.getvalue()
    assert users(fresh) == ["ann", "cy"]
    assert "bike" not in fresh.retrieve("What colour is the bike?", user_id="ann").context
    with pytest.raises(LookupError, match="no memory for user 'bo'"):
        export_user(fresh, io.StringIO(), user_id="bo")


def test_users_and_a_round_trip_through_a_chroma_server(
    chroma_server: Any, hash_embeddings: Any, tmp_path: Path
) -> None:
    # the session's server is shared: its collections keep the embedder the first test gave them (hash embeddings)
    served = Memstrata(url=chroma_server.url, embeddings=hash_embeddings)
    names = [f"portable-{tmp_path.name}-{n}" for n in ("a", "b")]
    for name in names:
        served.ingest([{"speaker": "Ann", "text": f"{name} likes tea."}], user_id=name, conversation_id="c")
    MemstrataStore(served).put((names[1], "notes"), "k", {"speaker": "Ann", "text": "Call the plumber."})
    assert set(names) <= set(users(served))
    out = tmp_path / "served.jsonl"
    export_user(served, out, user_id=names[1])
    served.delete_user(user_id=names[0])
    assert names[0] not in users(served) and names[1] in users(served)

    local = Memstrata(path=tmp_path / "local", embeddings=hash_embeddings)
    import_user(local, out)
    again = tmp_path / "again.jsonl"
    export_user(local, again, user_id=names[1])
    assert again.read_bytes() == out.read_bytes()
    served.delete_user(user_id=names[1])
    served.close()
    local.close()
