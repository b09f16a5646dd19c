"""The model families by name (described in :mod:`.models`): ``FAMILIES[name].fit(X, y,
variants)`` returns a model, ``FAMILIES[name].load(data)`` reads the stored form back. A
module of its own because the families live in three (:mod:`.models`, :mod:`.analytic`,
:mod:`.combined`) and the last two build on the first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .analytic import AnalyticModel
from .combined import BlendModel, HybridModel
from .models import GbtModel, Model, RooflineModel


@dataclass(frozen=True)
class Family:
    name: str
    fit: Callable[[np.ndarray, np.ndarray, Sequence[str]], Model]
    load: Callable[[dict[str, Any]], Model]
    needs: str = ""      # the optional package it needs, if any


def _families() -> dict[str, Family]:
    return {
        "roofline": Family("roofline", RooflineModel.fit, RooflineModel.load),
        "analytic": Family("analytic", AnalyticModel.fit, AnalyticModel.load),
        "gbt": Family("gbt", GbtModel.fit, GbtModel.load, needs="lightgbm"),
        "analytic+gbt": Family("analytic+gbt", BlendModel.fit, BlendModel.load,
                               needs="lightgbm"),
        "hybrid": Family("hybrid", HybridModel.fit, HybridModel.load, needs="lightgbm"),
    }


FAMILIES: dict[str, Family] = _families()


def available_families() -> list[str]:
    """The families whose learner is installed here."""
    out = []
    for name, family in FAMILIES.items():
        if family.needs:
            try:
                __import__(family.needs)
            except ImportError:
                continue
        out.append(name)
    return out
