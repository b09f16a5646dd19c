"""Per-route request bodies: a size limit, a pace, and the media types the route reads.

Each route has a limit sized to what it needs (service.config), so a body can never make the
server hold much more than that route's limit. This pure ASGI middleware refuses a declared
Content-Length over the limit before reading a byte, counts the bytes actually received
(chunked bodies, lying clients) and stops at the limit, and answers a body in a media type the
route does not read with 415 (a JSON route reached with ``text/plain``, which a browser sends
cross-site without a preflight, is refused). Errors keep the service's one JSON body (FastAPI's
own ``max_body_size`` would answer plain text from outside the exception handlers).

A body must also keep coming: by ``CONVSEL_BODY_TIMEOUT_S`` after the request began plus one
second per ``CONVSEL_MIN_BODY_RATE`` bytes received, or the request is answered 408 and its
connection closed. A client sending a byte every few seconds otherwise held its request (and
whatever the route took before reading) for as long as it liked; routes read their body before
taking a pool slot or lock, and this bounds how long the read itself may take.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from convsel.config import PREFIX

from .config import Settings
from .errors import error_body

JSON = ("application/json",)
MULTIPART = ("multipart/form-data",)
# Every route that reads a body reads it on POST: a PUT or PATCH is the router's 405 (with
# Allow), whatever its content type, never a 415 that suggests another type would do.
_READ_ON = "POST"
# An answer sent before the body was read whole ends the connection: the rest of the body
# would otherwise still have to be read (or trickled) before the next request.
CLOSE = {"Connection": "close"}


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
        self.grace = settings.body_timeout_s
        self.rate = settings.min_body_rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bound = self.routes.get(scope["path"], self.default)
        headers = Headers(scope=scope)
        if bound.media and scope["method"] == _READ_ON:
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media not in bound.media:
                await _unsupported(media, bound.media)(scope, receive, send)
                return
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > bound.limit:
            await _too_large(bound, int(declared))(scope, receive, send)
            return
        received = 0
        started = time.monotonic()

        async def counting_receive() -> Message:
            nonlocal received
            # FastAPI re-raises HTTPException from body reading: the handlers answer.
            due = started + self.grace + received / self.rate
            try:
                with anyio.fail_after(max(0.0, due - time.monotonic())):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(408, f"the request body stopped coming: {received} bytes "
                                    f"in {time.monotonic() - started:.1f} s (at least "
                                    f"{self.rate} bytes/s after {self.grace:g} s: "
                                    f"CONVSEL_MIN_BODY_RATE, CONVSEL_BODY_TIMEOUT_S)",
                                    headers=CLOSE) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > bound.limit:
                    raise HTTPException(413, _message(bound, received, "received so far"),
                                        headers=CLOSE)
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
