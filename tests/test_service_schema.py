"""A bounded schemathesis run against /openapi.json: no 5xx, answers match the schema.

Every operation gets a few generated requests, valid and invalid. Bounded by example count
and a per-operation time limit, so it stays a few seconds on two cores.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.config import Settings

# Small limits so that generated bodies also reach the 413 paths.
APP = create_app(Settings(max_body_bytes=64 * 1024, max_tensor_elements=4096))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_schema_valid_answers(case):
    case.call_and_validate(checks=CHECKS)
