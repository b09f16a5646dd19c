"""``convsel serve``: the HTTP service (``service.app``) under uvicorn.

Defaults come from the ``CONVSEL_*`` environment (``service.config.Settings``); flags win.
The library itself never imports FastAPI: this command hands uvicorn an import string.
"""

from __future__ import annotations

import argparse

APP = "service.app:create_app"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="address to bind (default: "
                        "$CONVSEL_HOST or 127.0.0.1; 0.0.0.0 to listen on every interface)")
    parser.add_argument("--port", type=int, default=None,
                        help="port (default: $CONVSEL_PORT or 8000; 0 picks a free one)")
    parser.add_argument("--workers", type=int, default=None,
                        help="worker processes (default: $CONVSEL_WORKERS or 1)")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"])


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from service.config import Settings

    settings = Settings()
    uvicorn.run(APP, factory=True,
                host=args.host if args.host is not None else settings.host,
                port=args.port if args.port is not None else settings.port,
                workers=args.workers if args.workers is not None else settings.workers,
                log_level=args.log_level, access_log=settings.access_log,
                limit_concurrency=settings.max_connections, server_header=False)
    return 0
