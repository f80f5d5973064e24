"""The auth handler of the locked deployment (``examples/deploy/langgraph.json``): who is calling, and what they see.

The LangGraph server runs :func:`authenticate` on every request. The identity it returns is what the deployed graphs
(:mod:`memstrata.integrations.deploy`) take as the run's ``user_id``: a caller reaches its own memory and no other,
whatever its request's context says. :func:`own_threads` keeps the server's threads private too (a thread's state
holds what a run retrieved), as LangGraph's own resource-authorization guide does.

This demo checks a bearer token against a table of tokens read from ``$MEMSTRATA_DEMO_TOKENS``
(``token=user,token=user``); a real deployment verifies a signed token (a JWT from its identity provider) instead,
and returns the same ``{"identity": ...}``.

    export MEMSTRATA_DEMO_TOKENS="tok-ann=ann,tok-bob=bob" MEMSTRATA_DATA_DIR=/srv/memstrata
    langgraph dev --config examples/deploy/langgraph.json --no-browser   # from the repository root
"""

from __future__ import annotations

import hmac
import os

from langgraph_sdk import Auth

TOKENS_ENV = "MEMSTRATA_DEMO_TOKENS"

auth = Auth()


def demo_tokens() -> dict[str, str]:
    """``$MEMSTRATA_DEMO_TOKENS`` as token -> user (read at each request: nothing is kept at import)."""
    pairs = (item.partition("=") for item in os.environ.get(TOKENS_ENV, "").split(",") if item.strip())
    return {token.strip(): user.strip() for token, _, user in pairs if token.strip() and user.strip()}


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    """The caller of a request with ``Authorization: Bearer <token>``; any other request is refused with 401."""
    scheme, _, token = (authorization or "").partition(" ")
    user = next(
        (u for t, u in demo_tokens().items() if scheme.lower() == "bearer" and hmac.compare_digest(t, token)), None
    )
    if user is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="a valid bearer token is required")
    return {"identity": user}


@auth.on.threads
async def own_threads(ctx: Auth.types.AuthContext, value: dict) -> Auth.types.FilterType:
    """Threads and their runs are private: each is created with its caller as owner, and only its owner finds it."""
    metadata = value.setdefault("metadata", {})
    metadata["owner"] = ctx.user.identity
    return {"owner": ctx.user.identity}
