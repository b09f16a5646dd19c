"""F16 accuracy of every numpy algorithm against the float64 reference.

    python benchmarks/f16_error.py

F16 runs half in, half out with float32 accumulation. The reference convolves the same half
inputs in float64, so the printed relative error (max |y - ref| / max |ref|) is what the
algorithm and the final rounding to half add.
"""

from __future__ import annotations

import numpy as np

from convsel import ConvProblem, prepare
from convsel.algorithms import ALGORITHMS, supports, winograd_tiles
from convsel.reference import conv2d_reference
from convsel.rules import default_rules

PROBLEMS = {
    "resnet50 layer2 3x3 28x28x128->128": ConvProblem(1, 28, 28, 128, 128, 3, 3, pad=1),
    "resnet50 layer2 1x1 28x28x512->128": ConvProblem(1, 28, 28, 512, 128, 1, 1),
    "inception_v3 5x5 35x35x48->64": ConvProblem(1, 35, 35, 48, 64, 5, 5, pad=2),
}


def main() -> None:
    rules = default_rules()
    rng = np.random.default_rng(0)
    print("relative error of F16 against float64 (max |y - ref| / max |ref|)")
    for name, problem in PROBLEMS.items():
        p = problem.replace(dtype="F16")
        x = rng.standard_normal(p.input_shape).astype(np.float16)
        w = (rng.standard_normal(p.weights_shape) / np.sqrt(p.kh * p.kw * p.c)).astype(np.float16)
        ref = conv2d_reference(p, x, w)
        for algorithm in ALGORITHMS:
            tiles = winograd_tiles(p, rules) if algorithm == "winograd" else [None]
            for tile in tiles:
                if not supports(algorithm, p, rules, {"tile": tile} if tile else {}).ok:
                    continue
                y = prepare(p, w, algorithm=algorithm, tile=tile).run(x).astype(np.float64)
                label = algorithm + (f" {tile[0]}x{tile[1]}" if tile else "")
                err = np.abs(y - ref).max() / np.abs(ref).max()
                print(f"  {name:36} {label:16} {err:.2e}")


if __name__ == "__main__":
    main()
