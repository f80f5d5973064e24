"""The Chroma client a vector store opens: embedded in a folder, or a server's, guarded.

:func:`_make_client` opens a ``PersistentClient`` for a data folder, or an ``HttpClient`` for a server wrapped in
:class:`ServerGuard`, which turns lost connections into :class:`~memstrata.errors.StoreError` and
repeats the reads that race with another client's writes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from memstrata.errors import PartialReadError, StoreError


def _make_client(*, path: str | Path | None, url: str | None) -> Any:
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False, allow_reset=False)
    if url:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        if not parsed.hostname:
            msg = f"bad Chroma server URL {url!r}: expected http://host:port"
            raise StoreError(msg)
        try:
            client = chromadb.HttpClient(
                host=parsed.hostname, port=parsed.port or 8000, ssl=parsed.scheme == "https", settings=settings
            )
        except Exception as exc:
            msg = f"cannot reach the Chroma server at {url}: {exc}"
            raise StoreError(msg) from exc
        return ServerGuard(client, url)
    if path is None:
        msg = "MemoryStore needs a path (embedded Chroma) or a url (Chroma server)"
        raise StoreError(msg)
    Path(path).mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=settings)


def _transport_errors() -> tuple[type[BaseException], ...]:
    import httpx

    return (httpx.TransportError, ConnectionError)


# Three read races of a Chroma server (1.5.x) with another client's writes; in each the next try succeeds,
# so these calls are repeated a bounded number of times before the error is raised:
# - "Error creating hnsw segment reader: Nothing found on disk" (chroma-core/chroma#4212): a read of a
#   collection another client is writing for the first time; its vector segment is not flushed yet.
# - "Error finding id": a read that found a row in the metadata and not in the vectors, because another
#   client deleted it in between (in CI, two processes appending to one conversation: one failed a read while
#   consolidating the tree, as the other wrote). Measured on a loopback server, one client upserting and deleting
#   20 rows at a time, another reading them with their vectors: 32 of 1,230 reads failed, each repeat succeeded.
# - "Error getting embedding": the same race, met when the row is gone from the vectors' store rather than their
#   index (seen once in CI, in the test above's loop of 1,200 reads).
_TRANSIENT = ("Error creating hnsw segment reader", "Error finding id", "Error getting embedding")
_TRANSIENT_ATTEMPTS = 6


def _vectors_missing(out: Any, include: Sequence[str] | None) -> bool:
    """Whether a ``get`` or ``query`` that asked for vectors returned fewer of them than ids."""
    if not isinstance(out, dict) or "embeddings" not in (include or ()) or not out.get("ids"):
        return False
    ids, vectors = out["ids"], out.get("embeddings")
    if vectors is None or (isinstance(vectors, np.ndarray) and vectors.ndim == 0):  # none (chromadb may wrap it)
        return True
    if isinstance(ids[0], list):  # a query: one list per query vector
        return len(vectors) != len(ids) or any(len(v) != len(i) for v, i in zip(vectors, ids, strict=False))
    return len(vectors) != len(ids)


def _is_transient(exc: BaseException) -> bool:
    from chromadb.errors import ChromaError

    return isinstance(exc, PartialReadError) or (
        isinstance(exc, ChromaError) and any(text in str(exc) for text in _TRANSIENT)
    )


class ServerGuard:
    """A Chroma server client, or one of its collections, whose lost connections are :class:`StoreError`.

    chromadb lets ``httpx`` errors through when the server stops or restarts; a caller
    (the CLI above all) should hear which server went away and what to do, not get a
    traceback from deep inside an HTTP library. A call the server fails with a known
    transient error (see ``_TRANSIENT``) is repeated, at most ``_TRANSIENT_ATTEMPTS`` times, and so is a read that
    asked for vectors and got fewer than its ids (:class:`PartialReadError`, raised if it lasts).
    Attributes pass through unchanged; collections a call returns come back guarded too.

    Args:
        target: a ``chromadb.HttpClient`` or a collection of one.
        url: the server's address, for the message.

    Example:
        >>> client = ServerGuard(chromadb.HttpClient(port=1), "http://127.0.0.1:1")  # doctest: +SKIP
        >>> client.list_collections()  # doctest: +SKIP
        Traceback (most recent call last):
        StoreError: the Chroma server at http://127.0.0.1:1 stopped answering (ConnectError: ...); ...
    """

    def __init__(self, target: Any, url: str) -> None:
        self._target, self._url = target, url

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        return self._guarded(value) if callable(value) else value

    def _guarded(self, method: Callable[..., Any]) -> Callable[..., Any]:
        from chromadb.api.models.Collection import Collection

        def checked(*args: Any, **kwargs: Any) -> Any:
            out = method(*args, **kwargs)
            if _vectors_missing(out, kwargs.get("include")):
                msg = (
                    f"the Chroma server at {self._url} returned rows without all their vectors "
                    f"({_TRANSIENT_ATTEMPTS} tries); re-run the same command"
                )
                raise PartialReadError(msg)
            return out

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            retrying = Retrying(
                retry=retry_if_exception(_is_transient),
                stop=stop_after_attempt(_TRANSIENT_ATTEMPTS),
                wait=wait_exponential(multiplier=0.05, max=2.0),
                reraise=True,
            )
            try:
                out = retrying(checked, *args, **kwargs)
            except _transport_errors() as exc:
                msg = (
                    f"the Chroma server at {self._url} stopped answering ({type(exc).__name__}: {exc}); "
                    "start it again and re-run the same command: what was stored is kept, the rest is redone"
                )
                raise StoreError(msg) from exc
            return ServerGuard(out, self._url) if isinstance(out, Collection) else out

        return call
