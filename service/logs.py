"""One structured (JSON) log line per request, and the request id that ties it to the answer.

The id is the client's ``X-Request-ID`` when it sends a sane one (a proxy's id carries
through), else a fresh one; every answer echoes it in ``X-Request-ID``. Lines go to the
``convsel.service.requests`` logger: ``service.server`` prints them as they are, one JSON
object a line, next to uvicorn's logs (whose own access log ``CONVSEL_ACCESS_LOG`` turns on).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_LOG = "convsel.service.requests"
HEADER = b"x-request-id"
_SANE_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,64}$")
log = logging.getLogger(REQUEST_LOG)


class RequestLogMiddleware:
    """Pure ASGI: tags every HTTP answer with X-Request-ID and, when ``enabled``, logs it."""

    def __init__(self, app: ASGIApp, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        start = time.perf_counter()
        status, sent = 500, 0

        async def send_tagged(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, request_id.encode())]}
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_tagged)
        finally:
            if self.enabled and log.isEnabledFor(logging.INFO):
                log.info(json.dumps(_record(scope, request_id, status, sent, start),
                                    separators=(",", ":")))


def _request_id(scope: Scope) -> str:
    for key, value in scope.get("headers", ()):
        if key == HEADER and _SANE_ID.match(value):
            return str(value.decode("ascii"))
    return uuid.uuid4().hex


def _record(scope: Scope, request_id: str, status: int, sent: int,
            start: float) -> dict[str, Any]:
    client = scope.get("client")
    route = getattr(scope.get("route"), "path", None)
    return {"ts": round(time.time(), 3), "event": "request", "request_id": request_id,
            "method": scope["method"], "path": scope["path"], "route": route,
            "status": status, "duration_ms": round((time.perf_counter() - start) * 1e3, 3),
            "bytes_sent": sent, "client": client[0] if client else None}
