"""Where ResNet-50's slow GEMM layers spend their time, against torch in the same process.

    python benchmarks/cpu_gemm_probe.py --layers layers.json --rounds 3 --out probe.json

For each layer named in ``LAYERS`` (the 1x1 and stride-2 / 7x7 3x3 layers above 1.3x
torch, the stem, and one 1x1 that is at torch's speed as a control) this times, in
interleaved blocks (pause, 2 warm-ups, repeats, median; ``--rounds`` rounds of all
blocks), torch's convolution, convsel's algorithms as they run, and their parts and
variants one at a time: the GEMM alone through numpy (2 and 1 BLAS threads, the weights
in C or Fortran order), the epilogue alone, the im2col alone, torch's own GEMM on the same
matrices (``torch.addmm``: is torch ahead by its GEMM or by its fusion?), scipy's sgemm
with the bias as beta = 1 (isolated: see blas.py on mixing it with numpy's), and the
matrix and GEMM in chunks of output rows (the stem: the 7.4 MB matrix never leaves L2).
With ``--orientation`` (and ``--layer`` to choose layers) it times instead the GEMM as
OpenBLAS sees it turned (output channels x pixels, a planar output, with and without the
copy back to channels-last) and with the depth padded to a multiple of 16, beside the plain
GEMM, MKL's and the algorithms. A measurement tool: benchmarks/NOTES-cpu.md, "GEMM layers
against oneDNN", says what its output decided.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_zmm import block  # noqa: E402  (the same interleaved timing block)

LAYERS = ("conv1", "layer1.0.conv1", "layer1.{1,2}.conv1",
          "layer1.{0,1,2}.conv3 + layer1.0.downsample", "layer2.0.conv2 (stride 2)",
          "layer4.{1,2}.conv2", "layer3.{1..5}.conv1")


def _torch() -> Any:
    try:
        import torch
    except ImportError:   # a smoke test on a machine without torch
        return None
    return torch


def variants(p: Any, x: np.ndarray, w: np.ndarray, b: np.ndarray, orientation: bool = False,
             ) -> dict[str, Callable[[], Any]]:
    """name -> a callable for one layer (prepared here, outside the timing)."""
    from cpu import candidates, torch_runner
    from scipy.linalg import blas as sblas

    from convsel.backends import implementation
    from convsel.backends.numpy import bands, threads
    from convsel.backends.numpy.fused.activation import code_of
    from convsel.backends.numpy.fused.epilogue import bias_activation
    from convsel.backends.numpy.fused.im2col import im2col
    from convsel.rules import default_rules

    torch = _torch()
    out: dict[str, Callable[[], Any]] = {}
    if torch is not None:
        out["torch"] = torch_runner(p, x, w, b)
    for label, (algorithm, _, params) in candidates(p, default_rules(), None).items():
        if label.split(":")[0] in ("gemm_1x1", "im2col_gemm", "indirect_gemm", "winograd"):
            op = implementation(algorithm, "numpy").prepare(p, w, b, params, None)
            out[label] = lambda op=op: op.run(x)
    if p.n * p.out_h * p.out_w < bands.COLUMN_SPLIT_MAX_ROWS or p.kh > 1:
        with bands.forced(True):
            op = implementation("im2col_gemm", "numpy").prepare(p, w, b, {}, None)
        out["im2col_gemm+bands"] = lambda op=op: op.run(x)

    one_by_one = p.kh == 1 and p.stride == (1, 1)
    taps = p.kh * p.kw * p.c
    rows = p.n * p.out_h * p.out_w
    wmat = np.ascontiguousarray(w.reshape(p.k, taps).T)            # taps x K
    if one_by_one:
        a = x.reshape(rows, p.c)
    else:
        cols = np.empty((p.n, p.out_h, p.out_w, taps + 1), np.float32)
        im2col(x, cols, 0, (p.kh, p.kw), p.stride, p.dilation, (p.pad[0], p.pad[2]), True)
        a = cols.reshape(rows, taps + 1)
        wmat = np.ascontiguousarray(np.vstack([wmat, b[None]]))
        out["im2col_only"] = lambda: im2col(x, cols, 0, (p.kh, p.kw), p.stride, p.dilation,
                                            (p.pad[0], p.pad[2]), True)
    if orientation:
        return _orientation(p, a, wmat, out, torch)
    wf = np.asfortranarray(wmat)
    y = np.empty((rows, p.k), np.float32)
    relu = code_of(None)
    out["gemm2"] = lambda: np.matmul(a, wmat, out=y)
    out["gemm2_wF"] = lambda: np.matmul(a, wf, out=y)

    def gemm1() -> None:
        with threads.blas_threads(1):
            np.matmul(a, wmat, out=y)
    out["gemm1"] = gemm1
    if one_by_one:
        out["epilogue_only"] = lambda: bias_activation(y, b, relu)
        out["gemm2+epilogue"] = lambda: (np.matmul(a, wmat, out=y), bias_activation(y, b, relu))
        half = rows // 2

        def halves() -> None:
            for s in (slice(0, half), slice(half, rows)):
                np.matmul(a[s], wmat, out=y[s])
                bias_activation(y[s], b, relu)
        out["halves+epilogue"] = halves
        aug = np.empty((rows, p.c + 1), np.float32)
        waug = np.ascontiguousarray(np.vstack([wmat, b[None]]))

        def ones() -> None:
            np.copyto(aug[:, : p.c], a)
            aug[:, p.c] = 1.0
            np.matmul(aug, waug, out=y)
        out["ones_column"] = ones

        def sgemm_beta() -> None:
            y[...] = b
            sblas.sgemm(1.0, wmat.T, a.T, 1.0, y.T, overwrite_c=True)
        out["scipy_sgemm_beta1"] = sgemm_beta
    else:
        # the matrix and the GEMM in chunks of output rows (one L2-sized matrix at a time)
        for chunk_rows in (4, 8, 16):
            if chunk_rows >= p.out_h:
                continue
            buf = np.empty((1, chunk_rows, p.out_w, taps + 1), np.float32)
            y4 = y.reshape(p.n, p.out_h, p.out_w, p.k)

            def chunked(r: int = chunk_rows, buf: np.ndarray = buf, y4: np.ndarray = y4) -> None:
                for top in range(0, p.out_h, r):
                    n_rows = min(r, p.out_h - top)
                    part = buf[:, :n_rows]
                    im2col(x, part, top, (p.kh, p.kw), p.stride, p.dilation,
                           (p.pad[0], p.pad[2]), True)
                    np.matmul(part.reshape(-1, taps + 1), wmat,
                              out=y4[0, top: top + n_rows].reshape(-1, p.k))
            out[f"chunked{chunk_rows}"] = chunked
    if torch is None:
        return out
    at, wt, bt = torch.from_numpy(a), torch.from_numpy(wmat), torch.from_numpy(b)
    yt = torch.from_numpy(y)

    def torch_mm() -> None:
        with torch.inference_mode():
            if one_by_one:
                torch.addmm(bt, at, wt, out=yt)
            else:
                torch.mm(at, wt, out=yt)
    out["torch_mm"] = torch_mm
    return out


def _orientation(p: Any, a: np.ndarray, wmat: np.ndarray, out: dict[str, Callable[[], Any]],
                 torch: Any) -> dict[str, Callable[[], Any]]:
    """The GEMM as OpenBLAS sees it, turned: the plain product; the transposed one
    (output channels x pixels, i.e. a planar output) alone and with the copy back to
    channels-last; the depth padded with zeros to a multiple of 16; MKL's for reference."""
    rows, depth = a.shape
    k = wmat.shape[1]
    y = np.empty((rows, k), np.float32)
    y_t = np.empty((k, rows), np.float32)
    w_t = np.ascontiguousarray(wmat.T)
    padded = -(-depth // 16) * 16
    a_pad = np.zeros((rows, padded), np.float32)
    a_pad[:, :depth] = a
    w_pad = np.zeros((padded, k), np.float32)
    w_pad[:depth] = wmat
    out["gemm2"] = lambda: np.matmul(a, wmat, out=y)
    out["gemm_turned"] = lambda: np.matmul(w_t, a.T, out=y_t)
    out["gemm_turned+copy"] = lambda: (np.matmul(w_t, a.T, out=y_t), np.copyto(y, y_t.T))
    if padded != depth:
        out[f"gemm2_depth{padded}"] = lambda: np.matmul(a_pad, w_pad, out=y)
    if torch is not None:
        at, wt, yt = torch.from_numpy(a), torch.from_numpy(wmat), torch.from_numpy(y)

        def torch_mm() -> None:
            with torch.inference_mode():
                torch.mm(at, wt, out=yt)
        out["torch_mm"] = torch_mm
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--layer", action="append", help=f"layers (default: {', '.join(LAYERS)})")
    ap.add_argument("--orientation", action="store_true",
                    help="time the GEMM turned and depth-padded instead of the other variants")
    args = ap.parse_args()
    torch = _torch()

    from convsel.backends.numpy import accel, device_identity, threads
    from convsel.tuning.layers import load_layers

    threads.set_threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
    layers = {la.name: la for la in load_layers(args.layers, ["resnet50"])[0]}
    prepared = {}
    names = tuple(args.layer or LAYERS)
    for name in names:
        p = layers[name].problem
        rng = np.random.default_rng(0)
        x = rng.standard_normal((p.n, p.h, p.w, p.c)).astype(np.float32)
        w = rng.standard_normal(p.weights_shape).astype(np.float32)
        b = rng.standard_normal(p.k).astype(np.float32)
        prepared[name] = (p, variants(p, x, w, b, args.orientation))
    times: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    for _ in range(args.rounds):
        for name, (p, runs) in prepared.items():
            repeats = args.repeats if p.flops > 2e8 else 3 * args.repeats
            for label, run in runs.items():
                times[name].setdefault(label, []).append(block(run, repeats) * 1e3)
    summary = {}
    for name, per in times.items():
        torch_ms = statistics.median(per.get("torch", per["gemm2"]))   # no torch: smoke test
        summary[name] = {label: {"ms": statistics.median(v), "rounds_ms": v,
                                 "vs_torch": statistics.median(v) / torch_ms}
                         for label, v in per.items()}
        print(f"\n{name}  (torch {torch_ms:.3f} ms)")
        for label, row in sorted(summary[name].items(), key=lambda kv: kv[1]["ms"]):
            spread = "/".join(f"{t:.3f}" for t in row["rounds_ms"])
            print(f"  {label:24} {row['ms']:7.3f} ms  {row['vs_torch']:5.2f}x  ({spread})")
    args.out.write_text(json.dumps({
        "command": " ".join(sys.argv), "device": {**device_identity(), "fused": accel.describe()},
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "layers": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
