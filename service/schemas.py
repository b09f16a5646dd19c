"""The wire format: pydantic models of every request and response body.

Requests are strict and bounded: sizes are JSON integers in a stated range (``true`` and
``"8"`` are refused, not coerced), names are enums, lists have maximum lengths. That is the
wire's own contract, stated in OpenAPI. What a valid problem *means* (a pad larger than the
kernel, a target the rules do not know) is the library's to judge, so its messages reach the
client unchanged. Problems are nested under ``"problem"`` in the shape of
``ConvProblem.to_dict()``; :data:`ProblemIn` is generated from ConvProblem's own fields.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    Tag,
    WithJsonSchema,
    create_model,
    model_validator,
)

from convsel import algorithms, backends, learn
from convsel.activation import KINDS
from convsel.layouts import WEIGHTS_LAYOUTS
from convsel.policies import POLICIES, POLICY_OPTIONS
from convsel.problem import DTYPES, FLOAT_DTYPES, LAYOUTS, ConvProblem

MAX_SIZE = 1 << 16       # the largest size, stride, pad, dilation or group count accepted
MAX_NAME = 128           # target, device and other free-text names
# Marks a field whose schema the app fills in from its rules and settings (service.openapi).
TARGET_FIELD = {"x-convsel": "target"}
BATCH_FIELD = {"x-convsel": "batch"}


def _enum(values: Any) -> Any:
    """``Literal[...]`` of a registry's names: the schema's enum and the wire's check."""
    return Literal[tuple(values)]


MAX_UNKNOWN_KEYS = 16


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _few_unknown_keys(cls, data: Any) -> Any:
        # pydantic reports every unknown key as its own error: an object with 50,000 keys
        # would build 100 MB of errors. Past a few, one error says how many.
        if isinstance(data, dict) and len(data) > len(cls.model_fields) + MAX_UNKNOWN_KEYS:
            unknown = [k for k in data if k not in cls.model_fields]
            raise ValueError(f"{len(unknown)} unknown fields (first: {unknown[0][:40]!r}); "
                             f"known: {', '.join(cls.model_fields)}")
        return data


# ---- the problem, generated from ConvProblem ------------------------------------------------

def _one_of(members: dict[str, Any], pick: Any) -> Any:
    """A union whose member is picked from the input's JSON type, so an error speaks of the
    form that was sent only. Tags start with "as-": service.errors drops them from locations."""
    tagged = tuple(Annotated[t, Tag(name)] for name, t in members.items())
    return Annotated[Union[tagged], Discriminator(pick)]  # noqa: UP007


def _number_or_list(value: Any) -> str:
    return "as-list" if isinstance(value, list) else "as-int"


def _pad_form(value: Any) -> str:
    return ("as-quad" if len(value) == 4 else "as-pair") if isinstance(value, list) else "as-int"


def _activation_form(value: Any) -> str:
    return "as-object" if isinstance(value, (dict, BaseModel)) else "as-name"


def integral(value: Any) -> Any:
    # JSON Schema's "integer" is any number without a fraction: 8.0 is 8. Never a bool or text.
    return int(value) if isinstance(value, float) and value.is_integer() else value


# (The range before the validator: pydantic then states it as minimum/maximum in the schema.)
Size = Annotated[StrictInt, Field(ge=1, le=MAX_SIZE), BeforeValidator(integral)]
PadSize = Annotated[StrictInt, Field(ge=0, le=MAX_SIZE), BeforeValidator(integral)]
Pair = Annotated[list[Size], Field(min_length=2, max_length=2)]
PadPair = Annotated[list[PadSize], Field(min_length=2, max_length=2)]
PadQuad = Annotated[list[PadSize], Field(min_length=4, max_length=4)]
ActivationKind = _enum(["identity", *KINDS])
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]


