"""Bad models and bad arguments: clear errors naming the node or the reason, never a crash."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx
from onnx import TensorProto, external_data_helper, helper, numpy_helper
from onnx_models import Chain

from convsel import InvalidProblemError, UnknownTargetError, UnsupportedError
from convsel.onnx import OnnxUnavailableError, PlanError, UnknownShapeError, plan


def simple(shape=(1, 8, 16, 16), **conv):
    return Chain(shape).conv(8, 3, name="conv", **{"pads": [1] * 4, **conv}).relu()


@pytest.mark.parametrize("data, words", [
    (b"definitely not a protobuf \xff\xfe", "not an ONNX model"),
    (b"", "the file is empty"),
    (b"\x08\x07", "no IR version or no graph"),   # parses as a ModelProto with no graph
])
def test_not_onnx(data, words):
    with pytest.raises(PlanError, match=words) as info:
        plan(data, "cpu")
    assert info.value.node is None and isinstance(info.value, ValueError)


def test_unreadable_path_and_wrong_type(tmp_path):
    with pytest.raises(PlanError, match="cannot read the model file"):
        plan(tmp_path / "missing.onnx", "cpu")
    with pytest.raises(PlanError, match="expected a path"):
        plan(12345, "cpu")


def test_no_conv_nodes():
    model = Chain((1, 8, 16, 16)).relu(name="only").model()
    with pytest.raises(PlanError, match="no 2-D Conv node"):
        plan(model, "cpu")


def test_only_a_1d_conv_is_reported_with_its_reason():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 32])
    w = numpy_helper.from_array(np.zeros((4, 4, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv1d")
    graph = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", 1, None)],
                              [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(PlanError, match="conv1d: 1-D convolution"):
        plan(model, "cpu")


def test_float64_conv_is_skipped():
    model = Chain((1, 8, 16, 16), dtype="F64").conv(8, 3, name="c64").model()
    with pytest.raises(PlanError, match="c64: element type DOUBLE"):
        plan(model, "cpu")


@pytest.mark.parametrize("opset, words", [(5, "unsupported ai.onnx opset 5"),
                                          (99, "unsupported ai.onnx opset 99")])
def test_unsupported_opsets(opset, words):
    model = simple().model(opset=opset)
    with pytest.raises(PlanError, match=words):
        plan(model, "cpu")


def test_no_default_opset_import():
    model = simple().model()
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(PlanError, match="imports no ai.onnx opset"):
        plan(model, "cpu")


def test_symbolic_batch_names_node_and_input():
    model = simple(("batch", 8, 16, 16)).model()
    with pytest.raises(UnknownShapeError) as info:
        plan(model, "cpu")
    err = info.value
    assert err.node == "conv" and isinstance(err, PlanError)
    assert "(batch, 8, 16, 16)" in str(err) and "input_shapes={'input': (1, 3, 224, 224)}" \
        in str(err)


def test_input_without_any_shape():
    chain = simple()
    model = chain.model()
    model.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(UnknownShapeError, match="node 'conv': the shape of input 'input' is "
                                                "unknown"):
        plan(model, "cpu")


def test_intermediate_unknown_after_custom_op():
    chain = simple()
    chain.op("Mystery", domain="com.example", name="custom").conv(8, 3, name="after")
    model = chain.model(extra_opsets=[("com.example", 1)])
    with pytest.raises(UnknownShapeError,
                       match=r"node 'after'.*input_shapes=\{'custom.out': \(N, C, H, W\)\}"):
        plan(model, "cpu")


@pytest.mark.parametrize("shapes, field", [({"nope": (1, 8, 16, 16)}, "input_shapes"),
                                           ({"input": (1, 0, 16, 16)}, "input_shapes['input']"),
                                           ({"input": "1,8,16,16"}, "input_shapes['input']"),
                                           ({"input": (1, 8, 16)}, "input_shapes['input']"),
                                           ({"input": (10**30, 8, 16, 16)},
                                            "input_shapes['input']")])
def test_bad_input_shapes(shapes, field):
    with pytest.raises(InvalidProblemError) as info:
        plan(simple().model(), "cpu", input_shapes=shapes)
    assert info.value.field == field


def test_invalid_geometry_names_the_node():
    with pytest.raises(PlanError, match="node 'conv': not a valid convolution: pad"):
        plan(simple(pads=[3, 3, 3, 3]).model(), "cpu")


def test_group_and_channels_disagree():
    model = simple().model()
    model.graph.node[0].attribute.append(helper.make_attribute("group", 3))
    with pytest.raises(PlanError, match="node 'conv': weights 'conv.weight' have 8 input"):
        plan(model, "cpu")


def test_malformed_conv_names_the_node():
    model = simple().model()
    del model.graph.node[0].input[1:]
    model.graph.node[0].ClearField("name")
    with pytest.raises(PlanError, match="node 'Conv#0'"):
        plan(model, "cpu")


def test_unknown_target_and_policy():
    with pytest.raises(UnknownTargetError):
        plan(simple().model(), "G999")
    with pytest.raises(InvalidProblemError, match="unknown policy"):
        plan(simple().model(), "cpu", "fastest")
    with pytest.raises(InvalidProblemError, match="layout='CHWN'"):
        plan(simple().model(), "cpu", layout="CHWN")


def test_measured_policy_without_the_tuning_layer(monkeypatch):
    # import -> ImportError, whether or not an earlier test imported them
    for module in ("convsel.policies.measured", "convsel.policies.composed"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(UnsupportedError, match="policy 'measured' needs convsel's tuning"):
        plan(simple().model(), "cpu", "measured")
    assert plan(simple().model(), "cpu", "acl").nodes     # acl keeps working


def test_missing_onnx_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(OnnxUnavailableError, match=r"pip install 'convsel\[onnx\]'") as info:
        plan(b"anything", "cpu")
    assert isinstance(info.value, ImportError)


def test_external_data_is_never_read(monkeypatch, tmp_path):
    def forbidden(*args, **kwargs):
        raise AssertionError("external data was loaded")

    monkeypatch.setattr(external_data_helper, "load_external_data_for_model", forbidden)
    monkeypatch.setattr(external_data_helper, "load_external_data_for_tensor", forbidden)
    chain = Chain((1, 8, 16, 16)).conv(8, 3, name="c", pads=[1] * 4).clip(0, 6, name="clip")
    model = chain.model()
    for tensor in model.graph.initializer:   # weights and Clip bounds point outside
        external_data_helper.set_external_data(tensor, location="../../../etc/passwd")
        tensor.ClearField("raw_data")
        tensor.ClearField("float_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
    path = tmp_path / "external.onnx"
    path.write_bytes(model.SerializeToString())
    node = plan(path, "cpu").nodes[0]
    assert (node.problem.k, node.problem.kh) == (8, 3)
    assert node.problem.activation is None and "not a constant" in node.fusion_note


@pytest.mark.parametrize("attr, value, words", [
    ("strides", [1.5, 1.0], "strides must hold integers, got 1.5"),
    ("group", 2.5, "group must hold integers"),
    ("kernel_shape", [3.0, 3.0], "kernel_shape must hold integers"),
    ("pads", [1, 1, 1], "pads [1, 1, 1] must have 4 values"),
    ("auto_pad", "FOO", "auto_pad 'FOO' is not one of"),
    ("strides", "ab", "node 'c': "),
])
def test_attributes_of_the_wrong_kind(attr, value, words):
    model = Chain((1, 8, 16, 16)).conv(8, 3, name="c").model()
    node = model.graph.node[0]
    for old in [a for a in node.attribute if a.name == attr]:
        node.attribute.remove(old)
    node.attribute.append(helper.make_attribute(attr, value))
    with pytest.raises(PlanError, match=words.replace("[", r"\[")):
        plan(model, "cpu")
