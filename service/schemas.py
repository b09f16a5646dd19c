"""The wire format: pydantic models of every request and response body.

Models check structure and types only; the meaning (a pad larger than the kernel, an unknown
target) is the library's to judge, so its messages reach the client unchanged. Problems are
always nested under ``"problem"`` in the shape of ``ConvProblem.to_dict()``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SkipValidation


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- requests -----------------------------------------------------------------------------

class ActivationIn(_In):
    """A fused activation as a dict; a string such as ``"bounded_relu(6)"`` works too."""

    kind: str = Field(description="relu, bounded_relu, lu_bounded_relu, leaky_relu, linear, "
                      "logistic, tanh, elu, swish, hard_swish, abs or identity")
    a: float | None = None
    b: float | None = None


class ProblemIn(_In):
    """One convolution in logical sizes (``ConvProblem.to_dict()``); defaults as the library's.

    ``stride``/``dilation``: an int or ``[y, x]``; ``pad``: an int, ``[py, px]`` or
    ``[top, bottom, left, right]``; ``dtype``: F32, F16, QASYMM8, QASYMM8_SIGNED;
    ``layout``: NHWC or NCHW.
    """

    n: int
    h: int
    w: int
    c: int
    k: int
    kh: int
    kw: int
    # int defaults (the library widens them): a list default is deep-copied per request.
    stride: int | list[int] = 1
    pad: int | list[int] = 0
    dilation: int | list[int] = 1
    groups: int = 1
    dtype: str = "F32"
    layout: str = "NHWC"
    fast_math: bool = False
    activation: ActivationIn | str | None = None


_POLICY = Field("acl", description="acl (ACL's rules) or measured (the tuning database, "
                "when this server has one)")
_TARGET = Field(None, description="cpu, cpu-nofp16, a Mali model (G77), a family or a device "
                "name; default: the server's CONVSEL_DEFAULT_TARGET")


class SelectRequest(_In):
    problem: ProblemIn
    target: str | None = _TARGET
    policy: str = _POLICY
    backend: str | None = Field(None, description="policy=measured only: numpy or opencl")
    device: str | None = Field(None, description="policy=measured only: OpenCL device")


class SelectBatchRequest(_In):
    """Many problems, one target: a whole network. Items are checked one by one, so one bad
    item gives an error entry at its index instead of failing the batch."""

    problems: list[SkipValidation[ProblemIn]]
    target: str | None = _TARGET
    policy: str = _POLICY
    backend: str | None = None
    device: str | None = None


class Conv2dRequest(_In):
    """A convolution to run. Tensors are base64 of ``.npy`` bytes in the problem's layout and
    dtype (float32 for F32, float16 for F16); weights in ``weights_layout``."""

    problem: ProblemIn
    x: str = Field(description="input, base64 of .npy bytes")
    w: str = Field(description="weights, base64 of .npy bytes")
    bias: str | None = Field(None, description="K values, base64 of .npy bytes")
    algorithm: str = Field("auto", description="auto (what select() chooses) or direct, "
                           "im2col_gemm, gemm_1x1, winograd, indirect_gemm, fft")
    backend: str | None = Field(None, description="numpy or opencl; default: the server's")
    target: str | None = _TARGET
    weights_layout: str = Field("OHWI", description="OHWI, OIHW or HWIO")
    policy: str = _POLICY


# The multipart form of the same request: tensors as .npy file parts, ``problem`` as JSON text.
CONV2D_FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["problem", "x", "w"],
    "properties": {
        "problem": {"type": "string", "description": "the problem as JSON text"},
        "x": {"type": "string", "format": "binary", "description": ".npy file"},
        "w": {"type": "string", "format": "binary", "description": ".npy file"},
        "bias": {"type": "string", "format": "binary", "description": ".npy file"},
        **{name: {"type": "string"} for name in
           ("algorithm", "backend", "target", "weights_layout", "policy")},
    },
}


# ---- responses ----------------------------------------------------------------------------

class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every error: a stable ``code``, the ``message``, and the field, value and rule at fault
    when one is known; ``errors`` lists each field of a request that failed validation."""

    code: str
    message: str
    field: str | None = None
    value: Any = None
    rule: str | None = None
    errors: list[FieldError] | None = None


class ActivationOut(BaseModel):
    kind: str
    a: float
    b: float


class ProblemOut(BaseModel):
    """The problem as the library normalised it."""

    n: int
    h: int
    w: int
    c: int
    k: int
    kh: int
    kw: int
    stride: list[int]
    pad: list[int]
    dilation: list[int]
    groups: int
    dtype: str
    layout: str
    fast_math: bool
    activation: ActivationOut | None


class TraceStepOut(BaseModel):
    id: str
    fired: bool
    reason: str


class CandidateOut(BaseModel):
    method: str
    algorithm: str
    valid: bool
    reason: str


class RulesRef(BaseModel):
    version: str
    digest: str


class SelectResponse(BaseModel):
    """``Selection.to_dict()`` plus the normalised problem."""

    problem: ProblemOut
    method: str
    algorithm: str
    rule: str
    reason: str
    target: str
    policy: str
    source: str
    params: dict[str, Any]
    fallback: str | None
    measurement: dict[str, Any] | None
    trace: list[TraceStepOut]
    candidates: list[CandidateOut]
    rules: RulesRef


class BatchItem(BaseModel):
    index: int
    selection: SelectResponse | None = None
    error: ErrorBody | None = None


class SelectBatchResponse(BaseModel):
    results: list[BatchItem]
    count: int
    failed: int


class Conv2dResponse(BaseModel):
    y: str = Field(description="output, base64 of .npy bytes, in the problem's layout")
    shape: list[int]
    dtype: str
    method: str
    algorithm: str
    backend: str = Field(description="the backend that ran it (numpy after a fallback)")
    params: dict[str, Any]
    fallback: str | None = Field(description="why what ran differs from what was asked")
    time_ms: float = Field(description="prepare + run on the server, without (de)coding")


class TargetOut(BaseModel):
    name: str
    kind: str
    arch: str
    value: int
    fp16: bool


class TargetsResponse(BaseModel):
    default: str
    targets: list[TargetOut]


class AlgorithmOut(BaseModel):
    algorithm: str
    methods: list[str]
    backends: list[str]


class MethodOut(BaseModel):
    method: str
    algorithms: list[str]


class MethodsResponse(BaseModel):
    methods: list[MethodOut]
    algorithms: list[AlgorithmOut]


class BackendOut(BaseModel):
    name: str
    available: bool
    reason: str
    implements: list[str]
    describe: dict[str, Any] | None = Field(
        None, description="the backend's describe(): devices, counters; null if it has none")
    describe_error: str | None = None


class BackendsResponse(BaseModel):
    default: str
    backends: list[BackendOut]


class RulesResponse(BaseModel):
    version: str
    digest: str
    source: str
    rules: dict[str, Any]


class HealthResponse(BaseModel):
    status: str


class ReadyResponse(BaseModel):
    ready: bool
    detail: dict[str, dict[str, Any]] = Field(
        description="one entry per component (rules, backends, routers' own checks)")
