"""Time one select() call, cold (first time a problem is seen) and repeated (cached), over the
network layers of layers.json, for a CPU and GPU targets.

    python benchmarks/selection.py [--layers ../shared/data/layers.json] [--out results/select.json]

Prints per-target medians and writes JSON. Absolute times on a shared machine are noisy:
the figures are the best of several passes (cold) and the median per call (repeated).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from convsel import ConvProblem, select
from convsel.selection import _select_acl

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("n", "h", "w", "c", "k", "kh", "kw", "stride", "pad", "dilation", "groups")


def load_problems(path: Path) -> list[ConvProblem]:
    layers = json.loads(path.read_text())
    return [ConvProblem(**{f: layer[f] for f in FIELDS}) for layer in layers]


def cold_us(problems: list[ConvProblem], target: str, passes: int) -> list[float]:
    per_call = []
    for _ in range(passes):
        _select_acl.cache_clear()
        start = time.perf_counter()
        for p in problems:
            select(p, target)
        per_call.append((time.perf_counter() - start) / len(problems) * 1e6)
    return per_call


def repeated_us(problems: list[ConvProblem], target: str, passes: int) -> list[float]:
    for p in problems:
        select(p, target)
    per_call = []
    for _ in range(passes):
        start = time.perf_counter()
        for p in problems:
            select(p, target)
        per_call.append((time.perf_counter() - start) / len(problems) * 1e6)
    return per_call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=Path, default=ROOT.parent / "shared/data/layers.json")
    parser.add_argument("--targets", default="cpu,G77,G71,G52,FIFTHGEN")
    parser.add_argument("--passes", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "results/select.json")
    args = parser.parse_args()
    problems = load_problems(args.layers)
    select(problems[0], "cpu")          # load the rules once, outside the timings
    rows = []
    print(f"{len(problems)} problems; µs per select() call")
    print(f"{'target':<10} {'cold best':>10} {'cold median':>12} {'repeated median':>16}")
    for target in args.targets.split(","):
        cold = cold_us(problems, target, args.passes)
        warm = repeated_us(problems, target, args.passes)
        rows.append({"target": target, "cold_best_us": min(cold),
                     "cold_median_us": statistics.median(cold),
                     "repeated_median_us": statistics.median(warm)})
        print(f"{target:<10} {min(cold):>10.1f} {statistics.median(cold):>12.1f} "
              f"{statistics.median(warm):>16.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"problems": len(problems), "rows": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
