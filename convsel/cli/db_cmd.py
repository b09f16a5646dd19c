"""``convsel db``: where the tuning database is, what it holds, removing bad entries, and
moving it (entries and fitted models) as JSON.

Each action is a row of :data:`ACTIONS`: its help, its arguments, what it runs, and whether it
may create the database. Only actions that add something create one: reading or removing
from a mistyped ``--db`` path is an error, never a new empty database. An action that lives in
another module is a row made by :func:`elsewhere`.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..tuning.db import TuningDB, TuningEntry, default_target
from ..tuning.store import is_url
from .problem_args import add_problem_arguments, problem_from_args


@dataclass(frozen=True)
class Action:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, TuningDB], int]
    creates: bool = False   # may make a database where there is none
    # what to do instead where there is no database (None: it is an error)
    when_missing: Callable[[Path], int] | None = None


def elsewhere(module: str, help_text: str, *, creates: bool = False) -> Action:
    """An action whose ``add_arguments(parser)`` and ``run(args, db) -> int`` live in
    ``module`` (imported when ``convsel db`` builds its parser)."""
    def add(parser: argparse.ArgumentParser) -> None:
        importlib.import_module(module).add_arguments(parser)

    def run(args: argparse.Namespace, db: TuningDB) -> int:
        return int(importlib.import_module(module).run(args, db))
    return Action(help_text, add, run, creates)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="tuning database (default: $CONVSEL_TUNING_DB or the user data "
                             "directory)")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, action in ACTIONS.items():
        action.add_arguments(sub.add_parser(name, help=action.help, description=action.help))


def run(args: argparse.Namespace) -> int:
    action = ACTIONS[args.action]
    target = args.db if args.db is not None else default_target()
    if action.when_missing is not None and not is_url(target) \
            and not Path(target).expanduser().exists():
        return action.when_missing(Path(target).expanduser())
    return action.run(args, TuningDB(target, create=action.creates))


# -- path -------------------------------------------------------------------------------------
def _path(args: argparse.Namespace, db: TuningDB) -> int:
    status = db.status()
    print(status["path"])
    print(f"  {status['entries']} entries, {status['models']} models, schema "
          f"{status['schema_version']}, "
          + ("writable" if status["writable"] else f"read-only: {db.read_only_reason}"))
    return 0


def _no_path(path: Path) -> int:
    print(path)
    print("  no database there yet (`convsel tune` makes one)")
    return 0


# -- list -------------------------------------------------------------------------------------
def _add_list(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")


def _list(args: argparse.Namespace, db: TuningDB) -> int:
    entries = db.entries()
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=2))
        return 0
    for entry in entries:
        print(_describe(entry))
    models = db.models()
    for model in models:
        stale = "" if _current(model) else "  [other version]"
        print(f"model {model['family']}  {model['backend']}/{model['device']}{stale}")
    print(f"{len(entries)} entries, {len(models)} models in {db.path}")
    return 0


# -- export / import --------------------------------------------------------------------------
def _add_file(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a JSON export ('-' = stdout for export)")


def _export(args: argparse.Namespace, db: TuningDB) -> int:
    document = db.export_json()
    text = json.dumps(document, indent=1)
    if args.file == "-":
        print(text)
    else:
        Path(args.file).write_text(text + "\n")
        print(f"exported {len(document['entries'])} entries and {len(document['models'])} "
              f"models to {args.file}")
    return 0


def _import(args: argparse.Namespace, db: TuningDB) -> int:
    try:
        document = json.loads(Path(args.file).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"file={args.file!r}: cannot read a JSON export ({exc})") from None
    result = db.import_json(document)
    print(f"imported {result['imported']} entries and {result['models_imported']} models into "
          f"{db.path}; kept {result['kept']} existing newer entries and "
          f"{result['models_kept']} models; rejected {len(result['rejected'])}")
    for reason in result["rejected"]:
        print(f"  rejected {reason}")
    return 0


# -- rm / prune -------------------------------------------------------------------------------
def _add_rm(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default=None, help="only this backend's")
    parser.add_argument("--device", default=None, metavar="NAME",
                        help="only this device's (its name, as `convsel db list` shows it)")
    parser.add_argument("--winner", default=None, metavar="LABEL",
                        help="only entries this candidate won (e.g. winograd:4x4)")
    parser.add_argument("--models", action="store_true",
                        help="remove the matching fitted models too")
    parser.add_argument("--all", action="store_true", help="no filter: remove every entry")
    parser.add_argument("--dry-run", action="store_true", help="count, remove nothing")
    add_problem_arguments(parser, required=False)


def _rm(args: argparse.Namespace, db: TuningDB) -> int:
    problem = _problem_if_given(args)
    filters = {"backend": args.backend, "device": args.device, "winner": args.winner,
               "problem": problem}
    if not args.all and all(v is None for v in filters.values()):
        raise ValueError("db rm: give --backend, --device, --winner or a problem (--h --w --c "
                         "--k --kernel ...) to say which entries, or --all for every one")
    counts = db.remove(**filters, models=args.models, dry_run=args.dry_run)
    _report_removed(counts, db, args.dry_run)
    return 0


def _add_prune(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="count, remove nothing")


def _prune(args: argparse.Namespace, db: TuningDB) -> int:
    _report_removed(db.prune(dry_run=args.dry_run), db, args.dry_run,
                    why=" of other convsel or implementations versions")
    return 0


def _report_removed(counts: dict[str, int], db: TuningDB, dry_run: bool, why: str = "") -> None:
    verb = "would remove" if dry_run else "removed"
    print(f"{verb} {counts['entries']} entries and {counts['models']} models{why} "
          f"from {db.path}")


def _problem_if_given(args: argparse.Namespace) -> Any:
    sizes = {"--h": args.h, "--w": args.w, "--c": args.c, "--k": args.k,
             "--kernel": args.kernel}
    if all(v is None for v in sizes.values()):
        return None
    missing = [flag for flag, v in sizes.items() if v is None]
    if missing:
        raise ValueError(f"db rm: a problem needs {', '.join(missing)} too")
    return problem_from_args(args)


# -- shared -----------------------------------------------------------------------------------
def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """``path`` takes none."""


def _current(model: dict[str, Any]) -> bool:
    from .._version import __version__
    from ..tuning.entry import IMPLEMENTATIONS_VERSION

    return (model["convsel_version"], model["implementations_version"]) == (
        __version__, IMPLEMENTATIONS_VERSION)


def _describe(e: TuningEntry) -> str:
    ok = {k: v for k, v in e.timings.items() if "median_s" in v}
    best = min(ok, key=lambda k: ok[k]["median_s"]) if ok else None
    verdict = (f"winner {e.winner}" if e.winner else f"tie {'/'.join(e.tie)}" if e.tie
               else "no timing")
    timing = f" {ok[best]['median_s'] * 1e3:.3g} ms" if best else ""
    stale = "" if e.is_current else (f"  [other version: convsel {e.convsel_version}, "
                                     f"implementations {e.implementations_version}]")
    return (f"{e.problem}  {e.backend}/{e.device['name']}: {verdict}{timing}{stale}")


ACTIONS: dict[str, Action] = {
    "path": Action("print the database path and its status", _no_arguments, _path,
                   when_missing=_no_path),
    "list": Action("list the entries and models", _add_list, _list),
    "export": Action("write every entry and fitted model to a JSON file ('-' = stdout)",
                     _add_file, _export),
    "import": Action("add the entries and models of an exported JSON file (where both hold "
                     "one, the newer wins)", _add_file, _import, creates=True),
    "rm": Action("remove the entries (and with --models the models) matching every filter",
                 _add_rm, _rm),
    "prune": Action("remove the entries and models this convsel never uses (other convsel "
                    "or implementations versions)", _add_prune, _prune),
    "verify": elsewhere("convsel.cli.db_verify_cmd", "time each stored winner against its "
                        "runner-up again; confirm, correct or flag the entry"),
    "push": elsewhere("convsel.cli.push_cmd", "send the entries to a convsel server's shared "
                      "store (POST /v1/tuning/entries)"),
}
