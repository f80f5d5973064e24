"""The store's format version: written when a store is created, checked every time one is opened.

How a store lays its records out (each record's tenant ``scope`` stamp, a server unit's user-tagged word terms, the
word index's tags, the side tables' rows) is one format, :data:`STORE_FORMAT`. It is recorded in the metadata of one
Chroma collection, ``memstrata__format``, in both modes: every store has a Chroma client, embedded or a server.
Opening a store (:class:`~memstrata.memory.store.VectorStore`) finds one of three things:

- the marker, with this version: the store opens;
- no marker and no memory (a new folder, an empty server): the marker is written, then the store opens;
- another version, or memory with no marker (written before stores had a version): :class:`StoreFormatError`, which
  names both versions and what to do. Nothing is read or written.

No other format is read: memstrata 0.1.0 was never released, so no store of an earlier layout is kept readable.
Memory is any record in a collection memstrata names (``memstrata_<kind>``, ``memstrata__<table>``) or, embedded, a
row of the side tables' SQLite file.

Example:
    >>> import tempfile, chromadb
    >>> folder = Path(tempfile.mkdtemp())
    >>> client = chromadb.PersistentClient(path=str(folder))
    >>> check_format(client, location=str(folder), folder=folder)  # a new store: its format is recorded
    >>> recorded(client) == STORE_FORMAT
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memstrata.errors import StoreFormatError
from memstrata.memory.store.sqlite_table import sqlite_connection
from memstrata.memory.store.tables import COLLECTION_PREFIX, SQLITE_FILE, TABLE_PREFIX

STORE_FORMAT = 1  # bump when the layout changes: a store of another version is refused, never read
FORMAT_COLLECTION = TABLE_PREFIX + "format"
FORMAT_KEY = "memstrata_format"


def check_format(client: Any, *, location: str, folder: Path | None) -> None:
    """Open a store's format: check the recorded version, or record this one on a store that holds no memory yet.

    Args:
        client: the store's Chroma client.
        location: the folder or server URL, for the message.
        folder: the data folder of an embedded store, whose side tables' file holds memory too (``None``: a server).

    Raises:
        StoreFormatError: the store is in another format, or holds memory and no format.
    """
    found = recorded(client)
    if found is None:
        if not _holds_memory(client, folder):
            marker = {FORMAT_KEY: STORE_FORMAT}
            client.get_or_create_collection(FORMAT_COLLECTION, metadata=marker, embedding_function=None)
        # read again: another process that opened this store meanwhile recorded its format before writing anything
        found = recorded(client)
    if found != STORE_FORMAT:
        raise StoreFormatError(format_message(location, found))


def recorded(client: Any) -> object:
    """The format version recorded in the store (``None``: no marker)."""
    if FORMAT_COLLECTION not in _names(client):
        return None
    return (client.get_collection(FORMAT_COLLECTION, embedding_function=None).metadata or {}).get(FORMAT_KEY)


def format_message(location: str, found: object) -> str:
    """What :class:`StoreFormatError` says: the store's version, this memstrata's, and what to do."""
    if found is None:
        what = "holds memory written before store formats had a version (it has none)"
    else:
        what = f"is in store format {found}"
    fix = (
        "export each user with the memstrata that wrote it (`memstrata export`) and import the files into a new "
        "store with this one (`memstrata import`), or ingest the conversations again into a new store"
    )
    if isinstance(found, int) and found > STORE_FORMAT:
        fix = f"open it with the newer memstrata that wrote it, or {fix}"
    return f"the store at {location} {what}, and this memstrata reads store format {STORE_FORMAT} only: {fix}"


def _names(client: Any) -> list[str]:
    return [c if isinstance(c, str) else c.name for c in client.list_collections()]


def _holds_memory(client: Any, folder: Path | None) -> bool:
    """Whether any collection memstrata names holds a record, or an embedded store's side tables a row."""
    for name in _names(client):
        if name.startswith(COLLECTION_PREFIX) and client.get_collection(name, embedding_function=None).count():
            return True
    path = folder / SQLITE_FILE if folder is not None else None
    if path is None or not path.is_file():
        return False
    with sqlite_connection(path) as db:
        names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return any(db.execute(f'SELECT 1 FROM "{n}" LIMIT 1').fetchone() for n in names)
