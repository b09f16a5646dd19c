"""One tuning-database entry and its key: what was measured, where, by which versions."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._version import __version__
from ..errors import InvalidProblemError
from ..problem import ConvProblem
from . import quality

# Bump when an implementation changes enough to change its speed: older entries stop matching.
IMPLEMENTATIONS_VERSION = "3"   # 2: implicit GEMM, tiled OpenCL GEMM, numpy fast paths; 3: OpenCL
# timings by the device clock (profiling events), not the host clock around transfers
DEVICE_FIELDS = ("vendor", "name", "driver")


def problem_key(problem: ConvProblem) -> str:
    """Canonical JSON of a problem: equal problems give equal keys."""
    return _CANONICAL.encode(problem.to_dict())


# json.dumps(sort_keys=True, separators=(",", ":")) builds this encoder on every call; a
# measured answer asks for a key per problem
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class TuningEntry:
    """One tuned problem on one device.

    ``timings`` maps a candidate label (``"im2col_gemm"``, ``"winograd:4x4"``) to its
    statistics (``algorithm``, ``params``, ``median_s``, ``iqr_s``, ``runs``) or to
    ``{"error": ...}``. ``winner`` is the label that beat every other by more than the noise,
    or None when ``tie`` holds the labels that could not be told apart (fastest first).
    """

    problem: ConvProblem
    backend: str
    device: Mapping[str, str]
    winner: str | None
    tie: tuple[str, ...]
    timings: Mapping[str, Mapping[str, Any]]
    convsel_version: str = __version__
    implementations_version: str = IMPLEMENTATIONS_VERSION
    created: float = field(default_factory=time.time)

    @property
    def confident(self) -> bool:
        """A winner that beat every other candidate beyond the noise of both (a tie, or an
        entry without a timing, is not)."""
        return self.winner is not None

    @property
    def noise(self) -> list[str]:
        """Why the timings that decide this entry (its winner, or its tie) are noisy: the
        host's load, too few free cores for the threads, a wide spread, outliers; empty
        when they are clean (or were recorded before timings kept their quality)."""
        return quality.reasons(self.timings, [self.winner] if self.winner else self.tie)

    @property
    def threads(self) -> dict[str, int] | None:
        """The BLAS/OpenMP threads and cores the deciding timing ran with (None: recorded
        before timings kept them)."""
        for label in ([self.winner] if self.winner else list(self.tie)):
            env = self.timings.get(label, {}).get("environment")
            if env:
                found = {"blas": int(env.get("blas_threads", 0)),
                         "openmp": int(env.get("openmp_threads", 0)),
                         "cores": int(env.get("cores", 0))}
                if "pool_threads" in env:    # recorded since the numpy backend has its own
                    found["pool"] = int(env["pool_threads"])
                return found
        return None

    @property
    def is_current(self) -> bool:
        """Whether this convsel would use it (same convsel and implementations versions)."""
        return (self.convsel_version, self.implementations_version) == (
            __version__, IMPLEMENTATIONS_VERSION)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem.to_dict(), "backend": self.backend,
                "device": {k: self.device[k] for k in DEVICE_FIELDS},
                "convsel_version": self.convsel_version,
                "implementations_version": self.implementations_version,
                "winner": self.winner, "tie": list(self.tie),
                "timings": {k: dict(v) for k, v in self.timings.items()},
                "created": self.created}

    @classmethod
    def from_dict(cls, data: Any) -> TuningEntry:
        """Read :meth:`to_dict`'s form; raises ValueError naming the field at fault."""
        if not isinstance(data, dict):
            raise InvalidProblemError("entry", type(data).__name__, "expected a JSON object")
        device = data.get("device")
        if not isinstance(device, dict) or any(not isinstance(device.get(k), str)
                                               for k in DEVICE_FIELDS):
            raise InvalidProblemError("device", device, "needs string vendor, name and driver")
        timings, tie = data.get("timings"), data.get("tie", [])
        if not isinstance(timings, dict) or not isinstance(tie, list):
            raise InvalidProblemError("timings", timings, "expected an object and a tie list")
        for name in ("backend", "convsel_version", "implementations_version"):
            if not isinstance(data.get(name), str):
                raise InvalidProblemError(name, data.get(name), "must be a string")
        return cls(problem=ConvProblem.from_dict(data.get("problem")),
                   backend=data["backend"], device={k: device[k] for k in DEVICE_FIELDS},
                   winner=data.get("winner"), tie=tuple(tie), timings=timings,
                   convsel_version=data["convsel_version"],
                   implementations_version=data["implementations_version"],
                   created=float(data.get("created", time.time())))
