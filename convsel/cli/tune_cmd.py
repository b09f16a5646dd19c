"""``convsel tune``: time every algorithm for each layer and record the winners."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..algorithms import ALGORITHMS
from ..errors import ConvselError, InvalidProblemError
from ..problem import ConvProblem
from ..tuning.db import TuningDB
from ..tuning.layers import Layer, distinct, load_layers
from ..tuning.measure import Measurement, Shortlist, measure
from ..tuning.timing import CLOCKS, TimingSettings
from .input_shapes import add_input_shape_argument
from .problem_args import add_problem_arguments, problem_from_args
from .remote import add_remote_arguments, finish_remote, start_remote


def add_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by ``tune`` and ``report``: where to run and how long to time."""
    defaults = TimingSettings()
    parser.add_argument("--layers", metavar="FILE", help="layer file: a JSON array as in "
                        "convsel/data/layers.json (the default when --net is given), or the "
                        "output of `convsel plan MODEL.onnx --json`")
    parser.add_argument("--net", action="append", metavar="NAME",
                        help="only this net of the layer file (repeatable)")
    parser.add_argument("--backend", default="numpy", help="numpy or opencl")
    parser.add_argument("--device", default=None, help="backend device (OpenCL: index or name)")
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="tuning database (default: $CONVSEL_TUNING_DB or the user data "
                             "directory)")
    parser.add_argument("--min-time", type=float, default=defaults.min_time, metavar="S",
                        help=f"time each algorithm at least this long (default "
                             f"{defaults.min_time})")
    parser.add_argument("--repeats", type=int, default=defaults.min_runs, metavar="N",
                        help=f"and at least this many runs (default {defaults.min_runs})")
    parser.add_argument("--warmup", type=int, default=defaults.warmup, metavar="N",
                        help=f"untimed runs first (default {defaults.warmup})")
    parser.add_argument("--clock", choices=CLOCKS, default=defaults.clock,
                        help="what a run's time is: 'device' = the device's profiling events "
                             "on device-resident data (OpenCL), 'wall' = the host's clock "
                             "around the whole call, transfers included; 'auto' (default) = "
                             "device where the backend has one, else wall")
    parser.add_argument("--threads", type=int, default=None, metavar="N",
                        help="BLAS/OpenMP threads while timing (default: as the process has "
                             "them); each timing records the threads it ran with")
    parser.add_argument("--exclude", action="append", default=[], metavar="ALGORITHM",
                        help="do not time this algorithm (repeatable)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", metavar="MODEL.onnx",
                        help="tune every Conv of this ONNX model (needs the onnx extra)")
    add_input_shape_argument(parser, "MODEL.onnx: shape of a graph input that inference "
                             "leaves unknown (repeatable), e.g. input=1,3,224,224")
    add_timing_arguments(parser)
    add_problem_arguments(parser, required=False)
    parser.add_argument("--retune", action="store_true",
                        help="time layers the database already holds again")
    parser.add_argument("--sample", type=int, default=0, metavar="N",
                        help="also time N generated shapes drawn from what real nets use "
                             "(training data for `convsel fit`)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="seed of the --sample shapes (default 0; the same seed gives the "
                             "same shapes)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="stop after about this many seconds in all (checked between "
                             "timed runs); layers not reached stay untuned")
    parser.add_argument("--max-workspace-bytes", type=int, default=None, metavar="BYTES",
                        help="do not time candidates whose workspace is larger")
    parser.add_argument("--top", type=int, default=None, metavar="K",
                        help="time only the K candidates this device's fitted model predicts "
                             "fastest, and ACL's pick (every candidate where there is no "
                             "model); `convsel fit` first")
    parser.add_argument("--target", default="cpu",
                        help="with --top: the ACL target whose rules' pick is always timed "
                             "(default cpu)")
    add_remote_arguments(parser)


def settings_from_args(args: argparse.Namespace) -> TimingSettings:
    if args.repeats < 1 or args.min_time < 0 or args.warmup < 0:
        raise ValueError("--repeats must be >= 1, --min-time and --warmup >= 0")
    unknown = sorted(set(args.exclude) - set(ALGORITHMS))
    if unknown:
        raise ValueError(f"--exclude {unknown[0]}: unknown algorithm; known: "
                         f"{', '.join(ALGORITHMS)}")
    return TimingSettings(warmup=args.warmup, min_runs=args.repeats, min_time=args.min_time,
                          clock=args.clock, threads=getattr(args, "threads", None))


def layers_from_args(args: argparse.Namespace) -> list[Layer]:
    """The layers named by MODEL.onnx, --layers/--net, or the one problem given by flags,
    then the --sample shapes."""
    sampled = _sampled(args)
    if sampled and getattr(args, "h", None) is None and args.layers is None and not args.net \
            and not getattr(args, "model", None):
        return sampled
    return distinct(_named_layers(args) + sampled)


def _sampled(args: argparse.Namespace) -> list[Layer]:
    count = getattr(args, "sample", 0) or 0
    if count < 0:
        raise ValueError(f"--sample {count}: must be >= 0")
    if not count:
        return []
    from ..tuning.sample import sample_layers

    return sample_layers(count, getattr(args, "seed", 0))


def _named_layers(args: argparse.Namespace) -> list[Layer]:
    if getattr(args, "model", None):
        return layers_from_model(args.model, getattr(args, "input_shape", []))
    if args.layers is not None and not args.net and _is_plan(args.layers):
        return layers_from_plan(args.layers)
    if getattr(args, "h", None) is not None:
        missing = [f"--{n}" for n in ("w", "c", "k", "kernel") if getattr(args, n) is None]
        if missing:
            raise ValueError(f"a problem given by flags also needs {', '.join(missing)}")
        return [Layer("cli", "problem", problem_from_args(args))]
    if args.layers is None and not args.net:
        raise ValueError("say what to tune: MODEL.onnx, --net NAME, --layers FILE, --sample N, or "
                         "problem flags (--h --w --c --k --kernel ...)")
    layers, messages = load_layers(args.layers, args.net)
    for message in messages:
        print(f"warning: {message}", file=sys.stderr)
    return distinct(layers)


def layers_from_model(path: str, input_shapes: list[str]) -> list[Layer]:
    """Every Conv of an ONNX model as a layer (the planner reads it; nothing runs)."""
    from ..onnx import plan
    from .input_shapes import named_for_the_command_line, parse

    with named_for_the_command_line(input_shapes):
        planned = plan(path, input_shapes=parse(input_shapes))
    net = Path(path).stem
    for skipped in planned.skipped:
        print(f"warning: {net}/{skipped.name} ({skipped.op_type}) not tuned: {skipped.reason}",
              file=sys.stderr)
    return [Layer(net, node.name, node.problem) for node in planned.nodes]


def _is_plan(path: str) -> bool:
    """A JSON object (a plan) rather than an array (a layer file)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(4096).lstrip()[:1] == "{"
    except (OSError, UnicodeDecodeError):
        return False


def layers_from_plan(path: str) -> list[Layer]:
    """The layers of a `convsel plan --json` document (its nodes' problems)."""
    try:
        document = json.loads(Path(path).read_text())
        nodes = document["nodes"]
        net = str((document.get("model") or {}).get("graph") or Path(path).stem)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InvalidProblemError("layers", path, f"not a `convsel plan --json` document: "
                                  f"{exc}") from None
    layers = []
    for i, node in enumerate(nodes):
        name = str(node.get("name") or f"#{i}") if isinstance(node, dict) else f"#{i}"
        try:
            layers.append(Layer(net, name, ConvProblem.from_dict(node["problem"])))
        except (InvalidProblemError, KeyError, TypeError) as exc:
            print(f"warning: {net}/{name}: not a valid problem ({exc}); skipped",
                  file=sys.stderr)
    return layers


def device_arg(value: str | None) -> Any:
    """An OpenCL device index given as a number, else the string as given."""
    return int(value) if value is not None and value.isdigit() else value


def run(args: argparse.Namespace) -> int:
    layers = layers_from_args(args)
    settings = settings_from_args(args)
    db = TuningDB(args.db)
    device = device_arg(args.device)
    todo, done = _split(layers, db, args, device)
    if done:
        print(f"{len(done)} layer(s) already tuned for this device: skipped (--retune to time "
              "them again, `convsel db verify` to check them)")
    narrow = _shortlister(args, db, device)
    remote = start_remote(args, db, done, device)   # --remote: send what is already tuned
    bar = _bar(len(todo), args.no_progress)
    measured, failures, started = 0, 0, time.perf_counter()
    deadline = None if args.budget is None else started + args.budget
    unreached = 0
    try:
        for layer in todo:
            left = None if deadline is None else deadline - time.perf_counter()
            if left is not None and left <= 0:
                unreached += 1
                continue
            bar.set_description(_short(layer.label))
            try:
                m = measure(layer.problem, args.backend, device, settings=settings,
                            on_candidate=lambda label: bar.set_postfix_str(label),
                            exclude=args.exclude, budget_s=left,
                            max_workspace_bytes=args.max_workspace_bytes,
                            shortlist=narrow(layer.problem))
            except ConvselError as exc:
                failures += 1
                bar.write(f"{layer.label}: not tuned: {exc}")
            else:
                if m.complete:
                    entry = m.entry()
                    db.record(entry)
                    measured += 1
                    bar.write(_line(layer, m))
                    if remote is not None:
                        remote.send([entry])   # kept locally first: a failed send resumes
                else:   # a partial race would record a winner that never met the others
                    unreached += 1
                    bar.write(f"{layer.label}: not recorded: the --budget ran out while "
                              "timing it")
            bar.update(1)
    except KeyboardInterrupt:
        bar.close()
        print(f"interrupted: {measured} layer(s) measured and kept in {db.path}; the layer "
              "being timed was dropped", file=sys.stderr)
        finish_remote(remote)
        return 130
    bar.close()
    finish_remote(remote)
    print(f"tuned {measured} layer(s) in {time.perf_counter() - started:.1f} s on "
          f"{args.backend}; {failures} could not be tuned; database {db.path}")
    if unreached:
        print(f"the {args.budget:g} s budget ran out: {unreached} layer(s) not tuned (run "
              "again to continue: tuned layers are skipped)")
    return 1 if failures and not measured else 0


def _shortlister(args: argparse.Namespace, db: TuningDB,
                 device: Any) -> Callable[[ConvProblem], Shortlist | None]:
    """Per problem, what --top leaves to time (None: everything). Without a usable model it
    says so once and every candidate is timed."""
    if args.top is None:
        return lambda _: None
    if args.sample:
        # a model's own picks as its training data would only confirm its mistakes
        raise ValueError("--top with --sample: sampled shapes are the model's training data "
                         "and are timed in full; tune them in a run of their own")
    from ..policies.predicted import shortlist
    from ..rules import as_rules
    from ..targets import resolve_target

    rules = as_rules(None)
    target = resolve_target(args.target, rules)
    told: list[str] = []

    def narrow(problem: ConvProblem) -> Shortlist | None:
        found, why = shortlist(problem, target, rules, top=args.top, backend=args.backend,
                               device=device, db=db)
        if found is None and not told:
            told.append(why)
            print(f"--top {args.top}: {why}; timing every candidate", file=sys.stderr)
        return found
    return narrow


def _split(layers: list[Layer], db: TuningDB, args: argparse.Namespace,
           device: Any) -> tuple[list[Layer], list[Layer]]:
    if args.retune:
        return layers, []
    from .. import threads
    from ..backends.registry import on_host
    from ..tuning.identity import device_identity

    ident = device_identity(args.backend, device)
    with threads.limited(getattr(args, "threads", None)) as counts:
        pass
    done = []
    for x in layers:
        entry = db.lookup(x.problem, args.backend, ident)
        # an entry timed with other threads is timed again (a noisy one is kept, and says
        # so: `convsel db verify` or --retune times it again)
        if entry is not None and (
                not on_host(args.backend) or not threads.differs(entry.threads, counts)):
            done.append(x)
    return [x for x in layers if x not in done], done


def _line(layer: Layer, m: Measurement) -> str:
    ok = sorted(((v["median_s"], k) for k, v in m.timings.items() if "median_s" in v))
    times = ", ".join(f"{k} {t * 1e3:.3g}" for t, k in ok)
    verdict = f"winner {m.winner}" if m.winner else f"tie {'/'.join(m.tie)}"
    errors = "".join(f"; {k} failed: {e}" for k, e in m.errors.items())
    noise = f"; NOISY, not confident: {'; '.join(m.noise)}" if m.noise else ""
    return f"{layer.label}: {verdict} (ms: {times}){errors}{noise}"


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _bar(total: int, disabled: bool) -> Any:
    from tqdm import tqdm

    # a bar only where someone watches: not into pipes and CI logs, not for an empty run
    off = disabled or total == 0 or not sys.stderr.isatty()
    return tqdm(total=total, unit="layer", disable=off, file=sys.stderr,
                dynamic_ncols=True, leave=False)
