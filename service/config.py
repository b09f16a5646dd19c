"""Service settings, read from ``CONVSEL_*`` environment variables (pydantic-settings).

Defaults keep a 2-core machine with a few GB of memory safe: a 32 MiB body, tensors of at most
4 Mi elements / 16 MiB, two convolutions running and eight waiting.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1 << 20


class Settings(BaseSettings):
    """Every knob of the service. ``CONVSEL_PORT=9000 convsel serve`` sets ``port``.

    ``heuristics`` reads ``CONVSEL_HEURISTICS``, the same variable the library reads, so the
    CLI and the service answer from the same rules file.
    """

    model_config = SettingsConfigDict(env_prefix="CONVSEL_", frozen=True, extra="ignore")

    host: str = Field("127.0.0.1", description="address to bind; 0.0.0.0 in containers")
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1, description="uvicorn worker processes")
    access_log: bool = Field(True, description="uvicorn's per-request access log")
    max_connections: int = Field(256, ge=1, description="uvicorn limit_concurrency: more -> 503")

    heuristics: Path | None = Field(None, description="rules file; default: the packaged one")
    default_target: str = "cpu"
    default_backend: str = Field("numpy", description="numpy or opencl")
    default_device: str | None = Field(None, description="OpenCL device passed to backends")
    tuning_db: Path | None = Field(None, description="tuning database (used by the tuning "
                                   "routes and policy='measured' when they are installed)")

    max_body_bytes: int = Field(32 * MiB, ge=1, description="request body, header or stream")
    max_tensor_elements: int = Field(4 * MiB, ge=1, description="per tensor, x, w, bias and y")
    max_tensor_bytes: int = Field(16 * MiB, ge=1, description="per decoded tensor")
    max_conv_flops: int = Field(20_000_000_000, ge=1, description="per convolution request")
    max_workspace_bytes: int = Field(512 * MiB, ge=0,
                                     description="algorithm scratch memory per convolution")
    max_batch_size: int = Field(1024, ge=1, description="problems per /v1/select/batch")
    max_concurrent_convolutions: int = Field(2, ge=1, description="threads running convolutions")
    max_queued_convolutions: int = Field(8, ge=0, description="accepted, waiting for a thread")
    retry_after_seconds: int = Field(1, ge=0, description="Retry-After on 503 when busy")
