"""``convsel devices``: OpenCL platforms and devices with their key limits."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="the backend description as JSON")


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    return ""


def run(args: argparse.Namespace) -> int:
    from ..backends import opencl

    info = opencl.describe()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0 if info["available"] else 1
    if not info["available"]:
        print(f"OpenCL: not available ({info['reason']})")
        return 1
    for p_index, platform in enumerate(info["platforms"]):
        print(f"platform {p_index}: {platform['name']} ({platform['version']})")
        for d_index, d in enumerate(platform["devices"]):
            print(f"  device {p_index}:{d_index}: {d['name']} [{d['type']}]")
            print(f"    driver {d['driver']}, {d['version']}, {d['compute_units']} compute "
                  f"units at {d['max_clock_mhz']} MHz")
            print(f"    global memory {_size(d['global_mem_bytes'])}, max allocation "
                  f"{_size(d['max_alloc_bytes'])}, local memory {_size(d['local_mem_bytes'])}")
            items = "x".join(str(v) for v in d["max_work_item_sizes"])
            print(f"    max work-group {d['max_work_group_size']}, max work-items {items}, "
                  f"fp16 {'yes' if d['fp16'] else 'no'}, fp64 {'yes' if d['fp64'] else 'no'}")
    default = info.get("default_device")
    print(f"default device: {default}" if default else
          f"default device: none ({info.get('device_error')})")
    return 0
