"""schemathesis against /openapi.json on every route, both ways, bounded in time.

Positive cases (requests the schema allows) must be accepted (schemathesis' ST202): no 4xx
but an operational limit's (413, 503) and the few judgements JSON Schema cannot state, listed
one by one in :data:`SCHEMA_CANNOT_STATE`; in particular never the wire's own refusals (415,
``validation_error`` 422). Negative cases (requests the schema forbids) must be refused with a
4xx. Every answer: no 5xx, a status, content type and body that the schema documents.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config._checks import (
    NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES,
    POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES,
    NegativeDataRejectionConfig,
    PositiveDataAcceptanceConfig,
)
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
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
# A schema-valid request refused for an operational limit (413: a batch over the server's
# size; 503: busy) is accepted as far as the schema goes.
schema.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(
    expected_statuses=[*POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES, "413", "503"])
# What JSON Schema cannot state, each refusal by (operation, status, field: an fnmatch pattern)
# and parts of its
# rule: what uploaded bytes hold, one field against another, and the OpenCL devices this
# server has. Any other refusal of a schema-valid request is a looseness of the schema.
RUN = ("POST /v1/select", "POST /v1/select/batch", "POST /v1/conv2d", "POST /v1/tune",
       "POST /v1/find", "POST /v1/fit")
UPLOAD = "POST /v1/tuning/entries"
DEVICES = ("out of range", "name contains")   # no such OpenCL platform or device here
SCHEMA_CANNOT_STATE = {
    ("POST /v1/plan", 422, "model"): ("not an ONNX model",),
    **{("POST /v1/conv2d", 422, part): ("not a .npy array",) for part in ("x", "w", "bias")},
    **{(op, 422, field): rules for op in RUN for field, rules in [
        ("problem.h/w", ("smaller than the dilated kernel extent",)),
        ("problem.pad", ("each pad must be smaller than the dilated kernel extent",)),
        ("problem.groups", ("divide c=",)),
        ("problem.activation", ("lower bound b <= upper bound a",)),
        # " numpy" and "numpy", or "opencl:01" and "opencl:1", are one backend
        ("backend", ("names a backend twice", *DEVICES)),
        ("device", ("the backend argument names the device already", *DEVICES))]},
    # An upload's entry (reported as entries.<index>.<field>): a label against its algorithm,
    # parameters and problem, a winner or tie against the entry's timings, a time against
    # another or the server's clock, the entry's size, and Unicode's printable class.
    **{(UPLOAD, 422, f"entries.*.{field}"): rules for field, rules in [
        ("timings.*", ("the label of", "not a variant convsel")),
        ("timings.*.min_s", ("cannot be slower than the median",)),
        ("winner", ("a timed label of this entry", "the winner must be the fastest")),
        ("tie", ("a list of timed labels", "a winner or a tie", "a tie holds the fastest")),
        ("created", ("later than this server's clock",)),
        ("entry", ("bytes as JSON",)),
        ("*", ("printable characters only",)),
        ("problem.h/w", ("smaller than the dilated kernel extent",)),
        ("problem.pad", ("each pad must be smaller than the dilated kernel extent",)),
        ("problem.groups", ("divide c=",)),
        ("problem.activation", ("lower bound b <= upper bound a",))]},
}
# What the wire itself refuses: a schema-valid request must never get these.
WIRE_REFUSALS = {415: None, 422: "validation_error", 400: None}


def schema_valid_data_is_accepted(ctx, response, case):
    """ST202, but for the judgements listed in SCHEMA_CANNOT_STATE."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        body = response.json()
        field, rule = str(body.get("field")), body.get("rule") or ""
        for (operation, status, pattern), parts in SCHEMA_CANNOT_STATE.items():
            if (operation, status) == (case.operation.label, response.status_code) \
                    and fnmatchcase(field, pattern) and any(part in rule for part in parts):
                return None
        raise


def schema_violating_data_is_refused(ctx, response, case):
    """ST201, but an upload with partial=true refuses its bad entries one by one: a 200 whose
    report rejects some entry is that refusal (the body's schema cannot depend on the query)."""
    if case.operation.label == UPLOAD and str((case.query or {}).get("partial")).lower() \
            == "true" and response.status_code == 200 and response.json()["rejected"] > 0:
        return None
    return negative_data_rejection(ctx, response, case)


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
          response_schema_conformance, schema_violating_data_is_refused,
          wire_accepts_positive_data,
          schema_valid_data_is_accepted]


@pytest.fixture(autouse=True)
def tuning_db(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "tuning.sqlite"))


@schema.parametrize()
@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_every_route_both_ways(case):
    case.call_and_validate(checks=CHECKS)

