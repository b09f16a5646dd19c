"""Prometheus metrics (prometheus-client), one registry per app.

Requests are counted and timed per route *template* (``/v1/select``, never the raw path, so
unknown URLs cannot grow the label set), method (the standard ones by name, any other as
``OTHER``: 300 made-up methods of 12,000 characters once made a scrape 80 MB) and status.
Backend counters, such as the OpenCL runtime cache's hits and misses, are read from each
backend's ``describe()`` at scrape time.
With several uvicorn workers (``service.server.shared_metrics``) the request, selection and
convolution numbers are prometheus-client's multiprocess ones: every scrape sums all workers;
the backend counters are the answering worker's own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("convsel.service")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"   # prometheus-client's own variable
UNMATCHED = "<unmatched>"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "OTHER"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                    2.5, 5.0, 10.0)


class Metrics:
    """The service's metrics. ``render()`` gives the Prometheus text exposition."""

    def __init__(self, backend_describers: Callable[[], Mapping[str, Any]] | None = None
                 ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("convsel_http_requests", "HTTP requests answered",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("convsel_http_request_duration_seconds",
                                 "time from request to the end of the answer",
                                 ["route", "method", "status"], buckets=_LATENCY_BUCKETS,
                                 registry=r)
        self.selections = Counter("convsel_selections", "selections answered",
                                  ["method", "algorithm", "policy", "source"], registry=r)
        self.convolutions = Histogram("convsel_convolution_seconds",
                                      "prepare + run time of one convolution",
                                      ["algorithm", "backend", "fallback"],
                                      buckets=_LATENCY_BUCKETS, registry=r)
        self.rejected = Counter("convsel_convolutions_rejected",
                                "convolutions refused with 503 because too many were in flight",
                                registry=r)
        self._series: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._selection_series: dict[tuple[str, ...], Any] = {}
        self._backend_counters = (BackendCounters(backend_describers)
                                  if backend_describers is not None else None)
        if self._backend_counters is not None:
            r.register(self._backend_counters)

    def request_series(self, route: str, method: str, status: int) -> tuple[Any, Any]:
        """The (counter, histogram) children of one label set; ``labels()`` costs ~10 us a
        call, so children are looked up once and kept (routes and statuses are few)."""
        key = (route, method, status)
        series = self._series.get(key)
        if series is None:
            labels = (route, method, str(status))
            series = self._series[key] = (self.requests.labels(*labels),
                                          self.latency.labels(*labels))
        return series

    def selection(self, sel: Mapping[str, Any]) -> None:
        key = (sel["method"], sel["algorithm"], sel["policy"], sel["source"])
        child = self._selection_series.get(key)
        if child is None:
            child = self._selection_series[key] = self.selections.labels(*key)
        child.inc()

    def convolution(self, algorithm: str, backend: str, fallback: bool, seconds: float) -> None:
        self.convolutions.labels(algorithm, backend, "yes" if fallback else "no").observe(
            seconds)

    def render(self) -> bytes:
        if not os.environ.get(MULTIPROC_DIR):
            return generate_latest(self.registry)
        # prometheus-client chose file-backed values at import (the variable was set): sum
        # every worker's files; a collector registered here is read from this process only
        shared = CollectorRegistry()
        MultiProcessCollector(shared)
        if self._backend_counters is not None:
            shared.register(self._backend_counters)
        return generate_latest(shared)


class BackendCounters(Collector):
    """Numeric leaves under the ``cache`` and ``counters`` keys of each backend's
    ``describe()``, as gauges ``convsel_backend_counter{backend, name}`` with nested keys
    joined by dots: ``name="cache.hits"`` is the OpenCL program cache's hit count."""

    SECTIONS = ("cache", "counters")

    def __init__(self, describers: Callable[[], Mapping[str, Any]]) -> None:
        self._describers = describers

    def describe(self) -> list[GaugeMetricFamily]:
        # Registration must not call describe() on backends that are not probed yet.
        return [self._family()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for backend, describe in self._describers().items():
            try:
                info = describe()
            except Exception:  # a failing probe must not break /metrics
                log.warning("%s describe() failed during a scrape", backend, exc_info=True)
                continue
            if not isinstance(info, Mapping):
                continue
            for section in self.SECTIONS:
                if isinstance(info.get(section), Mapping):
                    for name, value in _numeric_leaves(info[section], section + "."):
                        family.add_metric([backend, name], value)
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("convsel_backend_counter",
                                 "counters reported by a backend's describe(), e.g. the OpenCL "
                                 "runtime cache's hits and misses", labels=["backend", "name"])


def _numeric_leaves(tree: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, float]]:
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _numeric_leaves(value, name + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield name, float(value)


class MetricsMiddleware:
    """Pure ASGI middleware (no BaseHTTPMiddleware overhead) timing every HTTP request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            method = scope["method"] if scope["method"] in METHODS else OTHER_METHOD
            count, latency = self.metrics.request_series(route, method, status)
            count.inc()
            latency.observe(time.perf_counter() - start)
