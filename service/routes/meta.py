"""What the service knows and how it is: targets, methods, backends, rules, health, metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from convsel import ConvProblem, algorithms, backends, resolve_target
from convsel.rules import METHODS
from convsel.targets import target_names

from ..auth import TOKEN
from ..errors import responses
from ..metrics import CONTENT_TYPE
from ..schemas import (
    BackendsResponse,
    HealthResponse,
    MethodsResponse,
    ReadyResponse,
    RulesResponse,
    TargetsResponse,
)
from ..state import StateDep

router = APIRouter()

# algorithm_for() depends on the problem only through "is it a plain 1x1": these two cover it.
_PROBES = (ConvProblem(1, 4, 4, 4, 4, 1, 1), ConvProblem(1, 4, 4, 4, 4, 3, 3))


@router.get("/healthz", response_model=HealthResponse, tags=["health"])
async def healthz() -> dict[str, str]:
    """Liveness: the process answers. Never waits on anything (no database, no thread)."""
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadyResponse, tags=["health"],
            responses={503: {"model": ReadyResponse, "description": "not ready"}})
async def readyz(request: Request, state: StateDep) -> JSONResponse:
    """Readiness: rules loaded, backends probed, every component's own check ok. Answers
    within CONVSEL_READY_TIMEOUT_S: a component still checking then (a tuning database that
    does not answer) is reported unavailable."""
    detail = await state.readiness(request.app)
    ready = all(entry.get("ok") for entry in detail.values())
    return JSONResponse({"ready": ready, "detail": detail}, status_code=200 if ready else 503)


@router.get("/metrics", tags=["health"], response_class=Response, dependencies=[TOKEN],
            responses={200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}},
                       **responses(401)})
async def metrics(state: StateDep) -> Response:
    """Prometheus text exposition (needs the API token when the server has one)."""
    body = await run_in_threadpool(state.metrics.render)  # describe() may touch a device
    return Response(body, media_type=CONTENT_TYPE)


@router.get("/v1/targets", response_model=TargetsResponse, tags=["meta"])
async def targets(state: StateDep) -> dict[str, Any]:
    """Every target name the rules know, CPUs first, with its family and fp16 support."""
    rules = state.loaded_rules()
    rows = [resolve_target(name, rules) for name in target_names(rules)]
    return {"default": state.settings.default_target,
            "targets": [{"name": t.name, "kind": t.kind, "arch": t.arch, "value": t.value,
                         "fp16": t.fp16} for t in rows]}


@router.get("/v1/methods", response_model=MethodsResponse, tags=["meta"])
async def methods() -> dict[str, Any]:
    """ACL's methods with the convsel algorithms that run them, and which backends implement
    each algorithm (``convsel.backends.IMPLEMENTATIONS``)."""
    runs = {m: list(dict.fromkeys(algorithms.algorithm_for(m, p) for p in _PROBES))
            for m in METHODS}
    return {"methods": [{"method": m, "algorithms": algs} for m, algs in runs.items()],
            "algorithms": [{"algorithm": a, "description": algorithms.SPECS[a].description,
                            "methods": [m for m in METHODS if a in runs[m]]
                            or _registry_methods(a), "backends": backends.backends_for(a)}
                           for a in algorithms.ALGORITHMS]}


def _registry_methods(algorithm: str) -> list[str]:
    """The ACL methods an algorithm implements by the registry, for one that ACL's rules never
    pick (implicit_gemm: reached through tuning only)."""
    return list(dict.fromkeys(algorithms.method_for(algorithm, gpu) for gpu in (False, True)))


@router.get("/v1/backends", response_model=BackendsResponse, tags=["meta"])
async def list_backends(state: StateDep) -> dict[str, Any]:
    """Availability as probed at start-up, each backend's capabilities (dtypes,
    device-resident arrays; per device its index for ``opencl:1``, F16 mode, fp64, tensor
    cores) and its live ``describe()`` (devices, runtime-cache counters) where it has one."""
    rows = await run_in_threadpool(_backend_rows, state.backends, state.describers)
    return {"default": state.settings.default_backend, "backends": rows}


def _backend_rows(probed: dict[str, Any], describers: dict[str, Any]) -> list[dict[str, Any]]:
    able = {c["backend"]: c for c in backends.capabilities()}   # opens each device
    rows = []
    for name, verdict in probed.items():
        row = {"name": name, "available": verdict.ok, "reason": verdict.reason,
               "implements": [a for (a, b) in backends.IMPLEMENTATIONS if b == name],
               "describe": None, "describe_error": None, "capabilities": able.get(name)}
        if name in describers:
            try:
                row["describe"] = describers[name]()
            except Exception as exc:  # noqa: BLE001 - report the failure, keep answering
                row["describe_error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows


@router.get("/v1/rules", response_model=RulesResponse, tags=["meta"])
async def rules(state: StateDep) -> dict[str, Any]:
    """The loaded rules: version, digest (first 16 hex of the file's SHA-256), source
    ('packaged' or 'custom'; the path with CONVSEL_SHOW_PATHS=1) and content."""
    loaded = state.loaded_rules()
    return {"version": loaded.version, "digest": loaded.digest,
            "source": state.rules_source(loaded), "rules": state.rules_json}