def _activation_pattern() -> str:
    """What ``convsel.activation.parse_activation`` reads from text: a kind, any case, with at
    most as many numeric parameters as the kind takes (ASCII digits, exponents of two digits:
    finite floats). One regex, valid alike in pydantic's engine and JSON Schema's."""
    number = r"[+-]?([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})([eE][+-]?[0-9]{1,2})?"
    forms = []
    for name, params in [("identity", 0), ("none", 0),
                         *((name, len(kind.params)) for name, kind in KINDS.items())]:
        args = (rf"\(\s*({number}(\s*,\s*{number}){{0,{params - 1}}})?\s*\)" if params
                else r"\(\s*\)")
        forms.append(f"{_any_case(name)}\\s*({args})?")
    return rf"^\s*({'|'.join(forms)})\s*$"


def _any_case(name: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in name)


ActivationText = Annotated[str, Field(max_length=64, pattern=_activation_pattern())]


class ActivationIn(_In):
    """A fused activation as a dict; a string such as ``"bounded_relu(6)"`` works too."""

    kind: ActivationKind  # type: ignore[valid-type]
    a: Number | None = None
    b: Number | None = None


# ConvProblem's annotation -> the wire's type for it. A new ConvProblem field with a type not
# listed here fails at import, so the wire cannot silently miss it.
_WIRE_TYPES: dict[str, Any] = {
    "int": Size,
    "tuple[int, int]": _one_of({"as-int": Size, "as-list": Pair}, _number_or_list),
    "tuple[int, int, int, int]": _one_of({"as-int": PadSize, "as-pair": PadPair,
                                          "as-quad": PadQuad}, _pad_form),
    "bool": StrictBool,
    "Activation | None": _one_of({"as-object": ActivationIn, "as-name": ActivationText},
                                 _activation_form) | None,
}
# str fields are names: their enums.
_WIRE_ENUMS: dict[str, Any] = {"dtype": _enum(DTYPES), "layout": _enum(LAYOUTS)}
_DOCS = {"stride": "an int or [y, x]", "dilation": "an int or [y, x]",
         "pad": "an int, [py, px] or [top, bottom, left, right]",
         "activation": "null (identity), a name such as 'relu' or 'bounded_relu(6)', or "
         "{kind, a, b}"}


def _wire_default(value: Any) -> Any:
    # The wire takes an int for a uniform pair: show that, not the library's tuple.
    if isinstance(value, tuple) and value and len(set(value)) == 1:
        return value[0]
    return value


def _problem_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(ConvProblem):
        wire = _WIRE_ENUMS.get(f.name) or _WIRE_TYPES.get(str(f.type))
        if wire is None:
            raise TypeError(f"ConvProblem.{f.name}: no wire type for {f.type!r}; add one to "
                            "service.schemas._WIRE_TYPES")
        description = _DOCS.get(f.name)
        if f.default is dataclasses.MISSING:
            fields[f.name] = (wire, Field(description=description))
        else:
            fields[f.name] = (wire, Field(_wire_default(f.default), description=description))
    return fields


ProblemIn = create_model(  # type: ignore[call-overload]
    "ProblemIn", __base__=_In, __module__=__name__,
    __doc__="One convolution in logical sizes (ConvProblem's fields; defaults as the "
    f"library's). Sizes are integers 1..{MAX_SIZE}, pads 0..{MAX_SIZE}.",
    **_problem_fields())


RunnableProblemIn = create_model(  # type: ignore[call-overload]
    "RunnableProblemIn", __base__=ProblemIn, __module__=__name__,
    __doc__="A problem this server can run, time or tune: as ProblemIn, in "
    f"{' or '.join(FLOAT_DTYPES)} (the other dtypes are selection-only).",
    dtype=(_enum(FLOAT_DTYPES), Field(FLOAT_DTYPES[0])))


# ---- requests -------------------------------------------------------------------------------

Policy = _enum(POLICIES)
Backend = _enum(backends.BACKENDS)
ModelFamily = _enum(learn.model_families())
MAX_BACKENDS = 8   # entries of a backend list: more than any host has backends and devices
_BACKEND_LIST_DOC = (f"one backend ({', '.join(backends.BACKENDS)}; opencl:1 names a device "
                     "by index, as GET /v1/backends lists them), several in order of "
                     "preference (a list, or 'opencl,numpy'), or 'auto' (every backend this "
                     "server has); the library judges the names")
