"""Near misses of ACL's exact-match tables: the trace names the row and the field (issue 7)."""

from pathlib import Path

import pytest

import convsel
from convsel import ConvProblem as P
from convsel import load_rules, select
from convsel.acl.tables import parse_near_misses

SQUEEZENET_55 = P(1, 55, 55, 16, 64, 3, 3, pad=1, dtype="F16", fast_math=True)


def _step(problem, target, rule_id, rules=None):
    return next(s for s in select(problem, target, rules=rules).trace if s.id == rule_id)


def test_torchvision_squeezenet_names_row_and_field():
    sel = select(SQUEEZENET_55, "cpu")
    step = _step(SQUEEZENET_55, "cpu", "cpu.f16_winograd_blacklist")
    assert not step.fired and sel.method == "WINOGRAD"   # the row would have made it GEMM
    assert parse_near_misses(step.reason) == [{
        "row": "squeezenet1_1-fire2_3-expand3x3", "field": "input (h, w)",
        "problem_value": "55x55", "row_value": "56x56"}]


def test_exact_row_fires_without_a_near_miss():
    step = _step(SQUEEZENET_55.replace(h=56, w=56), "cpu", "cpu.f16_winograd_blacklist")
    assert step.fired and parse_near_misses(step.reason) == []


@pytest.mark.parametrize("change, field, mine, theirs", [
    ({"c": 17}, "channels (c, k)", "17x64", "16x64"),
    ({"pad": (1, 1, 1, 0)}, "pad", "1x1x1x0", "1x1x1x1"),
    ({"stride": (1, 2)}, "stride", "1x2", "1x1"),
])
def test_each_field_is_named(change, field, mine, theirs):
    step = _step(SQUEEZENET_55.replace(h=56, w=56, **change), "cpu",
                 "cpu.f16_winograd_blacklist")
    assert not step.fired
    assert parse_near_misses(step.reason) == [{
        "row": "squeezenet1_1-fire2_3-expand3x3", "field": field, "problem_value": mine,
        "row_value": theirs}]


@pytest.mark.parametrize("change", [{"h": 40, "w": 40}, {"h": 55, "w": 55, "c": 17}, {"k": 128}])
def test_far_or_two_field_misses_are_not_reported(change):
    step = _step(SQUEEZENET_55.replace(**{"h": 56, "w": 56, **change}), "cpu",
                 "cpu.f16_winograd_blacklist")
    assert not step.fired and parse_near_misses(step.reason) == []


def test_blacklist_near_miss_only_where_the_rule_applies():
    f32 = SQUEEZENET_55.replace(dtype="F32")
    assert all(parse_near_misses(s.reason) == [] for s in select(f32, "cpu").trace)


def test_gpu_known_network_names_pad_and_layout():
    torch_mobilenet = P(1, 224, 224, 3, 32, 3, 3, stride=2, pad=1, layout="NCHW")
    step = _step(torch_mobilenet, "G77", "gpu.known_network")
    assert parse_near_misses(step.reason) == [{
        "row": "mobilenet224-conv0", "field": "pad", "problem_value": "1x1x1x1",
        "row_value": "0x1x0x1"}]
    vgg_nhwc = P(1, 224, 224, 3, 64, 3, 3, pad=1, layout="NHWC")
    step = _step(vgg_nhwc, "G77", "gpu.known_network")
    assert [(m["row"], m["field"], m["row_value"]) for m in parse_near_misses(step.reason)] == [
        ("vgg16-conv1_1", "layout", "NCHW")]


def test_near_misses_can_be_switched_off(tmp_path: Path):
    text = (Path(convsel.__file__).parent / "heuristics.yaml").read_text()
    section = text.index("near_miss:")
    on = text.index("enabled: true", section)
    path = tmp_path / "rules.yaml"
    path.write_text(text[:on] + "enabled: false" + text[on + len("enabled: true"):])
    step = _step(SQUEEZENET_55, "cpu", "cpu.f16_winograd_blacklist", rules=load_rules(path))
    assert not step.fired and parse_near_misses(step.reason) == []
