"""``convsel serve``: the HTTP service, installed with the ``[service]`` extra.

The library never imports the service, with one exception: this command, the service's
launcher, imports ``service.server`` when it runs (an import the architecture test sees and
allows here only) and, when the extra is missing, says which one to install.
"""

from __future__ import annotations

import argparse
import sys

INSTALL_HINT = "convsel serve needs the service extra: pip install 'convsel[service]'"


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
    try:
        from service.server import serve
    except ImportError as exc:
        print(f"{INSTALL_HINT} ({exc})", file=sys.stderr)
        return 2
    serve(host=args.host, port=args.port, workers=args.workers, log_level=args.log_level)
    return 0
