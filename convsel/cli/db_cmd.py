"""``convsel db``: where the tuning database is, what it holds, moving it as JSON, and
verifying its winners (``convsel db verify``: :mod:`.db_verify_cmd`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..tuning.db import TuningDB, TuningEntry


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="tuning database (default: $CONVSEL_TUNING_DB or the user data "
                             "directory)")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub.add_parser("path", help="print the database path and its status")
    listing = sub.add_parser("list", help="list the entries")
    listing.add_argument("--json", action="store_true", help="print JSON")
    export = sub.add_parser("export", help="write every entry to a JSON file ('-' = stdout)")
    export.add_argument("file")
    imp = sub.add_parser("import", help="add the entries of an exported JSON file "
                         "(where both hold an entry, the newer wins)")
    imp.add_argument("file")
    from . import db_verify_cmd

    db_verify_cmd.add_parser(sub)


def run(args: argparse.Namespace) -> int:
    db = TuningDB(args.db)
    if args.action == "verify":
        from . import db_verify_cmd

        return db_verify_cmd.run(args, db)
    if args.action == "path":
        status = db.status()
        print(status["path"])
        print(f"  {status['entries']} entries, schema {status['schema_version']}, "
              + ("writable" if status["writable"] else f"read-only: {db.read_only_reason}"))
        return 0
    if args.action == "list":
        entries = db.entries()
        if args.json:
            print(json.dumps([e.to_dict() for e in entries], indent=2))
        else:
            for entry in entries:
                print(_describe(entry))
            print(f"{len(entries)} entries in {db.path}")
        return 0
    if args.action == "export":
        text = json.dumps(db.export_json(), indent=1)
        if args.file == "-":
            print(text)
        else:
            Path(args.file).write_text(text + "\n")
            print(f"exported {db.status()['entries']} entries to {args.file}")
        return 0
    try:
        document = json.loads(Path(args.file).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"file={args.file!r}: cannot read a JSON export ({exc})") from None
    result = db.import_json(document)
    print(f"imported {result['imported']} entries into {db.path}; kept {result['kept']} "
          f"existing newer ones; rejected {len(result['rejected'])}")
    for reason in result["rejected"]:
        print(f"  rejected {reason}")
    return 0


def _describe(e: TuningEntry) -> str:
    ok = {k: v for k, v in e.timings.items() if "median_s" in v}
    best = min(ok, key=lambda k: ok[k]["median_s"]) if ok else None
    verdict = (f"winner {e.winner}" if e.winner else f"tie {'/'.join(e.tie)}" if e.tie
               else "no timing")
    timing = f" {ok[best]['median_s'] * 1e3:.3g} ms" if best else ""
    stale = "" if e.is_current else (f"  [other version: convsel {e.convsel_version}, "
                                     f"implementations {e.implementations_version}]")
    return (f"{e.problem}  {e.backend}/{e.device['name']}: {verdict}{timing}{stale}")
