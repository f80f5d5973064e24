"""Input normalization: formats, deterministic ids, timestamps and clear errors."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from memstrata.errors import IngestError
from memstrata.memory.levels import Episode, EventSummary, Turn
from memstrata.memory.normalize import load_path, normalize_input
from memstrata.memory.timeparse import RELATIVE_PATTERN, describe_resolved, parse_timestamp, resolve_relative

LOCOMO_ONE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "I went to Porto yesterday."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a bridge"},
        ],
        "session_2_date_time": "29.12.2023, 22:42:04",
        "session_3_date_time": "never happened",
        "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "Happy holidays."}],
    },
}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("29.12.2023, 22:42:04", datetime(2023, 12, 29, 22, 42, 4)),
        ("2024-03-02T18:05:00Z", datetime(2024, 3, 2, 18, 5)),
        ("2024-03-02T18:05:00+02:00", datetime(2024, 3, 2, 16, 5)),
        ("not a date at all", None),
        ("", None),
    ],
)
def test_parse_timestamp_formats(raw: str, expected: datetime | None) -> None:
    assert parse_timestamp(raw) == expected


def test_relative_dates_resolve_against_the_session() -> None:
    anchor = datetime(2023, 5, 8)  # a Monday
    assert resolve_relative("yesterday", anchor) == datetime(2023, 5, 7)
    assert resolve_relative("last Saturday", anchor) == datetime(2023, 5, 6)
    assert resolve_relative("two weeks ago", anchor) == datetime(2023, 4, 24)
    assert resolve_relative("next month", anchor).month == 6
    assert resolve_relative("the day before yesterday", anchor) == datetime(2023, 5, 6)
    assert resolve_relative("a couple of days ago", anchor) == datetime(2023, 5, 6)
    assert resolve_relative("several weeks back", anchor) == datetime(2023, 4, 17)
    assert resolve_relative("a fortnight ago", anchor) == datetime(2023, 4, 24)
    assert resolve_relative("last weekend", anchor) == datetime(2023, 5, 6)  # its Saturday
    assert resolve_relative("the other day", anchor) is None  # too vague to date


def test_relative_phrases_are_found_in_text_and_labelled_at_their_granularity() -> None:
    anchor = datetime(2023, 5, 10)  # a Wednesday
    found = [
        m.group(0)
        for m in RELATIVE_PATTERN.finditer(
            "The day before yesterday I ran; over the weekend we hiked; a couple days ago, two years back."
        )
    ]
    assert found == ["The day before yesterday", "over the weekend", "a couple days ago", "two years back"]
    assert describe_resolved("last weekend", anchor) == "the weekend of 6 May 2023"
    assert describe_resolved("three weeks back", anchor) == "19 April 2023"
    assert describe_resolved("last week", anchor) == "the week of 3 May 2023"


def test_locomo_keeps_input_ids_and_session_times() -> None:
    (conv,) = normalize_input(LOCOMO_ONE, user_id="u")
    assert conv.conversation_id == "conv-x"
    assert [s.session_id for s in conv.sessions] == ["1", "2"]  # the date key of a missing session is ignored
    first = conv.sessions[0].turns[0]
    assert first.id == "D1:1" and first.timestamp == datetime(2023, 5, 8, 13, 56)
    assert first.timestamp_raw == "1:56 pm on 8 May, 2023"
    assert conv.sessions[0].turns[1].image_caption == "a bridge"


def test_plain_messages_get_position_ids_and_time_gap_sessions() -> None:
    msgs = [
        {"speaker": "A", "text": "one", "timestamp": "2024-01-01T10:00"},
        {"speaker": "B", "text": "two", "timestamp": "2024-01-01T10:05"},
        {"speaker": "A", "text": "three", "timestamp": "2024-01-03T09:00"},
    ]
    (conv,) = normalize_input(msgs, user_id="u", conversation_id="c")
    assert [[t.id for t in s.turns] for s in conv.sessions] == [["s1:t0", "s1:t1"], ["s2:t0"]]
    again = normalize_input(msgs, user_id="u", conversation_id="c")[0]
    assert [t.id for s in again.sessions for t in s.turns] == ["s1:t0", "s1:t1", "s2:t0"]


def test_langchain_messages() -> None:
    (conv,) = normalize_input([HumanMessage("I live in Oslo."), AIMessage("Noted.")], user_id="u")
    speakers = [t.speaker for t in conv.sessions[0].turns]
    assert speakers == ["user", "assistant"]


def test_unparseable_timestamp_is_reported_and_kept() -> None:
    (conv,) = normalize_input([{"speaker": "A", "text": "hi", "timestamp": "sometime soonish"}], user_id="u")
    turn = conv.sessions[0].turns[0]
    assert turn.timestamp is None and turn.timestamp_raw == "sometime soonish"
    assert "message #0" in conv.warnings[0] and "sometime soonish" in conv.warnings[0]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ([{"speaker": "A", "text": "  "}], "message #0: empty or missing 'text'"),
        ([{"speaker": "A", "text": "ok"}, {"text": "no speaker"}], "message #1: missing 'speaker'"),
        ([1, 2, 3], "unknown input format"),
        ([], "empty list"),
    ],
)
def test_bad_input_names_problem_and_place(data: object, fragment: str) -> None:
    with pytest.raises(IngestError, match=fragment.replace("'", ".").replace("#", "#")):
        normalize_input(data, user_id="u", source="file.json")


def test_the_shapes_people_send_are_accepted() -> None:
    """OpenAI's role/content list, a list of conversations, multi-part content and one message on its own."""
    [chat] = normalize_input(
        [{"role": "user", "content": "I adopted a cat."}, {"role": "assistant", "content": "Nice!"}], user_id="u"
    )
    assert [(t.speaker, t.text) for s in chat.sessions for t in s.turns] == [
        ("user", "I adopted a cat."),
        ("assistant", "Nice!"),
    ]
    convs = normalize_input(
        [
            {"conversation_id": "a", "messages": [{"speaker": "A", "text": "hi"}]},
            {"conversation_id": "b", "messages": [{"role": "user", "content": "yo"}]},
        ],
        user_id="u",
    )
    assert [c.conversation_id for c in convs] == ["a", "b"]
    [parts] = normalize_input(
        {
            "role": "user",
            "content": [{"type": "text", "text": "Look at my cat"}, {"type": "image_url", "image_url": {"url": "x"}}],
        },
        user_id="u",
    )
    assert [t.text for s in parts.sessions for t in s.turns] == ["Look at my cat"]
    assert parts.warnings == ["<input>: conversation default, message #0: kept the text parts; not stored: image_url"]
    [solo] = normalize_input({"speaker": "Ann", "text": "solo"}, user_id="u", conversation_id="c")
    assert (solo.conversation_id, [t.text for s in solo.sessions for t in s.turns]) == ("c", ["solo"])
    with pytest.raises(IngestError, match="message #0: empty or missing 'text'"):
        normalize_input([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}], user_id="u")
    with pytest.raises(IngestError, match=r"conversation #1.*'messages' must be a non-empty list"):
        normalize_input(
            [
                {"conversation_id": "a", "messages": [{"speaker": "A", "text": "hi"}]},
                {"conversation_id": "b", "messages": []},
            ],
            user_id="u",
        )


