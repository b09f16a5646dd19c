"""How many requests the process answers at once, and the places kept for health probes.

At most ``CONVSEL_MAX_REQUESTS`` requests are in progress (their bodies being read included:
the body's pace is bounded by :mod:`service.limits`); one more is answered 503 with
Retry-After in the service's JSON error body. ``/healthz`` and ``/readyz`` have
:data:`PROBE_PLACES` places of their own on top, so an orchestrator still sees a full server
alive (and ready) instead of restarting it. A pure ASGI middleware: a counter, no lock (one
event loop).
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_body

PROBES = frozenset({"/healthz", "/readyz"})
PROBE_PLACES = 16


class AdmissionMiddleware:
    def __init__(self, app: ASGIApp, max_requests: int, retry_after: int) -> None:
        self.app = app
        self.max_requests = max_requests
        self.retry_after = retry_after
        self.in_flight = 0
        self.probes_in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in PROBES and self.probes_in_flight < PROBE_PLACES:
            self.probes_in_flight += 1
            try:
                await self.app(scope, receive, send)
            finally:
                self.probes_in_flight -= 1
            return
        if self.in_flight >= self.max_requests:
            await self._busy()(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    def _busy(self) -> JSONResponse:
        body = error_body("busy", f"{self.in_flight} requests are in progress, the most this "
                          f"server answers at once (CONVSEL_MAX_REQUESTS); retry after "
                          f"{self.retry_after} s", rule=f"at most {self.max_requests} "
                          "requests at once")
        return JSONResponse(body, status_code=503,
                            headers={"Retry-After": str(self.retry_after),
                                     "Connection": "close"})
