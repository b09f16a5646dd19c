"""Uploads for the fleet tests: export documents of entries measured on a device that is not
this machine (a board that never ran here), with timings chosen by the test."""

from __future__ import annotations

import copy
import time
from typing import Any

from convsel import ConvProblem
from convsel.tuning import IMPLEMENTATIONS_VERSION
from convsel.tuning.db import EXPORT_FORMAT
from convsel.tuning.measure import candidates

BOARD = {"vendor": "Arm", "name": "Mali-G78 fleet board", "driver": "r41p0"}
P = ConvProblem(1, 8, 8, 4, 8, 3, 3, pad=1)


def timings(problem: ConvProblem, fastest: str, *, backend: str = "numpy",
            base_ms: float = 1.0, spread: float = 0.01) -> dict[str, dict[str, Any]]:
    """Every candidate of ``problem`` on ``backend``: ``fastest`` at ``base_ms``, the others
    1.5x, 2x, ... slower (clearly beyond the noise), each with ``spread`` IQR/median."""
    found, skipped = candidates(problem, backend)
    ordered = sorted(found, key=lambda c: (c.label != fastest, c.label))
    assert ordered[0].label == fastest, f"{fastest} is not a candidate of {problem}"
    out: dict[str, dict[str, Any]] = {}
    for j, c in enumerate(ordered):
        ms = base_ms * (1.0 if j == 0 else 1.0 + 0.5 * j)
        out[c.label] = {"algorithm": c.algorithm, "params": {
            k: list(v) if isinstance(v, tuple) else v for k, v in c.params.items()},
            "median_s": ms / 1e3, "iqr_s": ms * spread / 1e3, "min_s": ms * 0.98 / 1e3,
            "runs": 9, "clock": "wall", "pruned": False}
    out.update({label: {"skipped": why} for label, why in skipped.items()})
    return out


def entry(problem: ConvProblem = P, fastest: str = "winograd:4x4", *,
          device: dict[str, str] = BOARD, backend: str = "numpy", base_ms: float = 1.0,
          created: float | None = None,
          implementations_version: str = IMPLEMENTATIONS_VERSION) -> dict[str, Any]:
    from convsel import __version__

    return {"problem": problem.to_dict(), "backend": backend, "device": dict(device),
            "convsel_version": __version__, "implementations_version": implementations_version,
            "winner": fastest, "tie": [], "timings": timings(problem, fastest, backend=backend,
                                                             base_ms=base_ms),
            "created": created or time.time() - 60}


def export(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"format": EXPORT_FORMAT, "schema_version": 3, "convsel_version": "0.1.0",
            "exported": time.time(), "entries": [copy.deepcopy(e) for e in entries]}


def shapes(count: int) -> list[ConvProblem]:
    """``count`` distinct small 3x3 problems (a fit needs at least 8)."""
    return [ConvProblem(1, 6 + i, 6 + i, 4 + 4 * (i % 3), 8 + 4 * (i % 4), 3, 3, pad=1)
            for i in range(count)]
