"""Whose memory an integration reads or writes: the run's user, else the default it was built with.

An agent built once serves every user, so the middleware, the retriever and the tools ask :func:`run_tenant` at each
call. It looks in this order:

1. the run's ``runtime.context``: an attribute or key ``user_id``, as in LangGraph's memory-agent template, e.g.
   ``agent.invoke(..., context={"user_id": "ann"})``;
2. the run's ``config["configurable"]["user_id"]``, where LangMem's namespace templates read it;
3. the value the integration was built with, a default.

The conversation is looked up the same way (the context's ``conversation_id``, then the ``configurable`` key the
integration names, then its default) only by an integration that writes the run's own conversation: the middleware,
whose key is ``thread_id``.

A call that finds no user anywhere raises :class:`UserIdError`: it never reads another user's memory and never makes
up a tenant.

Example:
    >>> run_tenant("demo", context={"user_id": "ann"}, config={"configurable": {"user_id": "bob"}}).user_id
    'ann'
    >>> run_tenant("demo", config={"configurable": {"user_id": "bob", "thread_id": "t1"}}, conversation_key="thread_id")
    Tenant(user_id='bob', conversation_id='t1')
    >>> run_tenant("demo", user_id="default-user", config={}).user_id
    'default-user'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from langgraph.config import get_config
from langgraph.runtime import get_runtime

from memstrata.errors import UserIdError


class Tenant(NamedTuple):
    """The user whose memory a call reads or writes, and the conversation (``None``: the integration's choice)."""

    user_id: str
    conversation_id: str | None


def run_tenant(
    owner: str,
    *,
    user_id: str | None = None,
    conversation_id: str | None = None,
    context: Any = None,
    config: Mapping[str, Any] | None = None,
    conversation_key: str | None = None,
) -> Tenant:
    """The run's user and conversation, else the defaults given; see the module docstring for the order.

    Args:
        owner: the integration asking, named in the error.
        user_id: the default user, for runs that name none.
        conversation_id: the default conversation.
        context: the run's ``runtime.context`` (default: the current LangGraph run's, if any).
        config: the run's config (default: the current run's, if any).
        conversation_key: the ``configurable`` key that names the run's conversation (the middleware's
            ``thread_id``); without it the conversation is ``conversation_id``, whatever the run says.

    Raises:
        UserIdError: no user anywhere, or a value that is not a non-blank string.
    """
    if context is None or config is None:
        run_context, run_config = current_run()
        context = run_context if context is None else context
        config = run_config if config is None else config
    configurable = config.get("configurable") or {}
    user = _first(
        owner,
        ("the run's context user_id", _field(context, "user_id")),
        ("config['configurable']['user_id']", configurable.get("user_id")),
        ("user_id", user_id),
    )
    if user is None:
        msg = (
            f"{owner}: no user_id for this call. Name the user per run, in its context "
            "(agent.invoke(..., context={'user_id': 'ann'})) or its config "
            "(config={'configurable': {'user_id': 'ann'}}), or give a default user_id when building it"
        )
        raise UserIdError(msg)
    if conversation_key is None:
        return Tenant(user, conversation_id)
    conversation = _first(
        owner,
        ("the run's context conversation_id", _field(context, "conversation_id")),
        (f"config['configurable'][{conversation_key!r}]", configurable.get(conversation_key)),
        ("conversation_id", conversation_id),
    )
    return Tenant(user, conversation)


def default_user(owner: str, user_id: str | None) -> str | None:
    """A user id given when an integration is built: ``None`` (take it from each run) or a non-blank string."""
    if user_id is not None and (not isinstance(user_id, str) or not user_id.strip()):
        msg = (
            f"{owner}: user_id must be a non-blank string (it is the tenant boundary), got {user_id!r}; "
            "leave it out to take the user from each run"
        )
        raise UserIdError(msg)
    return user_id


def current_run() -> tuple[Any, Mapping[str, Any]]:
    """The ``runtime.context`` and config of the LangGraph run this call belongs to (``None`` and ``{}`` outside)."""
    try:
        config = get_config()
    except RuntimeError:  # not inside any runnable
        return None, {}
    runtime = get_runtime() if config.get("configurable") else None
    return getattr(runtime, "context", None), config


def _field(context: Any, name: str) -> Any:
    return context.get(name) if isinstance(context, Mapping) else getattr(context, name, None)


def _first(owner: str, *candidates: tuple[str, Any]) -> str | None:
    """The first value given (``None`` and ``""`` are not); a given value must be a non-blank string."""
    for source, value in candidates:
        if value is None or value == "":
            continue
        if not isinstance(value, str) or not value.strip():
            msg = f"{owner}: {source} must be a non-blank string, got {value!r}"
            raise UserIdError(msg)
        return value
    return None


__all__ = ["Tenant", "UserIdError", "current_run", "default_user", "run_tenant"]
