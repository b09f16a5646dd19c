"""schemathesis against /openapi.json on every route, both ways, bounded in time.

Positive cases (requests the schema allows) must not be refused by the wire: no 415 and no
``validation_error`` 422. A schema-valid request may still be refused by the library's own
judgement (a pad larger than the kernel: ``invalid_problem``; a name the rules do not know) or
by an operational limit (413, 503): JSON Schema cannot state those. Negative cases (requests
the schema forbids) must be refused with a 4xx. Every answer: no 5xx, a status, content type
and body that the schema documents.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config._checks import (
    NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES,
    NegativeDataRejectionConfig,
)
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.config import Settings

# Small limits so that generated bodies also reach the 413 paths, and tuning stays tiny.
APP = create_app(Settings(max_select_body_bytes=2048, max_body_bytes=4096,
                          max_conv_body_bytes=64 * 1024, max_model_bytes=16 * 1024,
                          max_tensor_elements=4096, max_conv_flops=200_000,
                          max_batch_size=8, max_tune_seconds=0.05))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                                max_examples=10, deterministic=True)
# A schema-violating request refused for its size (413: too many batch items) is refused.
schema.config.checks.negative_data_rejection = NegativeDataRejectionConfig(
    expected_statuses=[*NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES, "413"])
# What the wire itself refuses: a schema-valid request must never get these.
WIRE_REFUSALS = {415: None, 422: "validation_error", 400: None}


def wire_accepts_positive_data(ctx, response, case):
    """A request the schema allows is never refused by the wire's own checks."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    status = response.status_code
    if status in WIRE_REFUSALS:
        code = response.json().get("code") if status != 400 else None
        expected = WIRE_REFUSALS[status]
        if expected is None or code == expected:
            raise AssertionError(f"schema-valid request refused by the wire: {status} "
                                 f"{response.text[:300]}")
    return None


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, negative_data_rejection, wire_accepts_positive_data]


@pytest.fixture(autouse=True)
def tuning_db(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "tuning.sqlite"))


@schema.parametrize()
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_every_route_both_ways(case):
    case.call_and_validate(checks=CHECKS)
