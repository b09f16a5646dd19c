"""A physically grounded cost model: each variant's time as a sum of work terms, each divided by
a throughput fitted on this device's own timings.

time = overhead + Σ_j c_j · term_j, with every c_j ≥ 0 (seconds per unit of work: an inverse
throughput or bandwidth, or a cost per call), fitted per variant in log space (relative error:
a 50 µs layer counts as much as a 50 ms one). The terms (:data:`TERMS`) come from what each
algorithm's home says it does (:mod:`convsel.algorithms.cost`: its arithmetic, the matrix
products it reduces the convolution to, its scratch memory, its work-group tiles), so a kind
of shape never timed is still priced by the same physics: a depthwise layer's per-group GEMMs
are tiny and many (per-call cost, operand traffic), a 1-channel layer's products have a
reduction of a few taps (operand traffic, not arithmetic), and a tile that covers a small map
with few work-groups pays its whole serial reduction. A sum of terms is a smooth maximum of
them: whichever bound dominates decides, as in a roofline.

Few non-negative parameters per variant: what trees cannot do (extrapolate along work), this
does, and what it cannot do (effects not linear in any term), :class:`.models.HybridModel`
adds from the residuals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .features import FEATURE_NAMES
from .models import ModelError, algorithm_of, linear_log_times

_COL = {name: i for i, name in enumerate(FEATURE_NAMES)}

# name -> what one unit of the term is; the coefficient is seconds per unit.
TERMS: dict[str, str] = {
    "fixed": "one launch (seconds)",
    "flops": "GFLOP of the algorithm's arithmetic (a tiled kernel's padded tiles included)",
    "padded_flops": "GFLOP of its matrix products with each side rounded up to 8 (a register "
                    "tile: a 1-column product runs at a fraction of the peak)",
    "moved": "GB of input, weights and output",
    "workspace": "GB of scratch memory",
    "operands": "GB its matrix products read and write, each call by itself (no reuse across "
                "calls: many small products are bound by memory, not arithmetic)",
    "calls": "thousand matrix products (per-call dispatch)",
    "serial": "GFLOP on the critical path: one work-group's tile over the whole reduction (few "
              "work-groups leave the device idle), or one output's reduction without tiles",
    "workgroups": "thousand work-groups (scheduling)",
}
# A variant with fewer timed shapes than this borrows its algorithm's coefficients.
MIN_ROWS = 12


def _pow10(x: np.ndarray, name: str) -> np.ndarray:
    out: np.ndarray = 10.0 ** x[:, _COL[name]]
    return out


def terms(x: np.ndarray) -> np.ndarray:
    """The :data:`TERMS` of each feature row, in their units (one column each)."""
    flops = _pow10(x, "log_alg_flops") / 1e9
    m, n = _pow10(x, "log_gemm_m"), _pow10(x, "log_gemm_n")
    k, calls = _pow10(x, "log_gemm_k"), _pow10(x, "log_gemm_calls")
    fill = x[:, _COL["tile_fill"]]
    tiled = fill > 0
    tm, tn = x[:, _COL["tile_y"]], x[:, _COL["tile_x"]]
    padded = calls * 2.0 * np.ceil(m / 8) * 8 * np.ceil(n / 8) * 8 * k / 1e9
    serial_tiled = 2.0 * tm * tn * k / 1e9
    serial_plain = 2.0 * _pow10(x, "log_reduction") / 1e9
    columns = {
        "fixed": np.ones(len(x)),
        "flops": np.where(tiled, flops / np.where(tiled, fill, 1.0), flops),
        "padded_flops": np.where(tiled, 0.0, padded),
        "moved": _pow10(x, "log_bytes") / 1e9,
        "workspace": (_pow10(x, "log_workspace") - 1.0) / 1e9,
        "operands": calls * (m * k + k * n + m * n) * 4.0 / 1e9,
        "calls": calls / 1e3,
        "serial": np.where(tiled, serial_tiled, serial_plain),
        "workgroups": np.where(tiled, _pow10(x, "log_workgroups") / 1e3, 0.0),
    }
    return np.column_stack([columns[name] for name in TERMS])


def fit_coefficients(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative ``c`` minimising Σ (log(a @ c) - y)²: relative error, the bounds kept.

    Started from the non-negative least squares on relative error (rows scaled by 1 / time),
    whose answer is close and never leaves a row at zero predicted time."""
    from scipy.optimize import least_squares, nnls

    t = np.exp(y)
    scale = np.maximum(np.abs(a).max(axis=0), 1e-30)   # columns of unit size: well posed
    b = a / scale
    start, _ = nnls(b / t[:, None], np.ones(len(t)))
    floor = 1e-6 * max(float(np.median(t)), 1e-12)
    start = np.maximum(start, floor)

    def residual(c: np.ndarray) -> np.ndarray:
        out: np.ndarray = np.log(np.maximum(b @ c, 1e-300)) - y
        return out

    def jacobian(c: np.ndarray) -> np.ndarray:
        out: np.ndarray = b / np.maximum(b @ c, 1e-300)[:, None]
        return out

    found = least_squares(residual, start, jac=jacobian, bounds=(0.0, np.inf),
                          method="trf", x_scale="jac", max_nfev=200)
    c: np.ndarray = found.x / scale
    return c


@dataclass(frozen=True)
class AnalyticModel:
    """Per variant (and per algorithm, for variants seen too rarely), seconds per unit of each
    of :data:`TERMS`."""

    coefficients: dict[str, list[float]]
    family: str = "analytic"

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, variants: Sequence[str]) -> AnalyticModel:
        a = terms(x)
        names = np.asarray(variants)
        algorithms = np.asarray([algorithm_of(v) for v in variants])
        groups = {alg: algorithms == alg for alg in sorted(set(algorithms))}
        for v in sorted(set(variants) - set(groups)):
            if int((names == v).sum()) >= MIN_ROWS:
                groups[v] = names == v
        coefficients = {key: [float(c) for c in fit_coefficients(a[rows], y[rows])]
                        for key, rows in groups.items()}
        return cls(coefficients)

    def predict(self, x: np.ndarray, variants: Sequence[str]) -> np.ndarray:
        return linear_log_times(terms(x), self.coefficients, variants, 1e-12)

    def to_data(self) -> dict[str, Any]:
        return {"coefficients": self.coefficients, "terms": list(TERMS)}

    @classmethod
    def load(cls, data: dict[str, Any]) -> AnalyticModel:
        coefficients = data.get("coefficients")
        if list(data.get("terms") or []) != list(TERMS):
            raise ModelError(f"analytic model: its terms are not this convsel's "
                             f"({', '.join(TERMS)})")
        if not isinstance(coefficients, dict) or not all(
                isinstance(v, list) and len(v) == len(TERMS)
                and all(isinstance(c, (int, float)) and math.isfinite(c) and c >= 0 for c in v)
                for v in coefficients.values()):
            raise ModelError(f"analytic model: 'coefficients' must map variants to "
                             f"{len(TERMS)} non-negative numbers")
        return cls({str(k): [float(c) for c in v] for k, v in coefficients.items()})
