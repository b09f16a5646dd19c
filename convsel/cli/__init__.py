"""The ``convsel`` command line. Each subcommand lives in its own module, listed in COMMANDS,
and exposes ``add_arguments(parser)`` and ``run(args) -> int``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from .. import arguments
from ..errors import ConvselError

# name -> (module, one-line help). Modules are imported only when their command runs.
COMMANDS: dict[str, tuple[str, str]] = {
    "select": ("convsel.cli.select_cmd", "which method ACL would choose, and why"),
    "find": ("convsel.cli.find_cmd", "time every algorithm for one problem, ranked"),
    "targets": ("convsel.cli.targets_cmd", "list the CPU and Mali GPU targets"),
    "serve": ("convsel.cli.serve_cmd", "run the HTTP service (FastAPI under uvicorn)"),
    "plan": ("convsel.cli.plan_cmd", "the method for every Conv of an ONNX model"),
    "tune": ("convsel.cli.tune_cmd", "time every algorithm per layer; record the winners"),
    "fit": ("convsel.cli.fit_cmd", "fit a cost model on this device's timings; store it"),
    "db": ("convsel.cli.db_cmd", "the tuning database: path, list, export, import"),
    "report": ("convsel.cli.report_cmd", "each policy's pick against the fastest, per layer"),
    "devices": ("convsel.cli.devices_cmd", "OpenCL platforms and devices with their limits"),
    "backends": ("convsel.cli.backends_cmd", "each backend and device with what it supports"),
    "tune-cl": ("convsel.cli.tune_cl_cmd", "tune OpenCL local work sizes; write the tuning file"),
}


def build_parser() -> argparse.ArgumentParser:
    from .._version import __version__

    parser = argparse.ArgumentParser(
        prog="convsel", description="Convolution algorithm selection: ACL's rules, explained, "
        "executed, measured and served.", formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"convsel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text,
                                    formatter_class=HelpFormatter)
        sub_parser.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(sub_parser)
    return parser


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default (where it has one and help text)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or action.default is False or action.default == [] \
                or "default" in text:
            return text   # nothing useful to add, or the text says it already
        return super()._get_help_string(action)


# Flags that are a library argument under another command's name, checked before any
# command runs by the library's one check of that argument.
CHECKED_FLAGS: dict[str, Any] = {
    "backend": arguments.backend,
    "backends": arguments.backends,   # a command that takes several (plan --backend)
    "max_workspace_bytes": arguments.workspace_limit,
    "top": arguments.top,
    "budget": lambda value: arguments.seconds("budget", value),
}


def _check_flags(args: argparse.Namespace) -> None:
    for dest, check in CHECKED_FLAGS.items():
        if getattr(args, dest, None) is not None:
            setattr(args, dest, check(getattr(args, dest)))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_flags(args)
        code = int(importlib.import_module(args._module).run(args))
        sys.stdout.flush()   # a closed pipe shows up here, inside the handler below
        return code
    except BrokenPipeError:
        # `convsel ... --json | head`: the reader left; say nothing, as cat does. Point
        # stdout at devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except (ConvselError, ValueError) as exc:
        print(f"convsel {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"convsel {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