# What convsel.arguments.backends reads (a name, name:device-index, a comma list, or auto);
# naming one twice, or a device this server lacks, is the library's to refuse.
_PLACEMENT = rf"\s*({'|'.join(backends.BACKENDS)})(:\d+)?\s*"
_BACKEND_TEXT = {"type": "string", "maxLength": MAX_NAME,
                 "pattern": rf"^(\s*auto\s*|{_PLACEMENT}(,{_PLACEMENT})*)$"}
_BACKEND_ITEM = {"type": "string", "maxLength": MAX_NAME, "pattern": rf"^{_PLACEMENT}$"}


def _backend_list(value: Any) -> str | list[str]:
    """The shape of a backend argument (the names are the library's to judge): one string,
    or a list of 1 to MAX_BACKENDS strings, each at most MAX_NAME characters. One check and
    one error at ``body.backend``, where a union would report each of its members."""
    names = value if isinstance(value, list) and 0 < len(value) <= MAX_BACKENDS else [value]
    if all(isinstance(n, str) and len(n) <= MAX_NAME for n in names):
        return list(value) if isinstance(value, list) else str(value)
    raise ValueError(f"expected a backend name (at most {MAX_NAME} characters) or a list of "
                     f"1 to {MAX_BACKENDS} of them")


# A backend argument as the library reads it (convsel.arguments.backends).
BackendList = Annotated[Union[str, list[str]],  # noqa: UP007 - a runtime type for pydantic
                        PlainValidator(_backend_list), WithJsonSchema({"anyOf": [
                            _BACKEND_TEXT, {"type": "array", "items": _BACKEND_ITEM,
                                            "minItems": 1, "maxItems": MAX_BACKENDS,
                                            "uniqueItems": True}]})]
Algorithm = _enum(["auto", *algorithms.ALGORITHMS])
_POLICY = Field("acl", description="who decides (convsel.policies): acl answers with ACL's "
                "rules; measured with the tuning database's timings where it has them")
_TARGET = Field(None, max_length=MAX_NAME, json_schema_extra=TARGET_FIELD,
                description="cpu, cpu-nofp16, a Mali model (G77) or a Mali device name; "
                "default: the server's CONVSEL_DEFAULT_TARGET")
_DEVICE = Field(None, max_length=MAX_NAME, description="policy=measured only: OpenCL device")
_ALGORITHMS_DOC = "auto (what the policy chooses) or one of: " + "; ".join(
    f"{name}: {spec.description}" for name, spec in algorithms.SPECS.items())


def _options_only_with_policies_taking_them(*options: str) -> dict[str, Any]:
    """JSON Schema for "an option is given only with a policy that takes it" (the library
    refuses ``device`` with policy acl): for each option, the policy is one of its takers
    (``convsel.policies.POLICY_OPTIONS``), or the option is absent or null."""
    rules = []
    for option in options:
        takers = [name for name in POLICIES if option in POLICY_OPTIONS[name]]
        rules.append({"anyOf": [
            {"required": ["policy"], "properties": {"policy": {"enum": takers}}},
            {"properties": {option: {"type": "null"}}}]})
    return {"allOf": rules}


class SelectRequest(_In):
    model_config = ConfigDict(
        json_schema_extra=_options_only_with_policies_taking_them("backend", "device"))

    problem: ProblemIn  # type: ignore[valid-type]
    target: str | None = _TARGET
    policy: Policy = _POLICY  # type: ignore[valid-type]
    backend: BackendList | None = Field(
        None, description="policy=measured or predicted only: whose timings or model; "
        "several are compared and the answer names the fastest: " + _BACKEND_LIST_DOC)
    device: str | None = _DEVICE


class SelectBatchRequest(_In):
    """Many problems, one target: a whole network. The batch is refused whole when an item
    is malformed (422) or there are too many (413); a well-formed problem that the library
    refuses (a pad too large, ...) gives an error entry at its index."""

    model_config = ConfigDict(
        json_schema_extra=_options_only_with_policies_taking_them("backend", "device"))

    problems: list[ProblemIn] = Field(  # type: ignore[valid-type]
        json_schema_extra=BATCH_FIELD, description="at most CONVSEL_MAX_BATCH_SIZE problems")
    target: str | None = _TARGET
    policy: Policy = _POLICY  # type: ignore[valid-type]
    backend: BackendList | None = Field(None, description="as in SelectRequest")
    device: str | None = _DEVICE


