"""``convsel db push URL``: send this database's entries to a convsel server (a fleet's shared
store), in batches; the server reports each as accepted, merged, flagged or rejected.
Pushing again sends nothing new to the server: it stores one measurement once."""

from __future__ import annotations

import argparse

from ..tuning.db import TuningDB
from .remote import Uploader, add_remote_arguments, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="the server, e.g. http://host:8000")
    add_remote_arguments(parser, required=True)
    parser.add_argument("--backend", default=None, help="only this backend's entries")
    parser.add_argument("--batch", type=int, default=500, metavar="N",
                        help="entries per upload (the server takes at most "
                             "CONVSEL_MAX_UPLOAD_ENTRIES, 2000 by default)")
    parser.add_argument("--partial", action="store_true",
                        help="let the server store the entries that pass when some fail its "
                             "checks (default: a batch with a bad entry is refused whole)")


def run(args: argparse.Namespace, db: TuningDB) -> int:
    entries = db.entries(backend=args.backend)
    if not entries:
        print(f"nothing to push: {db.location} holds no entries"
              + (f" of {args.backend}" if args.backend else ""))
        return 0
    uploader = Uploader(args.url, args.token, args.client, batch=args.batch,
                        partial=args.partial)
    try:
        uploader.send(entries)
    finally:
        uploader.close()
    report(uploader)
    return 1 if uploader.pending or uploader.counts["rejected"] else 0
