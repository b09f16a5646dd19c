"""Cost models that combine the analytic model's physics with LightGBM's trees.

``analytic+gbt``
    the geometric mean of the two predictions (the mean of their log times): where the trees
    extrapolate flat (a kind of shape beyond their splits), the analytic terms still move
    the prediction with the work; where the terms miss an effect (a cache fit, a tile's
    shape), the trees pull it back.
``hybrid``
    trees fitted on the analytic model's residual (log measured - log analytic), with the
    analytic prediction as one more input: beyond the trees' splits the residual stays flat,
    so the prediction follows the physics there.

Both are stored as data: the analytic coefficients and LightGBM's text model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .analytic import AnalyticModel
from .models import GBT_PARAMS, GBT_ROUNDS, GbtModel, ModelError, lightgbm


@dataclass(frozen=True)
class BlendModel:
    """The mean log time of an analytic model and a gbt model, fitted on the same rows."""

    analytic: AnalyticModel
    trees: GbtModel
    family: str = "analytic+gbt"

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, variants: Sequence[str]) -> BlendModel:
        return cls(AnalyticModel.fit(x, y, variants), GbtModel.fit(x, y, variants))

    def predict(self, x: np.ndarray, variants: Sequence[str]) -> np.ndarray:
        out: np.ndarray = 0.5 * (self.analytic.predict(x, variants)
                                 + self.trees.predict(x, variants))
        return out

    def to_data(self) -> dict[str, Any]:
        return {"analytic": self.analytic.to_data(), "gbt": self.trees.to_data()}

    @classmethod
    def load(cls, data: dict[str, Any]) -> BlendModel:
        if not isinstance(data.get("analytic"), dict) or not isinstance(data.get("gbt"), dict):
            raise ModelError("analytic+gbt model: needs its 'analytic' and 'gbt' parts")
        return cls(AnalyticModel.load(data["analytic"]), GbtModel.load(data["gbt"]))


def _inputs(x: np.ndarray, base: np.ndarray) -> np.ndarray:
    # a variant the analytic model cannot price (inf) gives the trees no number to split on
    return np.column_stack([x, np.where(np.isfinite(base), base, np.nan)])


@dataclass(frozen=True)
class HybridModel:
    """LightGBM trees on the residual of an analytic model."""

    analytic: AnalyticModel
    text: str
    booster: Any = None
    family: str = "hybrid"

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, variants: Sequence[str]) -> HybridModel:
        analytic = AnalyticModel.fit(x, y, variants)
        base = analytic.predict(x, variants)
        known = np.isfinite(base)
        lgb = lightgbm()
        data = lgb.Dataset(_inputs(x, base)[known], label=(y - base)[known],
                           free_raw_data=False)
        booster = lgb.train(GBT_PARAMS, data, num_boost_round=GBT_ROUNDS)
        return cls(analytic, booster.model_to_string(), booster)

    def predict(self, x: np.ndarray, variants: Sequence[str]) -> np.ndarray:
        booster = self.booster or lightgbm().Booster(model_str=self.text)
        base = self.analytic.predict(x, variants)
        out: np.ndarray = base + np.asarray(booster.predict(_inputs(x, base), num_threads=1))
        return out

    def to_data(self) -> dict[str, Any]:
        return {"analytic": self.analytic.to_data(), "lightgbm_text": self.text}

    @classmethod
    def load(cls, data: dict[str, Any]) -> HybridModel:
        text = data.get("lightgbm_text")
        if not isinstance(data.get("analytic"), dict) or not isinstance(text, str) \
                or not text.startswith("tree"):
            raise ModelError("hybrid model: needs its 'analytic' part and a LightGBM text "
                             "model")
        try:
            booster = lightgbm().Booster(model_str=text)
        except Exception as exc:  # noqa: BLE001 - LightGBM raises its own error types
            raise ModelError(f"hybrid model: LightGBM cannot read it ({exc})") from exc
        return cls(AnalyticModel.load(data["analytic"]), text, booster)
