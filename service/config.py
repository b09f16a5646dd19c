"""Service settings, read from ``CONVSEL_*`` environment variables (pydantic-settings).

:class:`Settings` extends the library's :class:`convsel.config.Config`: the rules file, the
tuning database, the OpenCL device, the API token and the rest are the library's fields, read
from the same variables; the fields below are the service's own.

Every request body has a limit sized to what its route needs, so that no body can make the
server hold more than a few times its limit: a selection is a few hundred bytes, a batch of
1024 problems about 200 KiB, tensors and models have their own limits. Defaults keep a 2-core
machine with a few GB of memory safe (see the README's "HTTP service" section for the bound).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from convsel.config import PREFIX, Config

KiB = 1 << 10
MiB = 1 << 20


class Settings(BaseSettings, Config):
    """Every knob of the service. ``CONVSEL_PORT=9000 convsel serve`` sets ``port``.

    The library's fields (``heuristics``, ``tuning_db``, ``opencl_device``, ``api_token``,
    ...) come with :class:`~convsel.config.Config`, so the CLI and the service answer from the
    same files and devices.
    """

    model_config = SettingsConfigDict(env_prefix=PREFIX, frozen=True, extra="ignore")

    host: str = Field("127.0.0.1", description="address to bind; 0.0.0.0 in containers")
    port: int = Field(8000, ge=0, le=65535)
    workers: int = Field(1, ge=1, description="uvicorn worker processes")
    access_log: bool = Field(False, description="uvicorn's own access log (the service writes "
                             "one JSON line per request either way, see request_log)")
    request_log: bool = Field(True, description="one JSON log line per request, with the "
                              "request id that the X-Request-ID header echoes")
    max_connections: int = Field(256, ge=1, description="open connections: one more closes "
                                 "the oldest idle one (between requests, or still sending its "
                                 "head), or is answered 503 when none is idle")
    max_requests: int = Field(64, ge=1, description="requests answered at once (their bodies "
                              "being read included); more -> 503. /healthz and /readyz have "
                              "16 places of their own")
    header_timeout_s: float = Field(10.0, gt=0, description="a request line and headers must "
                                    "arrive within this, else 408 and the connection closes")
    body_timeout_s: float = Field(10.0, gt=0, description="a body must arrive within this "
                                  "plus one second per min_body_rate bytes, else 408")
    min_body_rate: int = Field(16 * KiB, ge=1, description="bytes per second a body must "
                               "average after body_timeout_s")

    default_target: str = "cpu"
    default_backend: str = Field("numpy", description="numpy or opencl")

    ready_timeout_s: float = Field(1.0, gt=0, le=60, description="/readyz answers within "
                                   "this; a component still checking then (a tuning database "
                                   "that does not answer) is reported unavailable")

    show_paths: bool = Field(False, description="show host file paths (rules file, tuning "
                             "database) in /readyz, /v1/rules and /v1/tuning")

    # Request bodies, per route (a declared Content-Length over the limit is refused before a
    # byte is read; a chunked body is counted and cut at the limit).
    max_body_bytes: int = Field(64 * KiB, ge=1, description="any route without its own limit "
                                "(/v1/tune ...)")
    max_select_body_bytes: int = Field(8 * KiB, ge=1, description="/v1/select")
    max_batch_body_bytes: int = Field(512 * KiB, ge=1, description="/v1/select/batch")
    max_conv_body_bytes: int = Field(32 * MiB, ge=1, description="/v1/conv2d, JSON or multipart")
    max_model_bytes: int = Field(512 * MiB, ge=1, description="/v1/plan: the ONNX model, "
                                 "streamed to a temporary file")
    max_upload_body_bytes: int = Field(16 * MiB, ge=1, description="/v1/tuning/entries: an "
                                       "upload of measured entries (about 2-6 KiB each)")
    max_upload_entries: int = Field(2000, ge=1, le=5000, description="entries per upload "
                                    "(convsel db push and tune --remote send fewer at once)")
    max_plan_nodes: int = Field(10_000, ge=1, description="/v1/plan: nodes in the model's "
                                "graphs (planning time and memory grow faster than linearly)")
    max_plan_seconds: float = Field(30.0, gt=0, description="/v1/plan: answer 413 when planning "
                                    "takes longer (the work finishes in the background, holding "
                                    "the one planning place)")

    max_tensor_elements: int = Field(4 * MiB, ge=1, description="per tensor, x, w, bias and y")
    max_tensor_bytes: int = Field(16 * MiB, ge=1, description="per decoded tensor")
    max_conv_flops: int = Field(20_000_000_000, ge=1, description="per convolution or tuning")
    max_workspace_bytes: int = Field(512 * MiB, ge=0,
                                     description="algorithm scratch memory per convolution")
    max_tune_seconds: float = Field(60.0, gt=0, le=60.0, description="time budget of one "
                                    "/v1/tune at most (a request's budget_s is cut to it)")
    max_batch_size: int = Field(1024, ge=1, le=65536,
                                description="problems per /v1/select/batch")
    max_concurrent_convolutions: int = Field(2, ge=1, description="threads running convolutions")
    max_queued_convolutions: int = Field(8, ge=0, description="accepted, waiting for a thread")
    retry_after_seconds: int = Field(1, ge=0, description="Retry-After on 503 when busy")
