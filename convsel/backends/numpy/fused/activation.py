"""Activations applied in place on a cache-hot row, inside a fused kernel.

The definitions are :data:`convsel.activation.KINDS`'s, in float32, NaN-propagating as
numpy's ``maximum``/``minimum`` are (a comparison that is false for NaN keeps ``v``). A
kind's code is an int so the kernels take it as a plain argument; the branch on it is
outside each loop, so every loop vectorises.
"""

from __future__ import annotations

import numpy as np

from ....activation import Activation
from . import jit

CODES = {kind: i + 1 for i, kind in enumerate((
    "relu", "bounded_relu", "lu_bounded_relu", "leaky_relu", "linear", "logistic", "tanh",
    "elu", "swish", "hard_swish", "abs"))}


def code_of(activation: Activation | None) -> tuple[int, np.float32, np.float32]:
    """(code, a, b) for the kernels; code 0 is the identity."""
    if activation is None:
        return 0, np.float32(0.0), np.float32(0.0)
    return CODES[activation.kind], np.float32(activation.a), np.float32(activation.b)


@jit()
def _sigmoid(v: np.float32) -> np.float32:
    t = -v
    t = np.float32(88.0) if t > np.float32(88.0) else t     # exp() stays finite in float32
    t = np.float32(-88.0) if t < np.float32(-88.0) else t
    return np.float32(1.0) / (np.float32(1.0) + np.exp(t))  # type: ignore[no-any-return]


@jit()
def activate(row: np.ndarray, code: int, a: np.float32, b: np.float32) -> None:
    """``row[:] = f(row)`` for the activation ``code`` with parameters ``a``, ``b``."""
    zero = np.float32(0.0)
    if code == 0:
        return
    if code == 1:        # relu: max(0, x)
        for i in range(row.size):
            v = row[i]
            row[i] = zero if v < zero else v
    elif code == 2:      # bounded_relu: min(a, max(0, x))
        for i in range(row.size):
            v = row[i]
            v = zero if v < zero else v
            row[i] = a if v > a else v
    elif code == 3:      # lu_bounded_relu: min(a, max(b, x))
        for i in range(row.size):
            v = row[i]
            v = b if v < b else v
            row[i] = a if v > a else v
    elif code == 4:      # leaky_relu: x if x > 0 else a*x
        for i in range(row.size):
            v = row[i]
            row[i] = v if v > zero else a * v
    elif code == 5:      # linear: a*x + b
        for i in range(row.size):
            row[i] = a * row[i] + b
    elif code == 6:      # logistic
        for i in range(row.size):
            row[i] = _sigmoid(row[i])
    elif code == 7:      # tanh: a*tanh(b*x)
        for i in range(row.size):
            row[i] = a * np.tanh(b * row[i])
    elif code == 8:      # elu: x if x > 0 else a*(exp(x) - 1)
        for i in range(row.size):
            v = row[i]
            row[i] = v if v > zero else a * np.expm1(v)   # v <= 0 (or NaN) here
    elif code == 9:      # swish: x * sigmoid(a*x)
        for i in range(row.size):
            v = row[i]
            row[i] = v * _sigmoid(a * v)
    elif code == 10:     # hard_swish: x * relu6(x + 3) / 6
        for i in range(row.size):
            v = row[i]
            t = v + np.float32(3.0)
            t = zero if t < zero else t
            t = np.float32(6.0) if t > np.float32(6.0) else t
            row[i] = v * t / np.float32(6.0)
    elif code == 11:     # abs
        for i in range(row.size):
            row[i] = np.abs(row[i])
    else:
        row[:] = np.float32(np.nan)   # an unknown code: poison rather than guess
