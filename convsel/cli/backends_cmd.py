"""``convsel backends``: each backend and device with what it supports (ArmNN's backend
capabilities), and the names a backend list takes (``--backend opencl:1,numpy``)."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--transfers", action="store_true",
                        help="measure each device's host-device copy cost (a few ms each)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    from ..backends import capabilities

    report = capabilities(transfers=args.transfers)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


def render(report: list[dict[str, Any]]) -> str:
    lines = []
    for b in report:
        state = "available" if b["available"] else f"not available: {b['reason']}"
        where = "device-resident arrays" if b["device_resident"] else "host arrays"
        lines.append(f"{b['backend']}: {state}; runs {', '.join(b['dtypes'])}; {where}")
        lines.append(f"  algorithms: {', '.join(b['algorithms'])}")
        for d in b["devices"]:
            name = b["backend"] if d["index"] is None else f"{b['backend']}:{d['index']}"
            lines.append(f"  {name:<10} {d['name']} [{d['type']}]")
            if d.get("error"):
                lines.append(f"    {d['error']}")
                continue
            cores = d["tensor_cores"]
            lines.append(f"    F16: {d['f16']}; fp64 {'yes' if d['fp64'] else 'no'}; tensor "
                         f"cores {'yes' if cores['ok'] else 'no'} ({cores['reason']})")
            if d.get("gemm"):
                lines.append(f"    {d['gemm']}; {d['fused_kernels']}")
            if d.get("library"):
                lines.append(f"    {d['library']}")
            if d.get("transfer"):
                t = d["transfer"]
                lines.append(f"    host-device copy: {t['latency_ms']:.3g} ms + "
                             f"{t['gb_per_s']:.3g} GB/s ({t['source']})")
    return "\n".join(lines)
