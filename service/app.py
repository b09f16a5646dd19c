"""create_app(): the FastAPI application, its lifespan, and the list of what it mounts.

Adding a route family
---------------------
Write ``service/routes/<name>.py`` with ``router = APIRouter(...)``, import it below and add
its router to :data:`ROUTERS`. Where the family needs them, add also: its readiness check to
:data:`READY_CHECKS` (reported under ``detail["<name>"]`` by ``GET /readyz``; a failing check
makes the service unready: 503), the bodies its routes validate themselves to
:data:`OPENAPI_MODELS` (OpenAPI must list what ``openapi_extra`` references), and its
``{path: BodyRule}`` to :data:`BODIES` (a POST route without one gets ``max_body_bytes`` and
JSON only). Code two routes share lives in a module of its own (``service.timing``,
``service.fitted``), never in a route module: no route imports another. Shared state lives in
``app.state.convsel`` (:class:`service.state.ServiceState`, via ``StateDep``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel

from convsel import (
    InvalidProblemError,
    __version__,
    arguments,
    backends,
    load_rules,
    resolve_target,
)

from . import errors, fit_jobs, openapi
from .admission import AdmissionMiddleware
from .config import Settings
from .limits import DEFAULT_RULE, BodyLimitMiddleware, BodyRule
from .logs import RequestLogMiddleware
from .metrics import Metrics, MetricsMiddleware
from .pool import ConvPool
from .protocol import rules_of
from .routes import conv, find, fit, fleet, meta, plan, select, tuning
from .state import ReadyCheck, ServiceState

# Mounted in this order. Requests are matched router by router, so the hot ones come first
# (/v1/select answers ~60 us sooner matched first than behind a dozen routes).
ROUTERS: tuple[APIRouter, ...] = (
    select.router,   # POST /v1/select, /v1/select/batch
    conv.router,     # POST /v1/conv2d
    meta.router,     # /healthz /readyz /metrics /v1/targets|methods|backends|rules
    plan.router,     # POST /v1/plan (ONNX model upload)
    tuning.router,   # POST /v1/tune, GET /v1/tuning
    fit.router,      # POST/GET /v1/fit (the predicted policy's model)
    find.router,     # POST /v1/find (every algorithm ranked by measured time)
    fleet.router,    # POST /v1/tuning/entries, GET /v1/devices, POST/GET /v1/fit/jobs
)
READY_CHECKS: Mapping[str, ReadyCheck] = {
    "conv": conv.ready, "plan": plan.ready, "tuning": tuning.ready, "fit": fit.ready}
OPENAPI_MODELS: tuple[type[BaseModel], ...] = (
    *select.OPENAPI_MODELS, *conv.OPENAPI_MODELS, *tuning.OPENAPI_MODELS,
    *fit.OPENAPI_MODELS, *find.OPENAPI_MODELS, *fleet.OPENAPI_MODELS)
BODIES: Mapping[str, BodyRule] = {**select.BODIES, **conv.BODIES, **plan.BODIES,
                                  **fleet.BODIES}

DESCRIPTION = ("ACL's conv2d algorithm selection, explained, and convolutions run remotely. "
               "Errors share one body: code, message, field, value, rule.")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. Settings default to ``Settings()`` (the ``CONVSEL_*`` environment).

    Rules load and backends are probed in the lifespan, so use the app under a server or
    ``with TestClient(app)``; a bad rules file, target or backend stops the start-up.
    """
    settings = settings or Settings()
    # The describers are read at scrape time, once the lifespan has probed the backends.
    state = ServiceState(settings, Metrics(backend_describers=lambda: state.describers),
                         ready_checks=dict(READY_CHECKS))
    # /docs with Swagger UI's assets served from the fastapi-offline package, not a CDN: the
    # page works on hosts without internet access.
    app = FastAPIOffline(title="convsel", version=__version__, description=DESCRIPTION,
                         lifespan=_lifespan, redoc_url=None)
    app.state.convsel = state
    errors.install(app, allow=_allowed_methods(ROUTERS))
    for router in ROUTERS:
        app.include_router(router)
    # The last added is the outermost: metrics see every answer, the 413s, 415s and 503s of
    # a full server included, and every answer carries its request id.
    app.add_middleware(BodyLimitMiddleware, settings=settings, routes=_bodies(ROUTERS))
    app.add_middleware(AdmissionMiddleware, max_requests=settings.max_requests,
                       retry_after=settings.retry_after_seconds)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    app.add_middleware(RequestLogMiddleware, enabled=settings.request_log)
    app.openapi = lambda: openapi.build(  # type: ignore[method-assign]
        app, api_routes(ROUTERS), OPENAPI_MODELS, state)
    return app


def api_routes(routers: Sequence[APIRouter]) -> list[APIRoute]:
    """The routers' routes (FastAPI includes routers lazily, so ``app.routes`` does not list
    them one by one)."""
    return [r for router in routers for r in router.routes if isinstance(r, APIRoute)]


def _allowed_methods(routers: Sequence[APIRouter]) -> dict[str, str]:
    """Each path's methods, over all its routes (a 405's Allow header)."""
    methods: dict[str, set[str]] = {}
    for route in api_routes(routers):
        methods.setdefault(route.path, set()).update(route.methods)
    return {path: ", ".join(sorted(names)) for path, names in methods.items()}


def _bodies(routers: Sequence[APIRouter]) -> dict[str, BodyRule]:
    """Each POST route's body rule: its entry in :data:`BODIES`, else the default."""
    posts = {r.path for r in api_routes(routers) if "POST" in r.methods}
    return {path: BODIES.get(path, DEFAULT_RULE) for path in posts | set(BODIES)}


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    state: ServiceState = app.state.convsel
    s = state.settings
    rules = load_rules(s.heuristics)
    resolve_target(s.default_target, rules)   # an unknown default target refuses to start
    try:
        arguments.backend(s.default_backend)
    except InvalidProblemError as exc:   # named by the variable that set it
        raise ValueError(f"CONVSEL_DEFAULT_BACKEND={s.default_backend!r}: {exc.rule}") from None
    state.rules = rules
    dumped = rules.model_dump(mode="json", exclude={"digest", "source"})
    state.rules_json = {"schema": dumped.pop("schema_"), **dumped}   # the file's own key
    # Probing imports pyopencl and lists devices: seconds, so off the event loop.
    state.backends = await anyio.to_thread.run_sync(_probe_backends)
    state.describers = _describers(state.backends)
    state.pool = ConvPool(s.max_concurrent_convolutions, s.max_queued_convolutions,
                          s.retry_after_seconds, on_reject=state.metrics.rejected.inc)
    try:
        # uvicorn hands the lifespan's state to each connection (service.protocol's guards)
        yield rules_of(s)
    finally:
        state.pool.shutdown()
        fit_jobs.shutdown()   # no fit worker outlives its server


def _probe_backends() -> dict[str, Any]:
    return {name: backends.available(name) for name in backends.BACKENDS}


def _describers(probed: dict[str, Any]) -> dict[str, Any]:
    """Each importable backend's ``describe`` (the OpenCL backend's reports cache counters)."""
    found = {}
    for name in probed:
        try:
            module = backends.backend_module(name)
        except ImportError:
            continue
        if callable(getattr(module, "describe", None)):
            found[name] = module.describe
    return found
