"""Every error memstrata raises on purpose, in one place (each is also importable from ``memstrata``).

``ValueError`` subclasses are a caller's mistake the message explains (bad input, no user, a setting a deployed run
may not choose); ``RuntimeError`` subclasses are a store or a model that failed. This module imports nothing, so
catching an error never loads the client.

Example:
    >>> from memstrata import IngestError, StoreError
    >>> issubclass(IngestError, ValueError), issubclass(StoreError, RuntimeError)
    (True, True)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AnswerError",
    "DeploymentError",
    "EmbedderMismatchError",
    "EmptyReplyError",
    "IngestError",
    "LLMError",
    "ModelConfigError",
    "PartialReadError",
    "StoreError",
    "StoreFormatError",
    "UserIdError",
]


# ---- input and callers ----------------------------------------------------------------------------------------------
class IngestError(ValueError):
    """Bad input; the message names the problem and where it is."""


class UserIdError(ValueError):
    """No user for a call (not in the run's context, its config, nor the integration's default), or a bad one."""


class DeploymentError(ValueError):
    """A deployed run asked for what its caller may not choose: another user, or the store's or model's location.

    A ``ValueError``, as :class:`UserIdError` is: the LangGraph server shows the message of a ``ValueError`` to the
    caller, and hides that of most other exceptions.
    """


# ---- the store ------------------------------------------------------------------------------------------------------
class StoreError(RuntimeError):
    """A store-level problem: a bad argument, a missing tenant, an unreachable server."""


class StoreFormatError(StoreError):
    """The store was written in another format than the one this memstrata reads (or before formats had a version)."""


class EmbedderMismatchError(StoreError):
    """A collection was built with another embedder than the one the store was opened with."""


class PartialReadError(StoreError):
    """A Chroma server returned rows without their vectors: seen once in a test right after a collection's first
    write, with no error from the server. Repeated like a transient error; raised only if it lasts.
    """


# ---- the model ------------------------------------------------------------------------------------------------------
class LLMError(RuntimeError):
    """An LLM call failed in a way the caller must hear about (the answer stream)."""


class AnswerError(LLMError):
    """``ask`` got no answer because the model failed; ``result`` still holds the evidence, context and trace."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class EmptyReplyError(LLMError):
    """The server answered, but with no choice to read (an empty ``choices`` list, or a stream with no text)."""


class ModelConfigError(ValueError):
    """A model given by name cannot be called as configured: OpenAI's API with no ``OPENAI_API_KEY``."""
