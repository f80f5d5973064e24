"""One store format: a version written when a store is created and checked when it is opened.

A new store records :data:`STORE_FORMAT`; a store of another version, or one that holds memory and no version (written
before stores had one), is refused with :class:`StoreFormatError`, which names both versions and what to do; the CLI
prints it as one line and exits 2. Embedded stores in a temp folder, and server stores on a ``chroma run`` of this
module's own (the tests rewrite the default database's marker, which the session's shared server must keep).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import HashEmbeddings
from plugins.chroma_server import ChromaServer, start_chroma
from typer.testing import CliRunner, Result

import memstrata.cli as cli
from memstrata import Memstrata
from memstrata.errors import StoreError, StoreFormatError
from memstrata.memory.store import STORE_FORMAT, MemoryStore
from memstrata.memory.store.format import FORMAT_COLLECTION, FORMAT_KEY, recorded
from memstrata.memory.store.tables import TableRow

MESSAGES = [
    {"speaker": "Ann", "text": "I adopted a cat named Miso last spring.", "timestamp": "2024-03-01 10:00"},
    {"speaker": "Bob", "text": "Miso is a lovely name. Is she calm?", "timestamp": "2024-03-01 10:01"},
    {"speaker": "Ann", "text": "Very calm, she sleeps on the piano all day.", "timestamp": "2024-03-01 10:02"},
]
HASH = HashEmbeddings()
RUNNER = CliRunner()
QUIET = {"COLUMNS": "400", "MEMSTRATA_MODEL": None, "MEMSTRATA_INGEST_MODEL": None, "MEMSTRATA_CHROMA_URL": None}


class _HashMemstrata(Memstrata):
    """What the CLI builds, on hash embeddings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, embeddings=HASH, **kwargs)


def _ingest(**where: Any) -> None:
    """Ann's conversation written through the whole ingestion (turns, episodes, facts, side tables), then closed."""
    mem = Memstrata(embeddings=HashEmbeddings(), **where)
    try:
        mem.ingest(MESSAGES, user_id="ann", conversation_id="chat")
    finally:
        mem.close()


def _stamp(store: MemoryStore, version: Any) -> None:
    """Record another format in the store's marker (``None``: remove it, as a store written before formats had one)."""
    if version is None:
        store.client.delete_collection(FORMAT_COLLECTION)
    else:
        store.client.get_collection(FORMAT_COLLECTION, embedding_function=None).modify(metadata={FORMAT_KEY: version})


def _refused(version: Any, **where: Any) -> str:
    """The message a store of ``version`` is refused with; it names both versions."""
    with pytest.raises(StoreFormatError) as refused:
        MemoryStore(embeddings=HashEmbeddings(), **where)
    message = str(refused.value)
    assert f"this memstrata reads store format {STORE_FORMAT} only" in message
    if version is None:
        assert "holds memory written before store formats had a version (it has none)" in message
    else:
        assert f"is in store format {version}," in message
    assert "`memstrata export`" in message and "`memstrata import`" in message and "migrate" not in message
    assert ("newer memstrata" in message) == (isinstance(version, int) and version > STORE_FORMAT)
    return message


def _cli(*args: str) -> Result:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "Memstrata", _HashMemstrata)
        return RUNNER.invoke(cli.app, list(args), env=QUIET)


def _one_line_exit_2(done: Result) -> str:
    assert done.exit_code == 2, (done.exit_code, done.output, done.exception)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.output, done.stderr
    return lines[0]


# ---- embedded ---------------------------------------------------------------------------------------------------


def test_a_new_store_records_the_format_and_opens_again_with_its_memory(data_dir: str) -> None:
    store = MemoryStore(path=data_dir, embeddings=HASH)
    assert recorded(store.client) == STORE_FORMAT
    store.close()
    _ingest(path=data_dir)
    again = MemoryStore(path=data_dir, embeddings=HashEmbeddings())
    assert recorded(again.client) == STORE_FORMAT
    assert again.count("turn", user_id="ann") == 3 and again.sequences.sessions("ann", "chat")


