"""Which failures of a model call are transport trouble worth a retry, and how long to wait.

:func:`is_transient` says which failures :func:`~memstrata.runtime.llm.decide` and the streams retry, and
:func:`retry_after` how long a rate-limited server asked to wait. The errors a model call raises to its caller
(:class:`~memstrata.errors.LLMError` and the rest) are in :mod:`memstrata.errors`.

Example:
    >>> is_transient(TimeoutError()), is_transient(ValueError())
    (True, False)
"""

from __future__ import annotations

import importlib
from functools import lru_cache

_TRANSPORT_NAMES = {
    # Provider-neutral errors that LangChain integrations raise (langchain-core >= 1.x).
    "langchain_core.exceptions": ("ModelConnectionError", "ModelTimeoutError", "ModelAPIError", "ModelRateLimitError"),
    "openai": ("APIConnectionError", "APITimeoutError", "InternalServerError", "RateLimitError"),
    "httpx": ("TransportError",),
    "httpx2": ("TransportError",),  # what recent openai SDKs are built on
}


@lru_cache(maxsize=1)
def _transport_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [TimeoutError, ConnectionError]
    for module_name, names in _TRANSPORT_NAMES.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        found += [getattr(module, n) for n in names if isinstance(getattr(module, n, None), type)]
    return tuple(found)


def is_transient(exc: BaseException) -> bool:
    """Transport trouble worth a retry: timeouts, dropped connections, 5xx, 429.

    Bad requests (4xx), authentication errors and malformed output are not
    transient: retrying them only burns time.
    """
    if isinstance(exc, _transport_errors()):
        return True
    if isinstance(exc, RuntimeError) and "Event loop is closed" in str(exc):
        # A pooled HTTP connection from an event loop that has since closed (each
        # asyncio.run() makes a new loop): the client drops it, and a retry connects afresh.
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status == 429)


def retry_after(exc: BaseException) -> float | None:
    """The seconds a rate-limited server asked to wait (``Retry-After``), when it said so in seconds.

    Example:
        >>> retry_after(ValueError()) is None
        True
    """
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or {}
    try:
        value = headers.get("retry-after")
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):  # the HTTP-date form: the usual backoff instead
        return None


def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        return f"TimeoutError: no reply within {timeout:g}s"
    return f"{type(exc).__name__}: {exc}"[:300]
