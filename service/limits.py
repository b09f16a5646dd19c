"""Request-body size limit with the service's JSON error body.

FastAPI's own ``max_body_size`` answers an oversized Content-Length with a plain-text 413
from outside the app's exception handlers; this pure ASGI middleware keeps the one error shape.
It refuses a declared Content-Length over the limit before reading a byte, and counts the
bytes actually received (chunked bodies, lying clients) and stops at the limit.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_body


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(int(declared))(scope, receive, send)
            return
        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises HTTPException from body reading: the 413 handler answers.
                    raise HTTPException(413, self._message(received, "received so far"))
            return message

        await self.app(scope, counting_receive, send)

    def _too_large(self, size: int) -> JSONResponse:
        body = error_body("too_large", self._message(size, "declared by Content-Length"),
                          field="body", value=size,
                          rule=f"request body must be at most {self.max_bytes} bytes")
        return JSONResponse(body, status_code=413, headers={"Connection": "close"})

    def _message(self, size: int, how: str) -> str:
        return (f"request body of {size} bytes ({how}) exceeds the limit of {self.max_bytes} "
                "bytes (CONVSEL_MAX_BODY_BYTES)")
