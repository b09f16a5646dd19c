"""convsel.onnx.plan on models built with onnx.helper: mapping, fusion, near misses, summary."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_models import Chain, activation_chain, groups_chain, padding_chain, squeezenet_fire2_f16

from convsel import backends
from convsel.onnx import plan
from convsel.reference import conv2d_reference


def by_name(model_plan):
    return {n.name: n for n in model_plan.nodes}


def test_pads_auto_pad_strides_and_kernel_from_weights():
    nodes = by_name(plan(padding_chain(), "cpu"))
    # ONNX pads [y_begin, x_begin, y_end, x_end] -> (top, bottom, left, right)
    assert nodes["asym"].problem.pad == (0, 2, 1, 1)
    assert (nodes["asym"].problem.out_h, nodes["asym"].problem.out_w) == (31, 31)
    # 31 wide, stride 2, 3x3: 16 outputs need 2 pad pixels, one each side
    assert nodes["same_upper"].problem.pad == (1, 1, 1, 1)
    assert nodes["same_upper"].problem.stride == (2, 2)
    # 16 wide, stride 2: one pad pixel; SAME_LOWER puts it first
    assert nodes["same_lower"].problem.pad == (1, 0, 1, 0)
    assert nodes["valid"].problem.pad == (0, 0, 0, 0)
    p = nodes["no_kernel_attr"].problem
    assert (p.kh, p.kw, p.pad) == (1, 7, (0, 0, 3, 3))
    assert all(n.problem.layout == "NCHW" and n.problem.dtype == "F32" for n in nodes.values())


def test_groups_depthwise_and_dilation():
    nodes = by_name(plan(groups_chain(), "cpu"))
    dw, grouped, dilated = nodes["depthwise"], nodes["grouped"], nodes["dilated"]
    assert dw.problem.is_depthwise and dw.problem.groups == 32
    assert dw.selection.rule == "convsel.grouped" and dw.selection.method == "DIRECT"
    assert (grouped.problem.groups, grouped.problem.c, grouped.problem.k) == (4, 32, 64)
    assert dilated.problem.dilation == (2, 2) and dilated.selection.rule == "cpu.dilation"


@pytest.mark.parametrize("build", [padding_chain, groups_chain])
def test_problems_compute_what_onnx_computes(build):
    """Every node's ConvProblem, run by convsel's reference, matches onnx's own evaluator on
    the same single-Conv model: pads, auto_pad, strides, groups and dilation are mapped right."""
    rng = np.random.default_rng(0)
    model = build()
    weights = {t.name: t for t in model.graph.initializer}
    for node in plan(model, "cpu").nodes:
        p = node.problem
        w = rng.standard_normal(numpy_helper.to_array(weights[node.inputs[1]]).shape)
        b = rng.standard_normal(p.k)
        x = rng.standard_normal((p.n, p.c, p.h, p.w))
        single = _single_conv(model, node.index, w, b, x.shape)
        want = ReferenceEvaluator(single).run(None, {"x": x.astype(np.float32)})[0]
        got = conv2d_reference(p, x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), b)
        np.testing.assert_allclose(got.transpose(0, 3, 1, 2), want, rtol=1e-4, atol=1e-4,
                                   err_msg=node.name)


def _single_conv(model, index, w, b, x_shape):
    conv = onnx.NodeProto()
    conv.CopyFrom(model.graph.node[index])
    del conv.input[:]
    conv.input.extend(["x", "w", "b"])
    del conv.output[:]
    conv.output.append("y")
    inits = [numpy_helper.from_array(w.astype(np.float32), "w"),
             numpy_helper.from_array(b.astype(np.float32), "b")]
    graph = helper.make_graph([conv], "one", [helper.make_tensor_value_info("x", 1, x_shape)],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("opset", [17, 9])   # Clip bounds as inputs (>= 11), attributes (< 11)
def test_fused_activations(opset):
    nodes = by_name(plan(activation_chain(opset), "G77"))
    assert str(nodes["c_relu"].problem.activation) == "relu"
    assert nodes["c_relu"].activation_node == "relu"
    assert str(nodes["c_relu6"].problem.activation) == "bounded_relu(6)"
    lu = nodes["c_lu"].problem.activation
    assert (lu.kind, lu.a, lu.b) == ("lu_bounded_relu", 1.0, -1.0)
    assert str(nodes["c_open"].problem.activation) == "relu"


def test_no_fusion_when_the_output_branches_or_is_a_graph_output():
    chain = Chain((1, 8, 16, 16)).conv(8, 3, name="branching", pads=[1] * 4)
    branch = chain.cur
    chain.relu(name="act").op("Add", [chain.cur, branch], name="add")
    chain.conv(8, 3, name="last", pads=[1] * 4)
    last = chain.cur
    chain.relu(name="last_act")
    nodes = by_name(plan(chain.model(outputs=[last, chain.cur]), "cpu"))
    assert nodes["branching"].problem.activation is None
    assert "feeds 2 nodes" in nodes["branching"].fusion_note
    assert nodes["last"].problem.activation is None
    assert "graph output" in nodes["last"].fusion_note


def test_clip_without_acl_form_or_constant_bound_is_not_fused():
    half_open = Chain((1, 8, 16, 16)).conv(8, 3, name="c", pads=[1] * 4).clip(None, 6).model()
    node = plan(half_open, "cpu").nodes[0]
    assert node.problem.activation is None and "no ACL activation form" in node.fusion_note
    chain = Chain((1, 8, 16, 16)).conv(8, 3, name="c", pads=[1] * 4)
    chain.op("Clip", [chain.cur, "", "input"], name="clip")   # max comes from the graph input
    node = plan(chain.model(), "cpu").nodes[0]
    assert node.problem.activation is None and "not a constant" in node.fusion_note


def test_other_activation_kinds_follow_the_table():
    chain = Chain((1, 8, 16, 16))
    chain.conv(8, 3, name="a", pads=[1] * 4).op("LeakyRelu", alpha=0.2)
    chain.conv(8, 3, name="b", pads=[1] * 4).op("Sigmoid")
    chain.conv(8, 3, name="c", pads=[1] * 4).op("HardSwish")
    chain.conv(8, 3, name="d", pads=[1] * 4).op("Softplus")   # not fusable in ACL
    nodes = by_name(plan(chain.model(), "cpu"))
    assert str(nodes["a"].problem.activation) == "leaky_relu(0.2)"
    assert str(nodes["b"].problem.activation) == "logistic"
    assert str(nodes["c"].problem.activation) == "hard_swish"
    assert nodes["d"].problem.activation is None and nodes["d"].fusion_note is None


def test_f16_squeezenet_near_miss_is_reported_per_node():
    result = plan(squeezenet_fire2_f16(), "cpu", fast_math=True)
    node = result.nodes[0]
    assert node.problem.dtype == "F16" and node.problem.fast_math
    assert node.selection.method == "WINOGRAD"
    assert node.near_misses == [{"rule": "cpu.f16_winograd_blacklist",
                                 "row": "squeezenet1_1-fire2_3-expand3x3",
                                 "field": "input (h, w)", "problem_value": "55x55",
                                 "row_value": "56x56"}]
    assert result.summary["near_misses"] == ["features.3.expand3x3"]
    # at 56x56 the row matches: ACL runs GEMM, and there is nothing near to report
    at_56 = plan(squeezenet_fire2_f16(), "cpu", fast_math=True,
                 input_shapes={"input": (1, 16, 56, 56)}).nodes[0]
    assert at_56.selection.rule == "cpu.f16_winograd_blacklist" and not at_56.near_misses


def test_summary_counts_and_json():
    result = plan(padding_chain(), "cpu")
    s = result.summary
    assert s["convolutions"] == 5 and sum(s["methods"].values()) == 5
    assert s["methods"] == {m: sum(n.selection.method == m for n in result.nodes)
                            for m in s["methods"]}
    assert s["unrunnable"] == [] and s["skipped"] == 0 and s["measured"] == 0
    d = result.to_dict()
    assert [n["name"] for n in d["nodes"]] == ["asym", "same_upper", "same_lower", "valid",
                                               "no_kernel_attr"]
    first = d["nodes"][0]
    assert first["problem"]["pad"] == [0, 2, 1, 1] and first["time"] is None
    assert first["rule"] == result.nodes[0].selection.rule and first["reason"]
    assert d["model"]["inputs"] == {"input": [1, 8, 31, 31]} and d["model"]["opset"] == 17


def test_nodes_no_backend_runs_are_flagged(monkeypatch):
    # 7x7 'same', C > K, NCHW on a Mali GPU: ACL picks FFT
    model = Chain((1, 64, 32, 32)).conv(32, 7, name="fft", pads=[3] * 4).model()
    assert plan(model, "G77").summary["unrunnable"] == []
    monkeypatch.setattr(backends, "IMPLEMENTATIONS", {
        key: path for key, path in backends.IMPLEMENTATIONS.items() if key[0] != "fft"})
    result = plan(model, "G77")
    assert result.nodes[0].selection.method == "FFT"
    assert result.summary["unrunnable"] == [
        {"node": "fft", "method": "FFT", "reason": "no backend implements fft"}]


def test_input_shape_override_fixes_a_symbolic_batch():
    model = Chain(("batch", 3, 32, 32)).conv(8, 3, name="c", pads=[1] * 4).model()
    node = plan(model, "cpu", input_shapes={"input": [2, 3, 32, 32]}).nodes[0]
    assert (node.problem.n, node.problem.h) == (2, 32)


def test_intermediate_tensor_override_after_a_custom_op():
    chain = Chain((1, 8, 16, 16)).conv(8, 3, name="first", pads=[1] * 4)
    chain.op("Mystery", domain="com.example", name="custom")
    chain.conv(16, 3, name="after_custom")
    model = chain.model(extra_opsets=[("com.example", 1)])
    node = plan(model, "cpu", input_shapes={"custom.out": (1, 8, 16, 16)}).nodes[1]
    assert (node.name, node.problem.h, node.problem.c) == ("after_custom", 16, 8)


def test_other_convolution_ops_are_skipped_not_failed():
    chain = Chain((1, 8, 16, 16)).conv(8, 3, name="c", pads=[1] * 4)
    w = numpy_helper.from_array(np.zeros((8, 8, 2, 2), np.float32), "tw")
    chain.inits.append(w)
    chain.op("ConvTranspose", [chain.cur, "tw"], name="up", strides=[2, 2])
    result = plan(chain.model(), "cpu")
    assert [n.name for n in result.nodes] == ["c"]
    assert [(s.name, s.op_type) for s in result.skipped] == [("up", "ConvTranspose")]


def test_a_modelproto_is_not_changed():
    model = padding_chain()
    before = model.SerializeToString()
    plan(model, "cpu", input_shapes={"input": (1, 8, 40, 40)})
    assert model.SerializeToString() == before


def test_layout_and_fast_math_reach_every_problem():
    result = plan(activation_chain(), "G77", layout="NHWC", fast_math=True)
    assert {(n.problem.layout, n.problem.fast_math) for n in result.nodes} == {("NHWC", True)}
    assert result.target == "G77"