def test_malformed_json_names_file_and_line(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('[{"speaker": "A",\n "text": }]')
    with pytest.raises(IngestError, match=r"bad.json: malformed JSON at line 2"):
        load_path(bad)


def test_only_conversation_selects_and_reports_unknown() -> None:
    two = [LOCOMO_ONE, {**LOCOMO_ONE, "sample_id": "conv-y"}]
    assert [c.conversation_id for c in normalize_input(two, user_id="u", only_conversation="conv-y")] == ["conv-y"]
    with pytest.raises(IngestError, match="no conversation with id 'conv-z'"):
        normalize_input(two, user_id="u", only_conversation="conv-z")


def test_unit_ids_are_deterministic() -> None:
    turn = Turn(user_id="u", session_id="2", position=3, speaker="A", text="x")
    assert turn.id == "s2:t3"
    ep = Episode(user_id="u", session_id="2", turn_ids=["s2:t3"], start_position=3, end_position=3, text="A: x")
    assert ep.id == "ep:s2:3-3" and ep.summary_id == "sum:s2:3-3"
    summary = EventSummary(user_id="u", episode_id=ep.id, session_id="2", text="x")
    assert summary.id == ep.summary_id
    with pytest.raises(ValueError, match="user_id"):
        Turn(user_id=" ", session_id="1", position=0, speaker="A", text="x")


def test_example_file_is_valid(tmp_path) -> None:
    from conftest import EXAMPLE

    data = json.loads(EXAMPLE.read_text())
    (conv,) = normalize_input(data, user_id="u")
    assert conv.conversation_id == "priya-tom" and len(conv.sessions) == 3 and conv.turn_count == 36
