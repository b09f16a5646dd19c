"""Fused activations, with ACL's names and parameter meanings (``ActivationLayerInfo``).

An activation is data: a kind and up to two parameters ``a`` and ``b``. The numpy forms below
are the definition every backend is tested against.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidProblemError

Array = np.ndarray


def _sigmoid(x: Array) -> Array:
    # Clipping keeps exp() finite in float32 without changing the result at float precision.
    out: Array = 1.0 / (1.0 + np.exp(-np.clip(x, -88.0, 88.0)))
    return out


@dataclass(frozen=True)
class _Kind:
    params: tuple[str, ...]          # names of the parameters this kind reads, in order
    defaults: tuple[float, ...]      # ACL's defaults when a parameter is omitted
    fn: Callable[[Array, float, float], Array]
    doc: str


KINDS: dict[str, _Kind] = {
    "relu": _Kind((), (), lambda x, a, b: np.maximum(x, 0), "max(0, x)"),
    "bounded_relu": _Kind(("a",), (6.0,), lambda x, a, b: np.minimum(np.maximum(x, 0), a),
                          "min(a, max(0, x))"),
    "lu_bounded_relu": _Kind(("a", "b"), (6.0, 0.0),
                             lambda x, a, b: np.minimum(np.maximum(x, b), a),
                             "min(a, max(b, x))"),
    "leaky_relu": _Kind(("a",), (0.01,), lambda x, a, b: np.where(x > 0, x, a * x),
                        "x if x > 0 else a*x"),
    "linear": _Kind(("a", "b"), (1.0, 0.0), lambda x, a, b: a * x + b, "a*x + b"),
    "logistic": _Kind((), (), lambda x, a, b: _sigmoid(x), "1 / (1 + exp(-x))"),
    "tanh": _Kind(("a", "b"), (1.0, 1.0), lambda x, a, b: a * np.tanh(b * x), "a*tanh(b*x)"),
    "elu": _Kind(("a",), (1.0,),
                 lambda x, a, b: np.where(x > 0, x, a * np.expm1(np.minimum(x, 0))),
                 "x if x > 0 else a*(exp(x) - 1)"),
    "swish": _Kind(("a",), (1.0,), lambda x, a, b: x * _sigmoid(a * x), "x * sigmoid(a*x)"),
    "hard_swish": _Kind((), (), lambda x, a, b: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
                        "x * relu6(x + 3) / 6"),
    "abs": _Kind((), (), lambda x, a, b: np.abs(x), "|x|"),
}

_CALL = re.compile(r"^\s*([a-z_]+)\s*(?:\(\s*([^)]*)\))?\s*$")


@dataclass(frozen=True)
class Activation:
    """A fused activation: ``kind`` from :data:`KINDS` with parameters ``a`` and ``b``."""

    kind: str
    a: float = 0.0
    b: float = 0.0

    def __str__(self) -> str:
        names = KINDS[self.kind].params
        values = [self.a, self.b][: len(names)]
        return f"{self.kind}({', '.join(f'{v:g}' for v in values)})" if names else self.kind

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "a": self.a, "b": self.b}

    def apply(self, x: Array) -> Array:
        """Return the activation of ``x`` (same dtype as ``x``)."""
        return KINDS[self.kind].fn(x, self.a, self.b).astype(x.dtype, copy=False)


def parse_activation(value: Any, field: str = "activation") -> Activation | None:
    """Normalise None, 'relu', 'bounded_relu(6)', a dict or an Activation; None means identity."""
    if value is None or isinstance(value, Activation):
        return value
    if isinstance(value, dict):
        return _from_parts(field, value, value.get("kind"), _dict_args(field, value))
    if isinstance(value, str):
        match = _CALL.match(value.lower())
        if not match:
            raise InvalidProblemError(field, value, "expected a name such as 'relu' or "
                                      "'bounded_relu(6)'")
        args = [a for a in (match.group(2) or "").split(",") if a.strip()]
        return _from_parts(field, value, match.group(1), args)
    raise InvalidProblemError(field, value, "expected None, a string or a dict with 'kind'")


def _dict_args(field: str, value: dict[str, Any]) -> list[Any]:
    unknown = set(value) - {"kind", "a", "b"}
    if unknown:
        raise InvalidProblemError(field, value, f"unknown keys {sorted(unknown)}; "
                                  "allowed: kind, a, b")
    kind = KINDS.get(str(value.get("kind", "")).lower())
    names = kind.params if kind else ("a", "b")
    return [value[name] for name in names if name in value]


def _from_parts(field: str, raw: Any, kind_name: Any, args: list[Any]) -> Activation | None:
    name = str(kind_name or "").strip().lower()
    if name in ("identity", "none", ""):
        return None
    kind = KINDS.get(name)
    if kind is None:
        raise InvalidProblemError(field, raw, f"unknown activation kind {name!r}; known: "
                                  f"identity, {', '.join(sorted(KINDS))}")
    if len(args) > len(kind.params):
        raise InvalidProblemError(field, raw, f"{name} takes {len(kind.params)} parameter(s) "
                                  f"({', '.join(kind.params) or 'none'})")
    values = list(kind.defaults)
    for i, arg in enumerate(args):
        try:
            values[i] = float(arg)
        except (TypeError, ValueError):
            raise InvalidProblemError(field, raw, f"parameter {kind.params[i]!r} must be a "
                                      f"number, got {arg!r}") from None
        if not math.isfinite(values[i]):
            raise InvalidProblemError(field, raw, f"parameter {kind.params[i]!r} must be finite")
    a, b = (values + [0.0, 0.0])[:2]
    if name == "lu_bounded_relu" and b > a:
        raise InvalidProblemError(field, raw,
                                  "lu_bounded_relu needs lower bound b <= upper bound a")
    return Activation(name, a, b)
