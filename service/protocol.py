"""uvicorn's HTTP/1.1 protocol (h11) with the two guards uvicorn lacks against slow clients.

* **A deadline on the request head.** uvicorn times out an idle keep-alive connection, but not
  one that has sent part of a request line or headers: 260 sockets sending half a header held
  every connection slot for good. Here a request's head must be complete within
  ``CONVSEL_HEADER_TIMEOUT_S`` of its first byte (or of the connection); then the connection
  is answered 408 and closed. (uvicorn's ``h11_max_incomplete_event_size`` bounds the head's
  size, not its time; the body's pace is :class:`service.limits.BodyLimitMiddleware`'s.)
* **Connections over the cap close the oldest idle one.** uvicorn's ``limit_concurrency``
  answered every route, ``/healthz`` included, with a plain-text 503 once slow connections
  filled it. Here, at ``CONVSEL_MAX_CONNECTIONS``, a new connection closes the oldest one that
  has no request in progress (a keep-alive wait, or a head still trickling in); only when
  every connection is busy with a request is the new one answered 503, in the service's JSON
  error body. (Requests in flight are bounded by :class:`service.admission.AdmissionMiddleware`.)

The guards' settings reach each connection through the lifespan state
(:data:`STATE_KEY`), which uvicorn hands to every protocol instance; without it (another app)
the protocol is uvicorn's own. ``serve()`` passes this class as uvicorn's ``http``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .errors import error_body

STATE_KEY = "convsel.connections"


@dataclass(frozen=True)
class ConnectionRules:
    header_timeout_s: float
    max_connections: int
    retry_after: int


class ServiceH11Protocol(H11Protocol):
    """One client connection (uvicorn makes one instance per connection)."""

    _head_timer: asyncio.TimerHandle | None = None
    _opened: float = 0.0

    @property
    def _rules(self) -> ConnectionRules | None:
        rules = self.app_state.get(STATE_KEY)
        return rules if isinstance(rules, ConnectionRules) else None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        rules = self._rules
        if rules is None:
            return
        self._opened = self.loop.time()
        if len(self.connections) > rules.max_connections and not self._close_oldest_idle():
            self._refuse(rules)
            return
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_head():
            if self._head_timer is None:
                self._arm_head_timer()
        else:
            self._disarm_head_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Between requests uvicorn's keep-alive timeout applies; the next head's first byte
        # (data_received) starts its deadline. Pipelined bytes already here start it now.
        self._disarm_head_timer()
        if self._awaiting_head() and self.conn.trailing_data[0]:
            self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    # -- the head's deadline -----------------------------------------------------------------
    def _awaiting_head(self) -> bool:
        """No request in progress: a complete head has not arrived since the last answer."""
        return (self.conn.their_state is h11.IDLE and not self.transport.is_closing()
                and (self.cycle is None or self.cycle.response_complete))

    def _arm_head_timer(self) -> None:
        rules = self._rules
        if rules is not None and self._head_timer is None:
            self._head_timer = self.loop.call_later(rules.header_timeout_s, self._head_too_slow)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        rules = self._rules
        if rules is None or not self._awaiting_head():
            return
        if self.conn.trailing_data[0]:   # part of a head: say why before closing
            self._answer(408, "request_timeout",
                         f"the request line and headers did not arrive within "
                         f"{rules.header_timeout_s:g} s (CONVSEL_HEADER_TIMEOUT_S)")
        else:
            self._close()

    # -- the connection cap ------------------------------------------------------------------
    def _close_oldest_idle(self) -> bool:
        idle = [c for c in self.connections if c is not self
                and isinstance(c, ServiceH11Protocol) and c._awaiting_head()]
        if not idle:
            return False
        min(idle, key=lambda c: c._opened)._close()
        return True

    def _refuse(self, rules: ConnectionRules) -> None:
        self._answer(503, "busy", f"{len(self.connections) - 1} connections are open, the "
                     f"most this server accepts (CONVSEL_MAX_CONNECTIONS), and each is "
                     f"answering a request; retry after {rules.retry_after} s",
                     retry_after=rules.retry_after)

    # -- answers outside any request (h11 cannot send a response before a request) -----------
    def _answer(self, status: int, code: str, message: str,
                retry_after: int | None = None) -> None:
        body = json.dumps(error_body(code, message), separators=(",", ":")).encode()
        head = [f"HTTP/1.1 {status} {_REASONS[status]}", "content-type: application/json",
                f"content-length: {len(body)}", "connection: close"]
        if retry_after is not None:
            head.append(f"retry-after: {retry_after}")
        self.transport.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        self._close()

    def _close(self) -> None:
        self._disarm_head_timer()
        self._unset_keepalive_if_required()
        if not self.transport.is_closing():
            try:
                self.conn.send(h11.ConnectionClosed())
            except h11.LocalProtocolError:
                pass
            self.transport.close()


_REASONS = {408: "Request Timeout", 503: "Service Unavailable"}


def rules_of(settings: Any) -> dict[str, ConnectionRules]:
    """The lifespan state that carries ``settings``' connection guards to the protocol."""
    return {STATE_KEY: ConnectionRules(settings.header_timeout_s, settings.max_connections,
                                       settings.retry_after_seconds)}
