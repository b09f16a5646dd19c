"""Per run: fastest convsel / torch (geometric mean over the layers) with every candidate,
with numpy's alone (oneMKL GEMMs, fused kernels) and with oneDNN's direct alone; torch's
own geometric mean (ms) to show its drift between runs; the largest per-layer ratio; how
many layers oneDNN's kernel is the fastest on.

    python split.py call1/cpu-resnet50-onednn-1.json ...
"""

from __future__ import annotations

import json
import math
import statistics
import sys


def geo(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(v) for v in values))


def split(path: str) -> str:
    with open(path) as f:
        run = json.load(f)
    rows = [r for r in run["layers"] if r.get("torch_s")]
    def ratio(keep) -> list[float]:
        out = []
        for r in rows:
            mine = [t for label, t in r["time_s"].items() if label != "torch" and keep(label)]
            if mine:
                out.append(min(mine) / r["torch_s"])
        return out
    every = ratio(lambda lb: True)
    numpy_only = ratio(lambda lb: "@" not in lb)
    onednn_only = ratio(lambda lb: lb.endswith("@onednn"))
    won = sum(1 for r in rows if r["fastest"] and r["fastest"].endswith("@onednn"))
    torch_ms = geo([r["torch_s"] * 1e3 for r in rows])
    return (f"{path}: {len(rows)} layers; every candidate {geo(every):.2f} (worst "
            f"{max(every):.2f}); numpy only {geo(numpy_only):.2f} (worst {max(numpy_only):.2f});"
            f" oneDNN's direct only {geo(onednn_only):.2f} (worst {max(onednn_only):.2f}); "
            f"oneDNN fastest on {won}; torch geomean {torch_ms:.3f} ms")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(split(p))
