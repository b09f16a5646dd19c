"""The library's settings: one object, read from the ``CONVSEL_*`` environment in one place.

Every setting can also be passed as an argument where it is used (``rules=``, ``db=``,
``device=``); the environment only supplies defaults. :func:`current` reads the environment
on each call (a handful of lookups), so a changed variable takes effect without a restart.
The service's own settings (host, port, limits) live in ``service.config``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

# variable -> Config field; the one list of the library's environment variables
VARIABLES: dict[str, str] = {
    "CONVSEL_HEURISTICS": "heuristics",
    "CONVSEL_TUNING_DB": "tuning_db",
    "CONVSEL_OPENCL_DEVICE": "opencl_device",
    "PYOPENCL_CTX": "pyopencl_ctx",
    "CONVSEL_CL_TUNER": "cl_tuner",
    "CONVSEL_CL_TUNER_FILE": "cl_tuner_file",
    "CONVSEL_CL_CACHE_CAPACITY": "cl_cache_capacity",
    "CONVSEL_CL_HALF": "cl_half",
}


@dataclass(frozen=True)
class Config:
    """Library settings; ``None`` means "not set" (the documented default applies).

    heuristics: rule file path; tuning_db: tuning database path or URL; opencl_device and
    pyopencl_ctx: OpenCL device choice; cl_tuner, cl_tuner_file: CLTuner mode and file;
    cl_cache_capacity: OpenCL program cache size; cl_half: "auto" or "storage".
    """

    heuristics: str | None = None
    tuning_db: str | None = None
    opencl_device: str | None = None
    pyopencl_ctx: str | None = None
    cl_tuner: str | None = None
    cl_tuner_file: str | None = None
    cl_cache_capacity: str | None = None
    cl_half: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        env = os.environ if environ is None else environ
        return cls(**{field: (env.get(var) or None) for var, field in VARIABLES.items()})


def current() -> Config:
    """The settings in force now (the process environment)."""
    return Config.from_env()
