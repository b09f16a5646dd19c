"""Per-route request bodies: a size limit and the media types the route reads.

Each route has a limit sized to what it needs (service.config), so a body can never make the
server hold much more than that route's limit. This pure ASGI middleware refuses a declared
Content-Length over the limit before reading a byte, counts the bytes actually received
(chunked bodies, lying clients) and stops at the limit, and answers a body in a media type the
route does not read with 415 (a JSON route reached with ``text/plain``, which a browser sends
cross-site without a preflight, is refused). Errors keep the service's one JSON body (FastAPI's
own ``max_body_size`` would answer plain text from outside the exception handlers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convsel.config import PREFIX

from .config import Settings
from .errors import error_body

JSON = ("application/json",)
MULTIPART = ("multipart/form-data",)
_BODY_METHODS = ("POST", "PUT", "PATCH")


@dataclass(frozen=True)
class BodyRule:
    """A route's body: the Settings field holding its byte limit, the media types it reads,
    and bytes allowed on top of the limit (a multipart form's other fields)."""

    setting: str
    media: tuple[str, ...] = JSON
    overhead: int = 0

    def limit(self, settings: Settings) -> int:
        return int(getattr(settings, self.setting)) + self.overhead

    @property
    def variable(self) -> str:
        return PREFIX + self.setting.upper()   # pydantic-settings' rule (service.config)


DEFAULT_RULE = BodyRule("max_body_bytes")


@dataclass(frozen=True)
class _Bound:
    limit: int
    variable: str
    media: tuple[str, ...]


class BodyLimitMiddleware:
    """``routes`` maps a path to its rule; a path not listed gets ``default``'s limit and no
    media check (unknown paths answer 404 from the router)."""

    def __init__(self, app: ASGIApp, settings: Settings, routes: Mapping[str, BodyRule],
                 default: BodyRule = DEFAULT_RULE) -> None:
        self.app = app
        self.routes = {path: _Bound(r.limit(settings), r.variable, r.media)
                       for path, r in routes.items()}
        self.default = _Bound(default.limit(settings), default.variable, ())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bound = self.routes.get(scope["path"], self.default)
        headers = Headers(scope=scope)
        if bound.media and scope["method"] in _BODY_METHODS:
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media not in bound.media:
                await _unsupported(media, bound.media)(scope, receive, send)
                return
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > bound.limit:
            await _too_large(bound, int(declared))(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > bound.limit:
                    # FastAPI re-raises HTTPException from body reading: the 413 handler answers.
                    raise HTTPException(413, _message(bound, received, "received so far"))
            return message

        await self.app(scope, counting_receive, send)


def _too_large(bound: _Bound, size: int) -> JSONResponse:
    body = error_body("too_large", _message(bound, size, "declared by Content-Length"),
                      field="body", value=size,
                      rule=f"request body must be at most {bound.limit} bytes")
    return JSONResponse(body, status_code=413, headers={"Connection": "close"})


def _message(bound: _Bound, size: int, how: str) -> str:
    return (f"request body of {size} bytes ({how}) exceeds this route's limit of "
            f"{bound.limit} bytes ({bound.variable})")


def _unsupported(media: str, accepted: tuple[str, ...]) -> JSONResponse:
    body = error_body("unsupported_media_type",
                      f"content-type {media or '(none)'!r} is not read by this route",
                      field="content-type", value=media or None,
                      rule=f"accepted: {', '.join(accepted)}")
    return JSONResponse(body, status_code=415)
