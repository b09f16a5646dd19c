"""The operator's token: routes that write or spend a lot (and /metrics) take
``dependencies=[TOKEN]``; when ``CONVSEL_API_TOKEN`` is set they answer 401 without
``Authorization: Bearer <token>``. Unset (the default, on loopback) they are open.

OpenAPI states the bearer scheme on those routes only when a token is set (service.openapi),
so the schema tells a client exactly what this server asks.
"""

from __future__ import annotations

import hmac

from fastapi import Depends, Request

from .errors import UnauthorizedError
from .state import state_of


async def require_token(request: Request) -> None:
    """Raise :class:`UnauthorizedError` unless the request carries the configured token."""
    token = state_of(request).settings.api_token
    if token is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise UnauthorizedError("no bearer token")
    # Constant-time comparison: the answer's timing must not reveal a prefix of the token.
    if not hmac.compare_digest(given.strip().encode(), token.get_secret_value().encode()):
        raise UnauthorizedError("wrong bearer token")


TOKEN = Depends(require_token)
