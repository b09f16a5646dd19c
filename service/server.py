"""Run the service under uvicorn; ``convsel serve`` calls :func:`serve`."""

from __future__ import annotations

import uvicorn

from .config import Settings

APP = "service.app:create_app"


def serve(host: str | None = None, port: int | None = None, workers: int | None = None,
          log_level: str = "info") -> None:
    """Serve until interrupted; ``None`` takes the ``CONVSEL_*`` setting."""
    settings = Settings()
    uvicorn.run(APP, factory=True,
                host=host if host is not None else settings.host,
                port=port if port is not None else settings.port,
                workers=workers if workers is not None else settings.workers,
                log_level=log_level, access_log=settings.access_log,
                limit_concurrency=settings.max_connections, server_header=False)