@pytest.mark.parametrize("version", [0, STORE_FORMAT + 1, None], ids=["older", "newer", "none"])
def test_a_store_of_another_format_is_refused_naming_both_versions(data_dir: str, version: Any) -> None:
    _ingest(path=data_dir)
    _stamp(MemoryStore(path=data_dir, embeddings=HASH), version)
    _refused(version, path=data_dir)
    _refused(version, path=data_dir)  # refused again: the refusal recorded nothing
    assert isinstance(StoreFormatError("x"), StoreError)  # what the CLI and callers of a store already catch


def test_memory_only_in_the_side_tables_is_memory(data_dir: str) -> None:
    """A store whose only memory is a side table's row (a LangGraph store item) and no format is refused too."""
    store = MemoryStore(path=data_dir, embeddings=HASH)
    store.items.upsert([TableRow("k1", "ann", "chat", {"value": "{}"})])
    _stamp(store, None)
    _refused(None, path=data_dir)


def test_a_store_with_no_memory_and_no_format_gets_this_format(data_dir: str) -> None:
    """Empty collections and tables hold no memory: such a store is new, and opens in this format."""
    store = MemoryStore(path=data_dir, embeddings=HASH)
    store.collection("turn")
    _stamp(store, None)
    assert recorded(store.client) is None
    again = MemoryStore(path=data_dir, embeddings=HASH)
    assert recorded(again.client) == STORE_FORMAT


def test_the_cli_prints_a_refused_store_as_one_line_and_exits_2(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    _ingest(path=str(folder))
    _stamp(MemoryStore(path=folder, embeddings=HASH), None)
    source = tmp_path / "more.json"
    source.write_text('[{"speaker": "Ann", "text": "Miso turned two today."}]', encoding="utf-8")
    at = ("--data-dir", str(folder))
    for command in (["users"], ["list", "-u", "ann"], ["ask", "What is the cat called?", "-u", "ann"]):
        line = _one_line_exit_2(_cli(*command, *at))
        assert f"the store at {folder} holds memory written before store formats had a version" in line, command
        assert f"store format {STORE_FORMAT} only" in line, command
    line = _one_line_exit_2(_cli("ingest", str(source), "-u", "ann", "-c", "chat", *at))
    assert "before store formats had a version" in line
    assert folder.is_dir()  # a refused store is left as it was, not taken for an empty one and removed


# ---- a `chroma run` server of this module's own ------------------------------------------------------------------


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = start_chroma(tmp_path_factory.mktemp("format-server") / "data")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server_url(own_server: ChromaServer) -> str:
    """The server's URL, its default database emptied first: each test starts from a server that holds nothing."""
    client = own_server.client()
    for collection in client.list_collections():
        client.delete_collection(collection if isinstance(collection, str) else collection.name)
    return own_server.url


@pytest.mark.integration
def test_a_new_server_store_records_the_format_and_opens_again(server_url: str) -> None:
    store = MemoryStore(url=server_url, embeddings=HASH)
    assert recorded(store.client) == STORE_FORMAT
    _ingest(url=server_url)
    again = MemoryStore(url=server_url, embeddings=HashEmbeddings())
    assert recorded(again.client) == STORE_FORMAT and again.count("turn", user_id="ann") == 3


@pytest.mark.integration
@pytest.mark.parametrize("version", [0, STORE_FORMAT + 1, None], ids=["older", "newer", "none"])
def test_a_server_store_of_another_format_is_refused(server_url: str, version: Any) -> None:
    _ingest(url=server_url)
    _stamp(MemoryStore(url=server_url, embeddings=HASH), version)
    message = _refused(version, url=server_url)
    assert message.startswith(f"the store at {server_url} ")


@pytest.mark.integration
def test_the_cli_prints_a_refused_server_store_as_one_line_and_exits_2(server_url: str) -> None:
    _ingest(url=server_url)
    _stamp(MemoryStore(url=server_url, embeddings=HASH), STORE_FORMAT + 1)
    for command in (["users"], ["list", "-u", "ann"]):
        line = _one_line_exit_2(_cli(*command, "--chroma-url", server_url))
        assert f"the store at {server_url} is in store format {STORE_FORMAT + 1}" in line, command
        assert "unreachable" not in line and "newer memstrata" in line, command
