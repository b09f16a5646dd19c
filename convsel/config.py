"""The library's settings: one object, read from the environment in one place.

Every setting can also be passed as an argument where it is used (``rules=``, ``db=``,
``device=``, ``Client(token=...)``); the environment only supplies defaults. :func:`current`
reads the environment on each call (a handful of lookups), so a changed variable takes effect
without a restart.

Each field is read from ``CONVSEL_<FIELD>``, or from the variable its ``validation_alias``
names (``PYOPENCL_CTX``, the BLAS thread variables): :func:`variable` says which, and modules
that name a variable in a message take its name from there. The service's settings
(``service.config.Settings``) extend this class, so they read the same variables by the same
rule and add only what is the service's own (host, port, limits).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

PREFIX = "CONVSEL_"


class Config(BaseModel):
    """Library settings; ``None`` means "not set" (the documented default applies). An empty
    variable counts as not set (but an empty API token is kept: see ``api_token``)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    heuristics: str | None = Field(None, description="rules file; default: the packaged one")
    tuning_db: str | None = Field(None, description="tuning database: an SQLite path or a "
                                  "postgresql:// URL; default: the user data directory")
    tuning_db_timeout: str | None = Field(None, description="seconds a tuning-database call "
                                          "waits to connect, for a pooled connection or for a "
                                          "writer's lock; default 10")
    opencl_device: str | None = Field(None, description="OpenCL device: an index, "
                                      "'platform:device' or a name fragment; default: "
                                      "PYOPENCL_CTX, else the first GPU, else the first device")
    pyopencl_ctx: str | None = Field(None, validation_alias="PYOPENCL_CTX",
                                     description="pyopencl's own device choice")
    cl_tuner: str | None = Field(None, description="OpenCL local-size tuning: rapid, normal "
                                 "or exhaustive; default: off")
    cl_tuner_file: str | None = Field(None, description="the tuner's lws file; default: "
                                      "cl_tuner.lws in the user cache directory")
    cl_cache_capacity: str | None = Field(None, description="OpenCL programs kept (LRU); "
                                          "default 256")
    cl_half: str | None = Field(None, description="auto, or storage: half values stored, "
                                "float arithmetic")
    wide_vectors: str | None = Field(None, description="1/true/yes/on: the numpy backend's "
                                     "fused (numba) kernels may use 512-bit vectors where "
                                     "LLVM would prefer 256-bit ones (Intel server cores); "
                                     "numba's CPU features are process-wide, so this applies "
                                     "to every numba kernel of the process compiled after "
                                     "convsel's fused kernels load; default: off")
    gemm: str | None = Field(None, description="who runs the numpy backend's GEMMs: auto "
                             "(oneMKL on Intel CPUs where the mkl extra is installed, else "
                             "numpy's BLAS), numpy or mkl; default: auto")
    mkl_rt: str | None = Field(None, description="path to a libmkl_rt.so for the numpy "
                               "backend's GEMMs (a oneMKL not installed from PyPI); "
                               "default: the mkl wheel's")
    dnnl_lib: str | None = Field(None, description="path to a libdnnl.so.3 (oneDNN 3.x, CPU) "
                                 "for the onednn backend; default: the onednn-cpu-gomp "
                                 "wheel's (the onednn extra)")
    # The BLAS libraries' own variables, as set (they are read by BLAS at import; convsel
    # records them in the numpy backend's device key and never sets them).
    openblas_num_threads: str | None = Field(None, validation_alias="OPENBLAS_NUM_THREADS")
    omp_num_threads: str | None = Field(None, validation_alias="OMP_NUM_THREADS")
    mkl_num_threads: str | None = Field(None, validation_alias="MKL_NUM_THREADS")
    # An empty token stays a (never matching) token: a server given CONVSEL_API_TOKEN="" by
    # mistake stays closed rather than open; a client sends no header for it.
    api_token: SecretStr | None = Field(None, description="when set, the service's routes "
                                        "that write or spend a lot (/v1/tune, /v1/fit, "
                                        "/v1/fit/jobs, /v1/tuning/entries, "
                                        "/v1/find) and /metrics require 'Authorization: "
                                        "Bearer <token>'; convsel.client sends it")

    @field_validator("*", mode="before")
    @classmethod
    def _as_text(cls, value: Any, info: Any) -> Any:
        # A path is kept as text (a postgresql:// URL in Path() would lose its '//').
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        return None if value == "" and info.field_name != "api_token" else value

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        env = os.environ if environ is None else environ
        return cls.model_validate({name: env.get(var) for var, name in VARIABLES.items()})

    def blas_thread_variables(self) -> dict[str, str]:
        """The BLAS thread variables that are set, by name (``OMP_NUM_THREADS``: ``"1"``)."""
        return {variable(name): value for name in BLAS_THREAD_FIELDS
                if (value := getattr(self, name)) is not None}


def variable(field: str) -> str:
    """The environment variable of a :class:`Config` field (``tuning_db``:
    ``CONVSEL_TUNING_DB``)."""
    alias = Config.model_fields[field].validation_alias
    return alias if isinstance(alias, str) else PREFIX + field.upper()


# variable -> Config field: the one list of the library's environment variables
VARIABLES: dict[str, str] = {variable(name): name for name in Config.model_fields}
BLAS_THREAD_FIELDS = ("openblas_num_threads", "omp_num_threads", "mkl_num_threads")


def current() -> Config:
    """The settings in force now (the process environment)."""
    return Config.from_env()
