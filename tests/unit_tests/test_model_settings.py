"""The model settings: a model name refused at once without a key, ``base_url``, a separate ``ingest_model``, and
"did you mean" for a misspelt setting. No network: scripted models, the hash embedder, a ``ChatOpenAI`` never called.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from conftest import HashEmbeddings
from pydantic import TypeAdapter

from memstrata import Memstrata
from memstrata.context import Context, unknown_settings
from memstrata.errors import ModelConfigError
from memstrata.runtime.llm import PLACEHOLDER_KEY, chat_model
from memstrata.runtime.resolve import resolve_model
from memstrata.runtime.step import Step
from memstrata.testing import CountingChatModel

ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMSTRATA_BASE_URL", "MEMSTRATA_MODEL", "MEMSTRATA_INGEST_MODEL")
LOCAL = "http://127.0.0.1:8080/v1"
CONVERSATION = [
    {"speaker": "Priya", "text": "I adopted a cat named Miso last week.", "timestamp": "2024-03-01T10:00:00"},
    {"speaker": "Tom", "text": "Lovely! What colour is Miso?", "timestamp": "2024-03-01T10:01:00"},
    {"speaker": "Priya", "text": "Ginger, with one white paw.", "timestamp": "2024-03-01T10:02:00"},
    {"speaker": "Tom", "text": "I started learning the cello with Ines.", "timestamp": "2024-03-02T20:40:00"},
    {"speaker": "Priya", "text": "Nice! On which day are the lessons?", "timestamp": "2024-03-02T20:42:00"},
    {"speaker": "Tom", "text": "On Thursdays, after work at the bakery.", "timestamp": "2024-03-02T20:44:00"},
]

# The graphs take their model from memstrata.runtime.resolve.resolve_model; until it builds the model through
# llm.chat_model, ingestion and retrieval share `model` and a name ignores `base_url`.
WIRED = "ingest" in inspect.signature(resolve_model).parameters
needs_wiring = pytest.mark.xfail(
    not WIRED, reason="resolve_model/Step.for_ingestion do not go through llm.chat_model yet", strict=True
)


@pytest.fixture(autouse=True)
def _no_model_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def _mem(path: Path, **settings: Any) -> Memstrata:
    return Memstrata(path=path, embeddings=HashEmbeddings(), **settings)


# ---- a model name without a key ----------------------------------------------------------------


def test_a_model_name_with_no_key_and_no_base_url_is_refused_when_memstrata_is_made(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError) as caught:
        _mem(tmp_path / "m", model="gpt-4.1-mini")
    message = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert "model='gpt-4.1-mini'" in message
    assert all(fix in message for fix in ("OPENAI_API_KEY", "base_url", "$MEMSTRATA_BASE_URL"))
    assert not (tmp_path / "m").exists()  # refused before any work: not even the store folder


@pytest.mark.parametrize(
    ("variable", "setting"),
    [("MEMSTRATA_MODEL", "$MEMSTRATA_MODEL"), ("MEMSTRATA_INGEST_MODEL", "$MEMSTRATA_INGEST_MODEL")],
)
def test_a_name_from_the_environment_is_refused_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, setting: str
) -> None:
    monkeypatch.setenv(variable, "gpt-4.1-mini")
    with pytest.raises(ModelConfigError, match=rf"^\{setting}='gpt-4.1-mini'"):
        _mem(tmp_path / "m")


def test_a_name_given_for_one_call_is_refused_before_the_graph_runs(tmp_path: Path) -> None:
    mem = _mem(tmp_path / "m")
    with pytest.raises(ModelConfigError, match=r"^ingest_model="):
        mem.ingest(CONVERSATION, user_id="u", ingest_model="gpt-4.1-mini")
    assert mem.conversations(user_id="u") == []
    mem.close()


@pytest.mark.parametrize(
    "how", ["OPENAI_API_KEY", "MEMSTRATA_BASE_URL", "OPENAI_BASE_URL", "base_url", "a model object"]
)
def test_a_key_a_base_url_or_a_model_object_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    settings: dict[str, Any] = {"model": "gpt-4.1-mini"}
    if how == "base_url":
        settings["base_url"] = LOCAL
    elif how == "a model object":
        settings["model"] = CountingChatModel()
    else:
        monkeypatch.setenv(how, "sk-test" if how == "OPENAI_API_KEY" else LOCAL)
    _mem(tmp_path / "m", **settings).close()


def test_a_base_url_at_openais_own_api_still_needs_the_key() -> None:
    with pytest.raises(ModelConfigError):
        Context(user_id="u", model="gpt-4.1-mini", base_url="https://api.openai.com/v1")


# ---- base_url ----------------------------------------------------------------------------------


def test_a_name_at_a_base_url_is_a_chatopenai_there_with_a_placeholder_key() -> None:
    model: Any = chat_model(Context(user_id="u", model="smollm2", base_url=LOCAL, llm_max_tokens=64))
    assert model.model_name == "smollm2" and model.openai_api_base == LOCAL
    assert model.openai_api_key.get_secret_value() == PLACEHOLDER_KEY
    assert model.extra_body == {"max_tokens": 64}  # llama.cpp, vLLM and Ollama read max_tokens


def test_a_set_key_is_sent_and_openais_api_gets_no_extra_body(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model: Any = chat_model(Context(user_id="u", model="gpt-4.1-mini"))
    assert model.openai_api_key.get_secret_value() == "sk-test" and model.extra_body is None


def test_base_url_an_explicit_value_wins_over_memstrata_base_url_over_openai_base_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMSTRATA_BASE_URL", "http://memstrata-env/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai-env/v1")
    assert Context(user_id="u", base_url=LOCAL).resolved_base_url == LOCAL
    assert Context(user_id="u").resolved_base_url == "http://memstrata-env/v1"
    monkeypatch.delenv("MEMSTRATA_BASE_URL")
    assert Context(user_id="u").resolved_base_url == "http://openai-env/v1"
    model: Any = chat_model(Context(user_id="u", model="smollm2", base_url=LOCAL))
    assert model.openai_api_base == LOCAL


def test_studio_sees_every_model_setting_as_a_name() -> None:
    schema = TypeAdapter(Context).json_schema()  # two BaseChatModel fields once broke it
    for name in ("model", "ingest_model", "base_url"):
        assert schema["properties"][name]["anyOf"] == [{"type": "string"}, {"type": "null"}]


@needs_wiring
def test_the_graphs_model_is_built_at_the_base_url() -> None:
    model: Any = resolve_model(Context(user_id="u", model="smollm2", base_url=LOCAL))
    assert model.openai_api_base == LOCAL


async def test_a_name_at_base_url_is_served_by_a_real_local_server_with_no_key(llama_server: str) -> None:
    model = chat_model(Context(user_id="u", model="smollm2", base_url=llama_server, llm_max_tokens=8))
    assert model is not None
    reply = await model.ainvoke("Say hello.")  # no OPENAI_API_KEY: the placeholder key is accepted
    assert reply.usage_metadata and reply.usage_metadata["output_tokens"] > 0


# ---- ingest_model ------------------------------------------------------------------------------


def test_ingest_model_an_explicit_value_wins_over_its_variable_which_wins_over_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMSTRATA_BASE_URL", LOCAL)
    monkeypatch.setenv("MEMSTRATA_MODEL", "env-model")
    assert Context(user_id="u").model_setting(ingest=True) == ("$MEMSTRATA_MODEL", "env-model")
    assert Context(user_id="u", model="mine").model_setting() == ("model", "mine")
    assert Context(user_id="u", model="mine").model_setting(ingest=True) == ("model", "mine")
    monkeypatch.setenv("MEMSTRATA_INGEST_MODEL", "env-ingest")
    assert Context(user_id="u", model="mine").model_setting(ingest=True) == ("$MEMSTRATA_INGEST_MODEL", "env-ingest")
    assert Context(user_id="u", ingest_model="writer").model_setting(ingest=True) == ("ingest_model", "writer")
    assert Context(user_id="u", ingest_model="").model_setting(ingest=True) == ("ingest_model", None)
    assert Context(user_id="u", model="").model_setting() == ("model", None)


def test_ingest_model_alone_is_llm_mode_for_ingestion_only() -> None:
    ctx = Context(user_id="u", ingest_model=CountingChatModel())
    assert ctx.ingest_llm_mode and not ctx.llm_mode
    assert chat_model(ctx, ingest=True) is ctx.ingest_model and chat_model(ctx) is None


@needs_wiring
def test_ingestion_steps_get_ingest_model_and_query_steps_get_model() -> None:
    writer, answerer = CountingChatModel(), CountingChatModel()
    ctx = Context(user_id="u", model=answerer, ingest_model=writer)
    assert Step.for_ingestion(ctx).model is writer
    assert Step.for_query(ctx).model is answerer


@needs_wiring
async def test_ingestion_calls_go_to_ingest_model_and_retrieval_calls_to_model(tmp_path: Path) -> None:
    writer, answerer = CountingChatModel(), CountingChatModel()
    mem = _mem(tmp_path / "m", model=answerer, ingest_model=writer)
    stats = await mem.aingest(CONVERSATION, user_id="u", conversation_id="c", close=True)
    written = len(writer.calls)
    assert written > 0 and stats["llm"] and answerer.calls == []
    result = await mem.aask("What is the cat called?", user_id="u")
    assert answerer.calls and len(writer.calls) == written
    assert result.answer
    mem.close()


@needs_wiring
async def test_ingest_model_alone_leaves_retrieval_offline(tmp_path: Path) -> None:
    writer = CountingChatModel()
    mem = _mem(tmp_path / "m", ingest_model=writer)
    await mem.aingest(CONVERSATION, user_id="u", conversation_id="c", close=True)
    written = len(writer.calls)
    assert written > 0
    result = await mem.aask("What is the cat called?", user_id="u")
    assert result.answer is None and len(writer.calls) == written
    assert any("Miso" in e.text for e in result.evidence)
    mem.close()


# ---- did you mean -----------------------------------------------------------------------------


def test_a_misspelt_setting_names_itself_and_the_closest_valid_one(tmp_path: Path) -> None:
    with pytest.raises(TypeError) as caught:
        _mem(tmp_path / "m", contxt_budget=5)
    assert str(caught.value) == (
        "unknown setting 'contxt_budget'; did you mean 'context_budget'? "
        "(every setting is a field of memstrata.Context)"
    )


def test_several_unknown_settings_are_each_named_with_their_hints() -> None:
    message = unknown_settings(["level1k", "zzzz"])
    assert message == (
        "unknown settings 'level1k' (did you mean 'level1_k'?), 'zzzz'; every setting is a field of memstrata.Context"
    )
    assert "bounded_dense_k" not in message  # no longer the list of every field


def test_user_id_is_not_a_setting_of_the_facade(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"^unknown setting 'user_id'"):
        _mem(tmp_path / "m", user_id="u")


def test_exclude_turns_takes_ids_not_one_string() -> None:
    """A single id given as a string would be read as its characters and leave nothing out."""
    with pytest.raises(ValueError, match="exclude_turns takes a list of turn ids"):
        Context(user_id="u", exclude_turns="s1:t3")  # type: ignore[arg-type]
    assert Context(user_id="u", exclude_turns=["s1:t3", "m-9"]).exclude_turns == ("s1:t3", "m-9")
