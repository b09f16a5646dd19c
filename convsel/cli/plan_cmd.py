"""``convsel plan MODEL.onnx``: the method for every Conv of an ONNX model, and a summary."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import tables
from . import input_shapes
from .input_shapes import add_input_shape_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="an .onnx file (read, never run; external data unread)")
    parser.add_argument("--target", default="cpu", help="cpu, cpu-nofp16, G77, Mali-G78AE ...")
    parser.add_argument("--policy", default="acl", help="acl (the rules), measured (the tuning "
                        "database) or predicted (the fitted model)")
    add_input_shape_argument(parser, "shape of a graph input that inference leaves unknown "
                             "(repeatable), e.g. input=1,3,224,224")
    parser.add_argument("--fast-math", action="store_true", help="ACL's enable_fast_math")
    parser.add_argument("--layout", default="NCHW", help="layout ACL runs in (ONNX is NCHW)")
    parser.add_argument("--rules", default=None, help="heuristics file (default: packaged)")
    parser.add_argument("--backend", dest="backends", default=None, metavar="BACKENDS",
                        help="where the Convs run: a backend, or several in order of "
                        "preference (opencl,numpy; opencl:1 names a device; auto); prints each "
                        "Conv's backend and the host-device switches. measured/predicted: "
                        "whose timings or model (default numpy)")
    parser.add_argument("--db", default=None, metavar="PATH", help="measured/predicted: "
                        "tuning database (default: $CONVSEL_TUNING_DB or the user data dir)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print each node's deciding reason")


def run(args: argparse.Namespace) -> int:
    from ..onnx import plan
    from ..policies import policy_options

    shapes = input_shapes.parse(args.input_shape)
    # a policy that does not take an option refuses it, naming those that do
    options = {k: v for k, v in (("db", args.db),) if v is not None}
    if args.db is not None and "db" in policy_options(args.policy):
        # reading: a mistyped path is an error, not a new empty store
        from ..tuning.db import TuningDB

        options["db"] = TuningDB(args.db, create=False)
    with input_shapes.named_for_the_command_line(args.input_shape):
        result = plan(args.model, args.target, args.policy, input_shapes=shapes,
                      fast_math=args.fast_math, layout=args.layout, rules=args.rules,
                      backend=args.backends, **options)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render(result.to_dict(), verbose=args.verbose))
    return 0


def render(d: dict[str, Any], verbose: bool = False) -> str:
    """The plan as a table: one row per Conv, then notes and the summary."""
    m = d["model"]
    inputs = ", ".join(f"{k} {v}" for k, v in m["inputs"].items())
    lines = [(f"model    {m['graph'] or '?'} ({m['producer'] or 'unknown producer'}), opset "
              f"{m['opset']}, inputs: {inputs}"),
             f"target   {d['target']}   policy {d['policy']}   rules {d['rules']['version']}",
             ""]
    headers = ["node", "input NCHW -> K", "kernel", "method", "algorithm", "rule",
               "activation", "time"] + (["reason"] if verbose else [])
    rows = [[n["name"], _io(n["problem"]), _kernel(n["problem"]), n["method"],
             n["algorithm"] + _tile(n), n["rule"], n["activation"] or "-", _time(n["time"])]
            + ([n["reason"]] if verbose else []) for n in d["nodes"]]
    lines.append(tables.render(headers, rows))
    lines += _notes(d)
    lines += _placement(d)
    lines.append("")
    lines.append(_summary(d["summary"], d["policy"]))
    return "\n".join(lines)


def _placement(d: dict[str, Any]) -> list[str]:
    """Planned over backends: each Conv's backend and algorithm, its host-device copies, the
    backends passed over, and the model's switches."""
    placed = d.get("placement")
    if not placed:
        return []
    s = d["summary"]
    lines = ["", f"backends {', '.join(placed['backends'])}: {placed['assignment']}"]
    for n in d["nodes"]:
        copies = [w for w, on in (("copy in", n["copies"]["in"]), ("copy out",
                                                                    n["copies"]["out"])) if on]
        lines.append(f"  {n['name']:<24} {n['backend'] or 'none':<10} "
                     f"{n['algorithm'] + _tile(n):<18} {', '.join(copies)}")
        lines += [f"  {'':<24} passed over: {why}" for why in n["passed_over"]]
    spent = (f" ({s['transfer_ms']:.3g} ms of copies)" if s.get("transfer_ms") is not None
             else "")
    lines.append(f"switches {s['switches']} host-device copies{spent}; "
                 + ", ".join(f"{b} {k}" for b, k in s["backends"].items()))
    return lines


def _io(p: dict[str, Any]) -> str:
    return f"{p['n']}x{p['c']}x{p['h']}x{p['w']} -> {p['k']}"


def _kernel(p: dict[str, Any]) -> str:
    s = f"{p['kh']}x{p['kw']} s{p['stride'][0]}"
    if p["stride"][0] != p["stride"][1]:
        s += f"x{p['stride'][1]}"
    if any(p["pad"]):
        s += " p" + ",".join(map(str, p["pad"]))
    if p["dilation"] != [1, 1]:
        s += f" d{p['dilation'][0]}"
    if p["groups"] != 1:
        s += f" g{p['groups']}"
    return s if p["dtype"] == "F32" else f"{s} {p['dtype']}"


def _tile(n: dict[str, Any]) -> str:
    tile = n["params"].get("tile")
    return f" {tile[0]}x{tile[1]}" if tile else ""


def _time(t: dict[str, Any] | None) -> str:
    if not t or t.get("median_ms") is None:
        return "-"
    return f"{t['median_ms']:.3g} ms"


def _notes(d: dict[str, Any]) -> list[str]:
    lines = []
    for n in d["nodes"]:
        for miss in n["near_misses"]:
            lines.append(f"near miss  {n['name']}: {miss['rule']} row '{miss['row']}': "
                         f"{miss['field']} is {miss['problem_value']}, the row has "
                         f"{miss['row_value']}")
        if n["fusion_note"]:
            lines.append(f"not fused  {n['name']}: {n['fusion_note']}")
        if n["fallback"]:
            lines.append(f"fallback   {n['name']}: {n['fallback']}")
        if "acl" in n and n["acl"]["algorithm"] != n["algorithm"]:
            lines.append(f"measured   {n['name']}: ACL's rules pick {n['acl']['method']} "
                         f"({n['acl']['algorithm']}, {n['acl']['rule']})")
    for s in d["skipped"]:
        lines.append(f"skipped    {s['name']} ({s['op_type']}): {s['reason']}")
    return [""] + lines if lines else []


def _summary(s: dict[str, Any], policy: str) -> str:
    methods = ", ".join(f"{k} {v}" for k, v in s["methods"].items())
    bad = ", ".join(f"{u['node']} ({u['method']}: {u['reason']})" for u in s["unrunnable"])
    text = (f"summary  {s['convolutions']} convolutions: {methods}; "
            f"{s['fused_activations']} fused activations; {s['gflops']:.3g} GFLOP; "
            f"{len(s['near_misses'])} with near misses")
    if policy == "measured":
        text += (f"\n         measured {s['measured']} of {s['convolutions']} nodes "
                 f"({s['measured_ms']:.3g} ms in all); the others answered from ACL's rules")
    text += "\n         no backend runs: " + (bad or "none (every method has an implementation)")
    return text
