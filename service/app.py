"""create_app(): the FastAPI application, its lifespan and its one table of routers.

Adding a route family
---------------------
Write ``service/routes/<name>.py`` with ``router = APIRouter(...)`` and add its module path to
:data:`ROUTERS`; that is the only edit here. A route module may also define:

``ready(app) -> {"ok": bool, ...}``
    a readiness check, reported under ``detail["<name>"]`` by ``GET /readyz`` (a failing
    check makes the service unready: 503);
``OPENAPI_MODELS``
    pydantic models that its routes reference from ``openapi_extra`` (bodies the route reads
    itself, such as a multipart form) and that OpenAPI must therefore list;
``BODIES``
    ``{path: service.limits.BodyRule}``: the body limit (a Settings field) and media types of
    its routes; a POST route without one gets ``max_body_bytes`` and JSON only;
and a router-level ``lifespan=`` (``APIRouter(lifespan=...)``), which FastAPI runs after the
app's own (rules loaded, backends probed) and shuts down before it. Shared state lives in
``app.state.convsel`` (:class:`service.state.ServiceState`, via ``StateDep``).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline

from convsel import backends
from convsel._version import __version__
from convsel.rules import load_rules
from convsel.targets import resolve_target

from . import errors, openapi
from .config import Settings
from .limits import DEFAULT_RULE, BodyLimitMiddleware, BodyRule
from .logs import RequestLogMiddleware
from .metrics import Metrics, MetricsMiddleware
from .pool import ConvPool
from .state import ServiceState

# The service's routers, mounted in this order. Add one line per route module. Requests are
# matched router by router, so the hot ones come first (/v1/select answers ~60 us sooner
# matched first than behind a dozen routes).
ROUTERS: tuple[str, ...] = (
    "service.routes.select",   # POST /v1/select, /v1/select/batch
    "service.routes.conv",     # POST /v1/conv2d
    "service.routes.meta",     # /healthz /readyz /metrics /v1/targets|methods|backends|rules
    "service.routes.plan",     # POST /v1/plan (ONNX model upload)
    "service.routes.tuning",   # POST /v1/tune, GET /v1/tuning
    "service.routes.fit",      # POST/GET /v1/fit (the predicted policy's model)
    "service.routes.find",     # POST /v1/find (every algorithm ranked by measured time)
)

DESCRIPTION = ("ACL's conv2d algorithm selection, explained, and convolutions run remotely. "
               "Errors share one body: code, message, field, value, rule.")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app. Settings default to ``Settings()`` (the ``CONVSEL_*`` environment).

    Rules load and backends are probed in the lifespan, so use the app under a server or
    ``with TestClient(app)``; a bad rules file, target or backend stops the start-up.
    """
    settings = settings or Settings()
    # The describers are read at scrape time, once the lifespan has probed the backends.
    state = ServiceState(settings, Metrics(backend_describers=lambda: state.describers))
    # /docs with Swagger UI's assets served from the fastapi-offline package, not a CDN: the
    # page works on hosts without internet access.
    app = FastAPIOffline(title="convsel", version=__version__, description=DESCRIPTION,
                         lifespan=_lifespan, redoc_url=None)
    app.state.convsel = state
    errors.install(app)
    modules = [importlib.import_module(path) for path in ROUTERS]
    for module in modules:
        app.include_router(module.router)
        if hasattr(module, "ready"):
            state.ready_checks[module.__name__.rsplit(".", 1)[-1]] = module.ready
    # The last added is the outermost: metrics see every answer, the 413s and 415s included,
    # and every answer carries its request id.
    app.add_middleware(BodyLimitMiddleware, settings=settings, routes=_bodies(app, modules))
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    app.add_middleware(RequestLogMiddleware, enabled=settings.request_log)
    app.openapi = lambda: openapi.build(app, modules, state)  # type: ignore[method-assign]
    return app


def api_routes(modules: Sequence[ModuleType]) -> list[APIRoute]:
    """The routes of the route modules' routers (FastAPI includes routers lazily, so
    ``app.routes`` does not list them one by one)."""
    return [r for m in modules for r in m.router.routes if isinstance(r, APIRoute)]


def _bodies(app: FastAPI, modules: Sequence[ModuleType]) -> dict[str, BodyRule]:
    """Each POST route's body rule: its module's ``BODIES`` entry, else the default."""
    declared = {path: rule for m in modules for path, rule in getattr(m, "BODIES", {}).items()}
    posts = {r.path for r in api_routes(modules) if "POST" in r.methods}
    return {path: declared.get(path, DEFAULT_RULE) for path in posts | set(declared)}


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: ServiceState = app.state.convsel
    s = state.settings
    rules = load_rules(s.heuristics)
    resolve_target(s.default_target, rules)   # an unknown default target refuses to start
    if s.default_backend not in backends.BACKENDS:
        raise ValueError(f"CONVSEL_DEFAULT_BACKEND={s.default_backend!r}: unknown backend; "
                         f"known: {', '.join(backends.BACKENDS)}")
    state.rules = rules
    dumped = rules.model_dump(mode="json", exclude={"digest", "source"})
    state.rules_json = {"schema": dumped.pop("schema_"), **dumped}   # the file's own key
    # Probing imports pyopencl and lists devices: seconds, so off the event loop.
    state.backends = await anyio.to_thread.run_sync(_probe_backends)
    state.describers = _describers(state.backends)
    state.pool = ConvPool(s.max_concurrent_convolutions, s.max_queued_convolutions,
                          s.retry_after_seconds, on_reject=state.metrics.rejected.inc)
    try:
        yield
    finally:
        state.pool.shutdown()


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
