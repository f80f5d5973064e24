"""``memstrata bench chat`` and the counting model it meters LLM mode with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import HashEmbeddings
from memstrata_bench.chat import chat_messages, run_chat
from memstrata_bench.locomo import load_locomo
from typer.testing import CliRunner

from memstrata.cli import app
from memstrata.nodes.ingest.entities import Replacements
from memstrata.nodes.ingest.episodes import Boundaries
from memstrata.nodes.ingest.facts import EpisodeFacts
from memstrata.nodes.ingest.summaries import KeyInformation
from memstrata.nodes.ingest.tree import Consolidation
from memstrata.testing import CountingChatModel


@pytest.mark.parametrize("schema", [Boundaries, EpisodeFacts, KeyInformation, Replacements, Consolidation])
def test_the_counting_model_answers_every_ingestion_decision_with_a_valid_reply(schema) -> None:
    model = CountingChatModel()
    reply = model.bind_tools([schema], tool_choice=schema.__name__).invoke("<messages>\n[0] Ann: I moved to Porto.")
    schema.model_validate(reply.tool_calls[0]["args"])  # raises when invalid
    assert len(model.calls) == 1


def test_chat_messages_are_the_first_turns_one_minute_apart_in_one_session(locomo_path: Path) -> None:
    conv = load_locomo(locomo_path, conversations=["conv-26"])[0]
    rows = chat_messages(conv, 5, one_session=True, ids=True)
    assert [r["id"] for r in rows] == [t.dia_id for t in conv.turns[:5]]
    assert rows[1]["timestamp"] > rows[0]["timestamp"] and rows[4]["timestamp"][:10] == rows[0]["timestamp"][:10]
    assert all("id" not in r for r in chat_messages(conv, 3, one_session=False, ids=False))


def test_the_bench_writes_both_ways_and_meters_each_call_site(locomo_path: Path) -> None:
    result = run_chat(
        locomo_path, embeddings=HashEmbeddings(), conversation="conv-26", messages=14, model="counting", budgets=(500,)
    )
    offline = result["offline"]
    assert offline["same_turns"] and offline["turns_stored"] == {"stream": 14, "batch": 14}
    assert [p["turns_added"] for p in result["per_message"]] == [1] * 14
    llm = result["llm"]
    assert llm["stream"]["calls"] > 0 and llm["batch"]["calls"] > 0
    assert set(llm["stream"]["per_site"]) >= {"segment", "facts", "summarize"}
    assert sum(v["calls"] for v in llm["stream"]["per_site"].values()) == llm["stream"]["calls"]  # every site listed
    assert result["recall"]["stream"]["questions"] == result["recall"]["batch"]["questions"]


def test_the_command_writes_json_and_a_plot(locomo_path: Path, tmp_path: Path) -> None:
    out, plot = tmp_path / "chat.json", tmp_path / "chat.png"
    done = CliRunner().invoke(
        app,
        ["bench", "chat", str(locomo_path), "--messages", "6", "--no-recall", "--out", str(out), "--plot", str(plot)],
    )
    assert done.exit_code == 0, done.output
    result = json.loads(out.read_text())
    assert result["messages"] == 6 and result["offline"]["same_turns"] and plot.stat().st_size > 1000
