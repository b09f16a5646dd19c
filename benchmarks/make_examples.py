"""Write the files the README's curl examples send: x.npy (NHWC float32), w.npy (OHWI) and
model.onnx (two Conv + Relu layers, opset 17; needs the onnx extra).

    python benchmarks/make_examples.py [DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def write_tensors(out: Path) -> None:
    rng = np.random.default_rng(0)
    # the problem of the README's multipart example: n=1, h=w=8, c=4, k=8, 3x3, pad 1
    np.save(out / "x.npy", rng.standard_normal((1, 8, 8, 4), dtype=np.float32))
    np.save(out / "w.npy", rng.standard_normal((8, 3, 3, 4), dtype=np.float32))


def write_model(out: Path) -> bool:
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        print("model.onnx not written: pip install 'convsel[onnx]'", file=sys.stderr)
        return False
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3), dtype=np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 16, 1, 1), dtype=np.float32), "w2")
    nodes = [helper.make_node("Conv", ["input", "w1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["output"], name="conv2")]
    graph = helper.make_graph(
        nodes, "example", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                         [1, 3, 32, 32])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 32, 32, 32])],
        [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="convsel-examples")
    onnx.checker.check_model(model)
    onnx.save(model, out / "model.onnx")
    return True


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(".")
    out.mkdir(parents=True, exist_ok=True)
    write_tensors(out)
    wrote = ["x.npy", "w.npy"] + (["model.onnx"] if write_model(out) else [])
    print(f"wrote {', '.join(str(out / name) for name in wrote)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
