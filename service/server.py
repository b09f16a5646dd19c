"""Run the service under uvicorn; ``convsel serve`` calls :func:`serve`."""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from .config import Settings
from .logs import REQUEST_LOG
from .metrics import MULTIPROC_DIR
from .protocol import ServiceH11Protocol

APP = "service.app:create_app"


def log_config() -> dict[str, Any]:
    """uvicorn's logging plus the service's: request lines (already JSON) printed as they are
    on stdout, the service's errors (with tracebacks) beside uvicorn's on stderr."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["convsel_json"] = {"format": "%(message)s"}
    config["handlers"]["convsel_requests"] = {"class": "logging.StreamHandler",
                                              "formatter": "convsel_json",
                                              "stream": "ext://sys.stdout"}
    config["loggers"][REQUEST_LOG] = {"handlers": ["convsel_requests"], "level": "INFO",
                                      "propagate": False}
    config["loggers"]["convsel.service"] = {"handlers": ["default"], "level": "INFO",
                                            "propagate": False}
    return config


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for this service, besides where to listen and how to log (the
    tests' in-process server uses these too)."""
    # limit_concurrency stays off: it answered every route, /healthz included, in plain text
    # once slow connections filled it. The protocol caps connections (closing idle ones
    # first) and times out slow heads; the app caps requests, keeping places for probes.
    return {"access_log": settings.access_log, "http": ServiceH11Protocol,
            "limit_concurrency": None, "server_header": False}


def serve(host: str | None = None, port: int | None = None, workers: int | None = None,
          log_level: str = "info") -> None:
    """Serve until interrupted; ``None`` takes the ``CONVSEL_*`` setting."""
    settings = Settings()
    workers = workers if workers is not None else settings.workers
    with shared_metrics(workers):
        uvicorn.run(APP, factory=True,
                    host=host if host is not None else settings.host,
                    port=port if port is not None else settings.port, workers=workers,
                    log_level=log_level, log_config=log_config(), **uvicorn_options(settings))


@contextmanager
def shared_metrics(workers: int) -> Iterator[None]:
    """With several workers, prometheus-client's multiprocess mode: each worker writes its
    numbers to files in one directory (``PROMETHEUS_MULTIPROC_DIR``, inherited by the
    workers), and a scrape of any worker sums them all; otherwise each scrape showed the one
    worker that answered it. The operator's directory is emptied first (an earlier run's
    files would be summed too); without one, a temporary directory lives as long as the
    server."""
    if workers <= 1:
        yield
        return
    given = os.environ.get(MULTIPROC_DIR)
    if given:
        for stale in Path(given).glob("*.db"):
            stale.unlink()
        yield
        return
    with tempfile.TemporaryDirectory(prefix="convsel-metrics-") as directory:
        os.environ[MULTIPROC_DIR] = directory
        try:
            yield
        finally:
            os.environ.pop(MULTIPROC_DIR, None)
