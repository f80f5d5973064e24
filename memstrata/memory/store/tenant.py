"""The one tenant scope every part of the store goes through.

Vectors (Chroma), edges and counters all build their filters and storage keys
here, and nowhere else: a read always carries ``user_id``, a write always
stamps it, and a storage key is derived from it, so two users never share a
record even when their unit ids are equal.

Every Chroma record carries the ``scope`` stamp (a 128-bit hash of the user and the conversation,
:func:`scope_key`), so a read naming a conversation is filtered by that one clause: Chroma evaluates every
clause of a filter over every record it matches, and the user's clause matches all of the user's records
(measured on one user's 6,301 turns: 44.5 ms for user + conversation + session, 8 ms without the user).
The store still checks the user and conversation of every record it returns. A read of vectors alone
(``VectorStore.vectors_by_key``) returns no record: it asks for keys derived from the user, which no other tenant's
record has, and keeps only the keys it asked for.

Example:
    >>> where(user_id="alice")
    {'user_id': 'alice'}
    >>> where(user_id="alice", conversation_id="c1") == {"scope": scope_key("alice", "c1")}
    True
    >>> storage_key("alice", "c1", "s1:t0") != storage_key("bob", "c1", "s1:t0")
    True
    >>> term_key("alice", "lisbon").endswith(":lisbon") and term_key("alice", "lisbon") != term_key("bob", "lisbon")
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from memstrata.errors import StoreError

SCOPE_FIELD = "scope"


def stable_hash(*parts: str, length: int = 16) -> str:
    """A short, stable hash of the parts (used for storage keys and derived ids)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return digest[:length]


def check_user(user_id: Any) -> str:
    """The user id, or a :class:`StoreError` when it is missing, not a string or not valid Unicode."""
    if not isinstance(user_id, str) or not user_id.strip():
        msg = "user_id is required on every read and write (it is the tenant boundary)"
        raise StoreError(msg)
    try:
        user_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        msg = f"user_id is not valid Unicode at character {exc.start} ({exc.reason})"
        raise StoreError(msg) from exc
    return user_id


def scope_key(user_id: str, conversation_id: str) -> str:
    """The ``scope`` stamp of a record: one value per (user, conversation), never shared by two tenants."""
    return stable_hash("scope", check_user(user_id), conversation_id, length=32)


def stamp(user_id: str, conversation_id: str) -> dict[str, str]:
    """The tenant fields every written record carries."""
    return {
        "user_id": check_user(user_id),
        "conversation_id": conversation_id,
        SCOPE_FIELD: scope_key(user_id, conversation_id),
    }


def where(
    user_id: str,
    conversation_id: str | None = None,
    extra: dict[str, Any] | None = None,
    *,
    conversations: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The Chroma ``where`` clause of a read: the user, or a conversation (or any of ``conversations``) by its
    scope key, which names the user too; and more.
    """
    check_conversations(conversation_id, conversations)
    if conversation_id is not None:
        clauses: list[dict[str, Any]] = [{SCOPE_FIELD: scope_key(user_id, conversation_id)}]
    elif conversations is not None:
        clauses = [{SCOPE_FIELD: {"$in": [scope_key(user_id, c) for c in conversations]}}]
    else:
        clauses = [{"user_id": check_user(user_id)}]
    if extra:
        clauses.extend(extra["$and"] if "$and" in extra else ({k: v} for k, v in extra.items()))
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def check_conversations(conversation_id: str | None, conversations: Sequence[str] | None) -> None:
    """A read names one ``conversation_id`` or several ``conversations``, not both (``ValueError``)."""
    if conversations is not None and conversation_id is not None:
        msg = "name one conversation_id or several conversations, not both"
        raise ValueError(msg)


def term_key(user_id: str, term: str) -> str:
    """A word term as a server store's units carry it: prefixed by a 64-bit hash of the user, so a read of one
    term's postings names its tenant without a user clause (:mod:`memstrata.memory.store.terms` says why).
    """
    return f"{stable_hash('terms', check_user(user_id))}:{term}"


def storage_key(user_id: str, conversation_id: str, unit_id: str, *, namespace: str = "") -> str:
    """A record's storage id, derived from the tenant (``namespace`` separates edges and counters)."""
    parts = (
        (check_user(user_id), conversation_id, unit_id)
        if not namespace
        else (namespace, check_user(user_id), conversation_id, unit_id)
    )
    return stable_hash(*parts, length=32)