# What service.npy decodes (RFC 4648, standard alphabet, padded), stated for clients; the
# decoder checks it (and then the .npy inside), not the wire: a regex over 32 MiB of text
# would be the same check twice.
_BASE64 = {"pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"}


class Conv2dRequest(_In):
    """A convolution to run. Tensors are base64 of ``.npy`` bytes in the problem's layout and
    dtype (float32 for F32, float16 for F16); weights in ``weights_layout``."""

    problem: RunnableProblemIn  # type: ignore[valid-type]
    x: str = Field(description="input, base64 of .npy bytes", json_schema_extra=_BASE64)
    w: str = Field(description="weights, base64 of .npy bytes", json_schema_extra=_BASE64)
    bias: str | None = Field(None, description="K values, base64 of .npy bytes",
                             json_schema_extra=_BASE64)
    algorithm: Algorithm = Field("auto", description=_ALGORITHMS_DOC)  # type: ignore[valid-type]
    backend: BackendList | None = Field(
        None, description="where it runs (default: the server's): the first that supports "
        "the chosen algorithm, the others passed over with why; " + _BACKEND_LIST_DOC)
    target: str | None = _TARGET
    weights_layout: _enum(WEIGHTS_LAYOUTS) = "OHWI"  # type: ignore[valid-type]
    policy: Policy = _POLICY  # type: ignore[valid-type]


def _text_part(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "string", **{k: v for k, v in schema.items() if k in ("enum", "maxLength")}}


# The multipart form of the same request: tensors as .npy file parts, ``problem`` as JSON text.
_CONV_FIELDS = Conv2dRequest.model_json_schema()["properties"]
CONV2D_FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["problem", "x", "w"],
    "additionalProperties": False,
    "properties": {
        # an object part is sent as JSON text (CONV2D_FORM_ENCODING)
        "problem": {"$ref": "#/components/schemas/RunnableProblemIn"},
        "x": {"type": "string", "format": "binary", "description": ".npy file"},
        "w": {"type": "string", "format": "binary", "description": ".npy file"},
        "bias": {"type": "string", "format": "binary", "description": ".npy file"},
        "algorithm": _text_part(_CONV_FIELDS["algorithm"]),
        "backend": {**_BACKEND_TEXT, "description": _BACKEND_LIST_DOC},
        "target": {"type": "string", "maxLength": MAX_NAME},
        "weights_layout": _text_part(_CONV_FIELDS["weights_layout"]),
        "policy": _text_part(_CONV_FIELDS["policy"]),
    },
}
CONV2D_FORM_ENCODING = {"problem": {"contentType": "application/json"}}


# ---- responses ------------------------------------------------------------------------------

class FieldError(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every error: a stable ``code``, the ``message``, and the field, value and rule at fault
    when one is known; ``errors`` lists the first fields of a request that failed validation.
    Messages and values are cut to a bounded length: an error never echoes a whole body."""

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
    backend: str | None = Field(None, description="where it runs, when the policy chose "
                                "among several backends")
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
    passed_over: list[str] = Field([], description="each backend of the list that did not "
                                   "run it, with why")
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
    description: str
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
    capabilities: dict[str, Any] | None = Field(
        None, description="convsel.backends.capabilities(): dtypes, device-resident arrays, "
        "and per device its index, F16 mode, fp64, tensor cores")


class BackendsResponse(BaseModel):
    default: str
    backends: list[BackendOut]


class RulesResponse(BaseModel):
    version: str
    digest: str
    source: str = Field(description="'packaged' or 'custom'; the file's path with "
                        "CONVSEL_SHOW_PATHS=1")
    rules: dict[str, Any]


class HealthResponse(BaseModel):
    status: str


class ReadyResponse(BaseModel):
    ready: bool
    detail: dict[str, dict[str, Any]] = Field(
        description="one entry per component (rules, backends, routers' own checks)")
