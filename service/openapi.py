"""The OpenAPI document, made to say exactly what this server accepts and answers.

FastAPI's schema, plus what only the running configuration knows:

* targets: the rules' target names as an enum, and the pattern of every other name the
  library resolves (case-insensitive names, Mali device names);
* the batch's ``maxItems`` (``CONVSEL_MAX_BATCH_SIZE``);
* the bearer scheme on routes that need the token, only when ``CONVSEL_API_TOKEN`` is set
  (otherwise their 401 is impossible and is not listed);
* every 422 answered with the service's :class:`~service.schemas.ErrorBody`, never FastAPI's
  ``HTTPValidationError`` (the service's handlers answer all validation errors).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from convsel import Rules, load_rules
from convsel.targets import MALI_MODELS_OUTSIDE_ACL, target_names

from .auth import require_token
from .schemas import MAX_NAME, ErrorBody
from .state import ServiceState

BEARER = "bearerAuth"
_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}


def build(app: FastAPI, routes: Sequence[APIRoute], models: Sequence[type[BaseModel]],
          state: ServiceState) -> dict[str, Any]:
    """The document for ``app``, whose ``routes`` validate ``models`` themselves (bodies that
    ``openapi_extra`` references, which FastAPI therefore does not list)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description,
                         routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    _, defs = models_json_schema([(m, "validation") for m in (*models, ErrorBody)],
                                 ref_template="#/components/schemas/{model}")
    for name, definition in defs.get("$defs", {}).items():
        components.setdefault(name, definition)
    rules = state.rules or load_rules(state.settings.heuristics)
    _fill(schema, target_schema(rules), state.settings.max_batch_size)
    _security(schema, routes, token=state.settings.api_token is not None)
    _error_bodies(schema)
    app.openapi_schema = schema
    return schema


_SEP = r"[\s_\-]"   # what convsel.targets ignores in a name


def target_schema(rules: Rules) -> dict[str, Any]:
    """What ``convsel.targets.resolve_target`` accepts, as its three ways of reading a name:
    a known name (or a Mali model ACL maps by its letter) in any case, spaces, '-' and '_'
    anywhere; a known name after "Mali"; and a Mali
    device name, "Mali-" then a model (known, or one ACL maps by its letter) as the rules'
    ``device_names.pattern`` reads it (its full word, or its letters and digits), then
    anything. (Unicode letters whose upper case is ASCII, such as 'ſ', resolve too and are
    left out.)"""
    names = target_names(rules)
    squashed = sorted({_squash(n) for n in names}, key=len, reverse=True)
    models = sorted({*squashed, *MALI_MODELS_OUTSIDE_ACL}, key=len, reverse=True)
    spelled = _spelled(squashed)
    mali = rf"\s*{_any_case('mali')}{_SEP}*"
    device = "|".join([*(rf"{_any_case(m)}(?!\w)" for m in models),
                       *(rf"{_any_case(m)}(?![A-Za-z\d])" if m.isalpha() else
                         rf"{_any_case(m)}(?!\d)" for m in models
                         if re.fullmatch(r"[A-Z]+[0-9]*", m))])
    pattern = (rf"^(?:{_SEP}*(?:{_spelled(models)}){_SEP}*|{mali}(?:{spelled}){_SEP}*"
               rf"|{mali}(?:{device})[\s\S]*)$")
    return {"anyOf": [{"type": "string", "enum": names},
                      {"type": "string", "pattern": pattern, "maxLength": MAX_NAME}]}


def _spelled(names: Sequence[str]) -> str:
    """Any of ``names`` in any case, with separators anywhere."""
    return "|".join(f"{_SEP}*".join(_any_case(c) for c in name) for name in names)


def _squash(name: str) -> str:
    return re.sub(_SEP + "+", "", name).upper()


def _any_case(name: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in name)


def _fill(node: Any, target: dict[str, Any], max_batch: int) -> None:
    """Replace the marked fields' schemas in place (see service.schemas.TARGET_FIELD)."""
    if isinstance(node, list):
        for item in node:
            _fill(item, target, max_batch)
        return
    if not isinstance(node, dict):
        return
    mark = node.pop("x-convsel", None)
    if mark == "target":
        _retarget(node, target)
    elif mark == "batch":
        node["maxItems"] = max_batch
    for value in node.values():
        _fill(value, target, max_batch)


def _retarget(node: dict[str, Any], target: dict[str, Any]) -> None:
    members = node.get("anyOf")
    if members is None:              # a plain string field (a form's)
        for key in ("type", "maxLength"):
            node.pop(key, None)
        node.update(target)
        return
    node["anyOf"] = [m for m in members if m.get("type") != "string"] + target["anyOf"]


def _security(schema: dict[str, Any], routes: Sequence[APIRoute], *, token: bool) -> None:
    guarded = {(r.path, m.lower()) for r in routes for m in r.methods
               if any(d.dependency is require_token for d in r.dependencies)}
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if (path, method) not in guarded:
                continue
            if token:
                operation["security"] = [{BEARER: []}]
            else:
                operation.get("responses", {}).pop("401", None)
    if token:
        schema["components"].setdefault("securitySchemes", {})[BEARER] = {
            "type": "http", "scheme": "bearer",
            "description": "the server's CONVSEL_API_TOKEN"}


def _error_bodies(schema: dict[str, Any]) -> None:
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            answer = operation.get("responses", {}).get("422")
            if answer is None:
                continue
            content = answer.setdefault("content", {}).setdefault("application/json", {})
            content["schema"] = dict(_ERROR_REF)
    components = schema.get("components", {}).get("schemas", {})
    text = repr(schema.get("paths"))
    for name in ("HTTPValidationError", "ValidationError"):
        if f"/{name}'" not in text:
            components.pop(name, None)
