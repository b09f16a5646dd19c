"""Small ONNX models for the plan tests, built with onnx.helper (no downloads).

``Chain`` appends nodes to a running tensor: ``Chain((1, 3, 32, 32)).conv(8, 3, pads=[1] * 4)
.relu().model()``. Weights are zero initializers of the right shape: planning reads shapes only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ELEM = {"F32": TensorProto.FLOAT, "F16": TensorProto.FLOAT16, "F64": TensorProto.DOUBLE}
NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


class Chain:
    """A linear graph under construction; ``cur`` is the last tensor, ``channels`` its C."""

    def __init__(self, shape: Sequence[Any] = (1, 3, 32, 32), dtype: str = "F32",
                 input_name: str = "input") -> None:
        self.dtype = dtype
        self.input = helper.make_tensor_value_info(input_name, ELEM[dtype], list(shape))
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.cur = input_name
        self.channels = int(shape[1])
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def conv(self, k: int, kernel: int | tuple[int, int] = 3, *, name: str | None = None,
             group: int = 1, bias: bool = True, kernel_attr: bool = True,
             src: str | None = None, **attrs: Any) -> Chain:
        """Append a Conv with K outputs; ``attrs`` are ONNX attributes (pads, strides, ...)."""
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        name = name or self._name("conv")
        cin = self.channels
        w = numpy_helper.from_array(np.zeros((k, cin // group, kh, kw), NP[self.dtype]),
                                    f"{name}.weight")
        inputs = [src or self.cur, w.name]
        self.inits.append(w)
        if bias:
            b = numpy_helper.from_array(np.zeros((k,), NP[self.dtype]), f"{name}.bias")
            self.inits.append(b)
            inputs.append(b.name)
        if kernel_attr:
            attrs["kernel_shape"] = [kh, kw]
        if group != 1:
            attrs["group"] = group
        return self._add(helper.make_node("Conv", inputs, [f"{name}.out"], name=name, **attrs),
                         k)

    def relu(self, name: str | None = None) -> Chain:
        name = name or self._name("relu")
        return self._add(helper.make_node("Relu", [self.cur], [f"{name}.out"], name=name))

    def clip(self, lo: float | None, hi: float | None, *, name: str | None = None,
             as_attributes: bool = False) -> Chain:
        """Clip with constant bounds: inputs (opset >= 11) or attributes (opset < 11)."""
        name = name or self._name("clip")
        if as_attributes:
            attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
            node = helper.make_node("Clip", [self.cur], [f"{name}.out"], name=name, **attrs)
            return self._add(node)
        inputs = [self.cur]
        for suffix, bound in (("min", lo), ("max", hi)):
            if bound is None:
                inputs.append("")
                continue
            t = numpy_helper.from_array(np.array(bound, NP[self.dtype]), f"{name}.{suffix}")
            self.inits.append(t)
            inputs.append(t.name)
        while inputs[-1] == "":
            inputs.pop()
        return self._add(helper.make_node("Clip", inputs, [f"{name}.out"], name=name))

    def op(self, op_type: str, inputs: Sequence[str] | None = None, *, name: str | None = None,
           channels: int | None = None, domain: str = "", **attrs: Any) -> Chain:
        name = name or self._name(op_type.lower())
        node = helper.make_node(op_type, list(inputs or [self.cur]), [f"{name}.out"],
                                name=name, domain=domain or None, **attrs)
        return self._add(node, channels)

    def _add(self, node: onnx.NodeProto, channels: int | None = None) -> Chain:
        self.nodes.append(node)
        self.cur = node.output[0]
        self.channels = channels or self.channels
        return self

    def model(self, *, opset: int = 17, outputs: Sequence[str] | None = None,
              extra_opsets: Sequence[tuple[str, int]] = ()) -> onnx.ModelProto:
        outs = [helper.make_tensor_value_info(o, ELEM[self.dtype], None)
                for o in (outputs or [self.cur])]
        graph = helper.make_graph(self.nodes, "test", [self.input], outs, self.inits)
        opsets = [helper.make_opsetid("", opset)]
        opsets += [helper.make_opsetid(d, v) for d, v in extra_opsets]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="convsel-tests")
        # Old opsets need an old IR version, else onnx's checker would refuse the model.
        model.ir_version = min(onnx.IR_VERSION, 3 if opset < 8 else onnx.IR_VERSION)
        return model


def padding_chain() -> onnx.ModelProto:
    """Explicit asymmetric pads, every auto_pad, strides and a kernel read from the weights."""
    return (Chain((1, 8, 31, 31))
            .conv(16, 3, name="asym", pads=[0, 1, 2, 1])         # y: 0/2, x: 1/1
            .conv(16, 3, name="same_upper", auto_pad="SAME_UPPER", strides=[2, 2])
            .conv(16, 3, name="same_lower", auto_pad="SAME_LOWER", strides=[2, 2])
            .conv(16, 3, name="valid", auto_pad="VALID")
            .conv(16, (1, 7), name="no_kernel_attr", kernel_attr=False, pads=[0, 3, 0, 3])
            .model())


def groups_chain() -> onnx.ModelProto:
    """Depthwise, grouped and dilated convolutions."""
    return (Chain((1, 32, 28, 28))
            .conv(32, 3, name="depthwise", group=32, pads=[1, 1, 1, 1])
            .conv(64, 3, name="grouped", group=4, pads=[1, 1, 1, 1])
            .conv(64, 3, name="dilated", dilations=[2, 2], pads=[2, 2, 2, 2])
            .model())


def activation_chain(opset: int = 17) -> onnx.ModelProto:
    """Conv -> Relu, Conv -> Clip(0, 6), Conv -> Clip(-1, 1), Conv -> Clip(0, none)."""
    attrs = opset < 11
    return (Chain((1, 16, 20, 20))
            .conv(16, 3, name="c_relu", pads=[1] * 4).relu(name="relu")
            .conv(16, 3, name="c_relu6", pads=[1] * 4).clip(0, 6, name="relu6",
                                                            as_attributes=attrs)
            .conv(16, 3, name="c_lu", pads=[1] * 4).clip(-1, 1, name="lu", as_attributes=attrs)
            .conv(16, 3, name="c_open", pads=[1] * 4).clip(0, None, name="open",
                                                           as_attributes=attrs)
            .model(opset=opset))


def squeezenet_fire2_f16() -> onnx.ModelProto:
    """torchvision SqueezeNet 1.1's fire2 expand3x3 at 55x55, in float16."""
    return (Chain((1, 16, 55, 55), dtype="F16")
            .conv(64, 3, name="features.3.expand3x3", pads=[1] * 4).relu(name="expand3x3_act")
            .model())
