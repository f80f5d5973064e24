"""memstrata's graphs as a LangGraph server runs them for callers it does not trust: each run is bound to the
authenticated caller, and the store is the deployment's.

The graphs of :mod:`memstrata.graphs` trust their run's context: whoever names ``user_id``, ``data_dir`` or
``chroma_url`` reads and writes there. That suits a process that builds the context itself (an app, the CLI, Studio on
a laptop); a server open to callers needs more. :func:`deployed` makes a copy of a compiled graph that, before any
node runs, rewrites the run's context:

1. **the user is the authenticated caller's**: the LangGraph server runs the ``@auth.authenticate`` handler of the
   deployment's ``langgraph.json`` (``"auth": {"path": ...}``) on each request and puts the identity it returned in
   the run's ``config["configurable"]["langgraph_auth_user_id"]``, over any value a caller sent for that key. The
   run's context gets that ``user_id``. A context that names another user is refused, one that names none is filled in,
   and a run with no authenticated caller (a server without an auth handler) is refused.
2. **the store is the deployment's**: a run whose context sets ``data_dir``, ``chroma_url`` or ``base_url`` is
   refused. The deployment fixes them in its environment, ``$MEMSTRATA_DATA_DIR`` or ``$MEMSTRATA_CHROMA_URL`` (and
   ``$MEMSTRATA_BASE_URL`` for the model server), which :class:`~memstrata.context.Context` reads when a run sets
   none. ``base_url`` is locked too because a model name is called there with the server's ``$OPENAI_API_KEY``.

Refusals raise :class:`DeploymentError` before anything is read or written; over the API the run ends with it.

``ingestion`` and ``retrieval`` are the deployed copies of memstrata's two graphs, for a ``langgraph.json``
(``examples/deploy/langgraph.json``, with the auth handler ``examples/deploy/auth.py``). :func:`deployed` works on
any compiled graph, such as a ``create_agent`` agent with
:class:`~memstrata.integrations.middleware.MemstrataMiddleware`, whose ``user_id`` then comes from the caller too.

Example:
    >>> bind_run({"conversation_id": "c1"}, {"configurable": {"langgraph_auth_user_id": "ann"}})
    {'conversation_id': 'c1', 'user_id': 'ann'}
    >>> bind_run({"user_id": "bob"}, {"configurable": {"langgraph_auth_user_id": "ann"}})
    Traceback (most recent call last):
    memstrata.errors.DeploymentError: this deployment serves the authenticated caller's memory only: ...
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig, ensure_config
from langgraph.graph.state import CompiledStateGraph

from memstrata.context import BASE_URL_ENV, CHROMA_URL_ENV, DATA_DIR_ENV
from memstrata.errors import DeploymentError
from memstrata.graphs import ingestion as _ingestion
from memstrata.graphs import retrieval as _retrieval

AUTH_USER_KEY = "langgraph_auth_user_id"
"""The ``configurable`` key where the LangGraph server puts the authenticated caller's identity (set by the server
itself, over any value a caller sent)."""

LOCKED_SETTINGS: dict[str, str] = {"data_dir": DATA_DIR_ENV, "chroma_url": CHROMA_URL_ENV, "base_url": BASE_URL_ENV}
"""The context settings a deployed run may not set, and the environment variable the deployment sets instead."""


class DeployedGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled graph whose every run is bound by :func:`bind_run` first; see :func:`deployed`.

    ``stream`` and ``astream`` are the two doors of a run (``invoke``, ``ainvoke``, ``astream_events`` and the
    LangGraph server all go through them), so binding there covers every way in.
    """

    def stream(  # type: ignore[override]
        self,
        input: Any,  # noqa: A002 (Pregel's own name for it, which callers may pass by keyword)
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """:meth:`Pregel.stream` with the run's context bound to its caller and the deployment."""
        return super().stream(input, config, context=bind_run(context, config), **kwargs)

    def astream(  # type: ignore[override]
        self,
        input: Any,  # noqa: A002 (Pregel's own name for it, which callers may pass by keyword)
        config: RunnableConfig | None = None,
        *,
        context: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        """:meth:`Pregel.astream` with the run's context bound to its caller and the deployment."""
        return super().astream(input, config, context=bind_run(context, config), **kwargs)


def deployed(graph: CompiledStateGraph[Any, Any, Any, Any], *, name: str | None = None) -> DeployedGraph:
    """A copy of ``graph`` for a LangGraph server: each run's user is the authenticated caller's, and its store
    the deployment's (see the module docstring). The graph itself is left as it is.

    Args:
        graph: a compiled graph (memstrata's, or an agent using memstrata's middleware).
        name: the copy's name (default: the graph's).

    Example:
        >>> from memstrata.graphs.ingestion import graph
        >>> deployed(graph).get_graph().draw_mermaid() == graph.get_graph().draw_mermaid()
        True
    """
    attrs = {k: v for k, v in graph.__dict__.items() if k != "__orig_class__"}
    copy = DeployedGraph(**attrs)
    return copy.copy(update={"name": name}) if name else copy


def bind_run(context: Any, config: RunnableConfig | None) -> Any:
    """The run's context with ``user_id`` the authenticated caller's; refused when it asks for more.

    Args:
        context: the context the caller sent (a dict, a dataclass such as :class:`~memstrata.context.Context`, or
            ``None``).
        config: the run's config, where the server put the caller's identity (default: the current run's).

    Returns:
        The context, of the same kind, with ``user_id`` set (``None`` becomes a dict).

    Raises:
        DeploymentError: no authenticated caller; the context names another user; it sets a locked setting.
    """
    user = authenticated_user(config)
    named = _field(context, "user_id")
    if named not in (None, "") and named != user:
        msg = (
            f"this deployment serves the authenticated caller's memory only: the run's context names user_id "
            f"{named!r}, the caller is {user!r}. Leave user_id out of the context (it is taken from the caller)"
        )
        raise DeploymentError(msg)
    locked = [name for name in LOCKED_SETTINGS if _field(context, name) not in (None, "")]
    if locked:
        fix = ", ".join(f"{name} by ${LOCKED_SETTINGS[name]}" for name in locked)
        msg = (
            f"this deployment fixes where memory is stored and which model server is called: the run's context may "
            f"not set {', '.join(locked)}. Leave them out; the deployment sets {fix} in its environment"
        )
        raise DeploymentError(msg)
    return _with_user(context, user)


def authenticated_user(config: RunnableConfig | None) -> str:
    """The identity the LangGraph server's auth handler returned for this run's caller.

    Raises:
        DeploymentError: the run has none (no auth handler, or not run by the server).
    """
    configurable = ensure_config(config).get("configurable") or {}
    user = configurable.get(AUTH_USER_KEY)
    if not isinstance(user, str) or not user.strip():
        msg = (
            "this graph serves authenticated callers only, and the run has none: deploy it with an auth handler "
            '(langgraph.json "auth": {"path": "./auth.py:auth"}, whose @auth.authenticate returns the caller\'s '
            f"identity), which the server passes to the run as config['configurable'][{AUTH_USER_KEY!r}]"
        )
        raise DeploymentError(msg)
    return user


def _field(context: Any, name: str) -> Any:
    return context.get(name) if isinstance(context, Mapping) else getattr(context, name, None)


def _with_user(context: Any, user: str) -> Any:
    if context is None:
        return {"user_id": user}
    if isinstance(context, Mapping):
        return {**context, "user_id": user}
    if dataclasses.is_dataclass(context) and not isinstance(context, type):
        return dataclasses.replace(context, user_id=user)
    msg = f"a deployed run's context must be a dict or a dataclass with a user_id field, got {type(context).__name__}"
    raise DeploymentError(msg)


ingestion = deployed(_ingestion.graph, name="memstrata-ingestion")
retrieval = deployed(_retrieval.graph, name="memstrata-retrieval")

__all__ = [
    "AUTH_USER_KEY",
    "LOCKED_SETTINGS",
    "DeployedGraph",
    "DeploymentError",
    "authenticated_user",
    "bind_run",
    "deployed",
    "ingestion",
    "retrieval",
]
