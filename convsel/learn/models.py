"""Cost-model families, stored as data (JSON-ready dicts; LightGBM's own text model format),
never as pickles.

A family fits ``log(time)`` of candidates from their feature rows (:mod:`.features`) and
predicts it for new rows. The families:

``roofline``
    per variant (algorithm and tile), time = c0 + c1 * arithmetic + c2 * bytes moved +
    c3 * workspace bytes, with non-negative coefficients fitted by least squares on relative
    error (scipy's NNLS, rows weighted by 1 / time). A variant never seen in training falls
    back to its algorithm's coefficients. Few parameters: robust on little data, blind to
    effects that are not linear in work (cache fits, thread start-up, tile shapes).
``analytic``
    per variant, a sum of work terms (arithmetic, memory, per-call and per-work-group costs,
    the critical path), each over a fitted non-negative throughput, in log space
    (:mod:`.analytic`): extrapolates along work, which trees cannot.
``gbt``
    gradient-boosted trees (LightGBM) over every feature, on log(time per direct FLOP): learns
    where each algorithm is efficient, but needs more data and extrapolates flat.
``analytic+gbt``, ``hybrid``
    the two combined (:mod:`.combined`): their mean log time, or trees on the analytic
    model's residual.

:data:`convsel.learn.families.FAMILIES` is the one list of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .features import FEATURE_NAMES

_COL = {name: i for i, name in enumerate(FEATURE_NAMES)}


class ModelError(ValueError):
    """A stored model cannot be read or used (corrupt, another feature set, learner absent)."""


class Model(Protocol):
    @property
    def family(self) -> str: ...

    def predict(self, x: np.ndarray, variants: Sequence[str]) -> np.ndarray:
        """Natural log of predicted seconds per row; ``variants`` name each row's variant
        (``label_of``) and algorithm is in the row's one-hot features."""
        ...

    def to_data(self) -> dict[str, Any]: ...


def _work_columns(x: np.ndarray) -> np.ndarray:
    """[1, arithmetic, bytes moved, workspace] per row, in GFLOP and GB (well-scaled NNLS)."""
    flops = 10.0 ** x[:, _COL["log_alg_flops"]] / 1e9
    moved = 10.0 ** x[:, _COL["log_bytes"]] / 1e9
    workspace = (10.0 ** x[:, _COL["log_workspace"]] - 1.0) / 1e9
    return np.column_stack([np.ones(len(x)), flops, moved, workspace])


def algorithm_of(variant: str) -> str:
    """The algorithm of a variant label ("implicit_gemm:tile=..." -> "implicit_gemm")."""
    return variant.split(":", 1)[0]


def linear_log_times(a: np.ndarray, coefficients: dict[str, list[float]],
                     variants: Sequence[str], floor: float) -> np.ndarray:
    """log(a[i] . c) per row, c the row's variant's coefficients or else its algorithm's
    (inf where the model has neither: never timed); ``floor`` keeps an all-zero fit finite."""
    out = np.full(len(a), math.inf)
    for i, v in enumerate(variants):
        c = coefficients.get(v) or coefficients.get(algorithm_of(v))
        if c is not None:
            out[i] = math.log(max(float(a[i] @ np.asarray(c)), floor))
    return out


@dataclass(frozen=True)
class RooflineModel:
    """Per-variant non-negative coefficients of [1, GFLOP, GB moved, GB workspace] -> s."""

    coefficients: dict[str, list[float]]
    family: str = "roofline"

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, variants: Sequence[str]) -> RooflineModel:
        from scipy.optimize import nnls

        a, t = _work_columns(x), np.exp(y)
        keys = sorted(set(variants) | {algorithm_of(v) for v in variants})
        coefficients = {}
        for key in keys:
            rows = np.array([v == key or algorithm_of(v) == key for v in variants])
            weight = 1.0 / t[rows]          # relative error: small layers count as much
            c, _ = nnls(a[rows] * weight[:, None], np.ones(int(rows.sum())))
            coefficients[key] = [float(v) for v in c]
        return cls(coefficients)

    def predict(self, x: np.ndarray, variants: Sequence[str]) -> np.ndarray:
        return linear_log_times(_work_columns(x), self.coefficients, variants, 1e-9)

    def to_data(self) -> dict[str, Any]:
        return {"coefficients": self.coefficients,
                "columns": ["seconds", "seconds/GFLOP", "seconds/GB moved",
                            "seconds/GB workspace"]}

    @classmethod
    def load(cls, data: dict[str, Any]) -> RooflineModel:
        coefficients = data.get("coefficients")
        if not isinstance(coefficients, dict) or not all(
                isinstance(v, list) and len(v) == 4 and all(isinstance(c, (int, float))
                                                            and math.isfinite(c) for c in v)
                for v in coefficients.values()):
            raise ModelError("roofline model: 'coefficients' must map variants to 4 numbers")
        return cls({str(k): [float(c) for c in v] for k, v in coefficients.items()})


# LightGBM settings: small trees for a few thousand rows; one thread and fixed seeds make a
# fit reproducible (and predictions of a stored model are deterministic whatever the seeds).
GBT_PARAMS: dict[str, Any] = {
    "objective": "regression", "learning_rate": 0.05, "num_leaves": 15,
    "min_data_in_leaf": 3, "feature_fraction": 0.9, "bagging_fraction": 0.9, "bagging_freq": 1,
    "lambda_l2": 1.0, "verbose": -1, "num_threads": 1, "deterministic": True, "seed": 7}
GBT_ROUNDS = 400


def lightgbm() -> Any:
    try:
        import lightgbm
    except ImportError as exc:
        raise ModelError("the gbt family needs LightGBM: pip install 'convsel[learn]' "
                         f"({exc})") from exc
    return lightgbm


def _per_flop(x: np.ndarray) -> np.ndarray:
    return x[:, _COL["log_flops"]] * math.log(10.0)


@dataclass(frozen=True)
class GbtModel:
    """LightGBM trees on log(seconds / direct FLOP); stored as LightGBM's text model."""

    text: str
    booster: Any = None
    family: str = "gbt"

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, variants: Sequence[str]) -> GbtModel:
        lgb = lightgbm()
        data = lgb.Dataset(x, label=y - _per_flop(x), feature_name=list(FEATURE_NAMES),
                           free_raw_data=False)
        booster = lgb.train(GBT_PARAMS, data, num_boost_round=GBT_ROUNDS)
        return cls(booster.model_to_string(), booster)

    def predict(self, x: np.ndarray, variants: Sequence[str]) -> np.ndarray:
        booster = self.booster or lightgbm().Booster(model_str=self.text)
        out: np.ndarray = np.asarray(booster.predict(x, num_threads=1)) + _per_flop(x)
        return out

    def to_data(self) -> dict[str, Any]:
        return {"lightgbm_text": self.text}

    @classmethod
    def load(cls, data: dict[str, Any]) -> GbtModel:
        text = data.get("lightgbm_text")
        if not isinstance(text, str) or not text.startswith("tree"):
            raise ModelError("gbt model: 'lightgbm_text' is not a LightGBM text model")
        lgb = lightgbm()
        try:
            booster = lgb.Booster(model_str=text)
        except Exception as exc:  # noqa: BLE001 - LightGBM raises its own error types
            raise ModelError(f"gbt model: LightGBM cannot read it ({exc})") from exc
        if booster.num_feature() != len(FEATURE_NAMES):
            raise ModelError(f"gbt model has {booster.num_feature()} features, this convsel "
                             f"computes {len(FEATURE_NAMES)}")
        return cls(text, booster)
