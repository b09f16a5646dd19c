"""One row per CPU rule path of ACL's CpuConv2d::get_convolution_method (spec §2)."""

import pytest

from convsel import ConvProblem as P
from convsel import select

SRGAN_HR = dict(n=1, h=512, w=512, c=64, k=3, kh=9, kw=9, pad=4)   # 64 MiB of F32 input

CASES = [
    # (id, problem, target, method, deciding rule)
    ("known alexnet conv2", P(1, 27, 27, 48, 128, 5, 5, pad=2), "cpu", "GEMM",
     "cpu.known_network"),
    ("known vgg conv1_1 NCHW", P(1, 224, 224, 3, 64, 3, 3, pad=1, layout="NCHW"), "cpu", "GEMM",
     "cpu.known_network"),
    ("known mobilenet224", P(1, 224, 224, 3, 32, 3, 3, stride=2, pad=(0, 1, 0, 1)), "cpu",
     "GEMM", "cpu.known_network"),
    ("known mobilenet160", P(1, 160, 160, 3, 24, 3, 3, stride=2, pad=(0, 1, 0, 1)), "cpu",
     "GEMM", "cpu.known_network"),
    ("dilation", P(1, 56, 56, 64, 64, 3, 3, pad=2, dilation=2), "cpu", "GEMM", "cpu.dilation"),
    ("srgan large input NHWC", P(**SRGAN_HR), "cpu", "GEMM_CONV2D", "cpu.large_input"),
    ("srgan large input NCHW -> direct", P(**SRGAN_HR, layout="NCHW"), "cpu", "DIRECT",
     "cpu.large_input.direct"),
    ("large input, non-square NCHW falls through", P(1, 512, 512, 64, 3, 9, 7, pad=3,
                                                     layout="NCHW"), "cpu", "GEMM",
     "cpu.default"),
    ("large input but KH 7 is not > 7", P(1, 512, 512, 64, 64, 7, 7, pad=3), "cpu",
     "GEMM_CONV2D", "cpu.gemm_conv2d"),
    ("small IFM", P(1, 56, 56, 15, 64, 3, 3, pad=1), "cpu", "GEMM", "cpu.small_ifm"),
    ("F16 blacklist fire2", P(1, 56, 56, 16, 64, 3, 3, pad=1, dtype="F16", fast_math=True),
     "cpu", "GEMM", "cpu.f16_winograd_blacklist"),
    ("F16 blacklist fire6", P(1, 14, 14, 48, 192, 3, 3, pad=1, dtype="F16", fast_math=True),
     "cpu", "GEMM", "cpu.f16_winograd_blacklist"),
    ("F16 blacklist fire8", P(1, 14, 14, 64, 256, 3, 3, pad=1, dtype="F16", fast_math=True),
     "cpu", "GEMM", "cpu.f16_winograd_blacklist"),
    ("F16 fast-math off row: no Winograd", P(1, 56, 56, 16, 64, 3, 3, pad=1, dtype="F16"),
     "cpu", "GEMM_CONV2D", "cpu.gemm_conv2d"),
    ("F16 fast-math Winograd", P(1, 28, 28, 64, 64, 3, 3, pad=1, dtype="F16", fast_math=True),
     "cpu", "WINOGRAD", "cpu.winograd"),
    ("F16 on a CPU without FP16", P(1, 56, 56, 16, 64, 3, 3, pad=1, dtype="F16",
                                    fast_math=True), "cpu-nofp16", "GEMM", "cpu.default"),
    ("1x1", P(1, 56, 56, 64, 256, 1, 1), "cpu", "GEMM", "cpu.kernel_1x1"),
    ("1x1 stride 2", P(1, 56, 56, 256, 512, 1, 1, stride=2), "cpu", "GEMM", "cpu.kernel_1x1"),
    ("winograd 3x3", P(1, 56, 56, 64, 64, 3, 3, pad=1), "cpu", "WINOGRAD", "cpu.winograd"),
    ("winograd 5x5 without fast-math", P(1, 35, 35, 48, 64, 5, 5, pad=2), "cpu", "WINOGRAD",
     "cpu.winograd"),
    ("winograd 1x7", P(1, 17, 17, 128, 128, 1, 7, pad=(0, 0, 3, 3)), "cpu", "WINOGRAD",
     "cpu.winograd"),
    ("winograd 7x1 NCHW", P(1, 17, 17, 128, 192, 7, 1, pad=(3, 3, 0, 0), layout="NCHW"), "cpu",
     "WINOGRAD", "cpu.winograd"),
    ("7x7 NHWC -> indirect", P(1, 56, 56, 64, 64, 7, 7, pad=3), "cpu", "GEMM_CONV2D",
     "cpu.gemm_conv2d"),
    ("3x3 stride 2 NHWC", P(1, 56, 56, 64, 128, 3, 3, stride=2, pad=1), "cpu", "GEMM_CONV2D",
     "cpu.gemm_conv2d"),
    ("3x3 stride 2 NCHW", P(1, 56, 56, 64, 128, 3, 3, stride=2, pad=1, layout="NCHW"), "cpu",
     "GEMM", "cpu.default"),
    ("quantized NHWC", P(1, 56, 56, 64, 64, 3, 3, pad=1, dtype="QASYMM8"), "cpu", "GEMM_CONV2D",
     "cpu.gemm_conv2d"),
    ("quantized NCHW", P(1, 56, 56, 64, 64, 3, 3, pad=1, dtype="QASYMM8_SIGNED",
                         layout="NCHW"), "cpu", "GEMM", "cpu.default"),
    ("depthwise (convsel extension)", P(1, 56, 56, 144, 144, 3, 3, pad=1, groups=144), "cpu",
     "DIRECT", "convsel.grouped"),
    ("grouped (convsel extension)", P(1, 27, 27, 96, 256, 5, 5, pad=2, groups=2), "cpu", "GEMM",
     "convsel.grouped"),
]


@pytest.mark.parametrize("name,problem,target,method,rule", CASES, ids=[c[0] for c in CASES])
def test_cpu_rule_paths(name, problem, target, method, rule):
    sel = select(problem, target)
    assert (sel.method, sel.rule) == (method, rule), sel.explain()
    assert sel.trace[-1].id == rule and sel.trace[-1].fired
    assert not any(step.fired for step in sel.trace[:-1])


def test_large_input_threshold_is_strict():
    # 10,000,000 bytes exactly is not "> 1e7": 2500 x 1000 x 1 x F32.
    at = P(1, 2500, 1000, 1, 16, 9, 9, pad=4, dtype="F32")
    assert at.input_bytes == 10_000_000
    assert select(at, "cpu").rule == "cpu.small_ifm"
    above = at.replace(w=1001)
    assert select(above, "cpu").rule == "cpu.large_input"


def test_large_input_reads_kh_only():
    wide = P(1, 512, 512, 64, 64, 1, 9, pad=(0, 0, 4, 4))
    step = next(s for s in select(wide, "cpu").trace if s.id == "cpu.large_input")
    assert not step.fired and "KH=1" in step.reason


def test_winograd_small_input_uses_2x2_tile():
    assert select(P(1, 4, 8, 32, 32, 3, 3, pad=1), "cpu").params["tile"] == (2, 2)
    assert select(P(1, 5, 5, 32, 32, 3, 3, pad=1), "cpu").params["tile"] == (4, 4)


def test_method_to_algorithm():
    assert select(P(1, 56, 56, 64, 256, 1, 1), "cpu").algorithm == "gemm_1x1"
    assert select(P(1, 56, 56, 256, 512, 1, 1, stride=2), "cpu").algorithm == "im2col_gemm"
    assert select(P(1, 56, 56, 64, 64, 7, 7, pad=3), "cpu").algorithm == "indirect_gemm"
    assert select(P(1, 56, 56, 64, 64, 3, 3, pad=1), "cpu").algorithm == "winograd"
    depthwise = select(P(1, 56, 56, 144, 144, 3, 3, pad=1, groups=144), "cpu")
    assert depthwise.algorithm == "direct" and "no groups" in depthwise.reason


def test_near_miss_named_in_trace():
    torchvision = P(1, 55, 55, 16, 64, 3, 3, pad=1, dtype="F16", fast_math=True)
    step = next(s for s in select(torchvision, "cpu").trace
                if s.id == "cpu.f16_winograd_blacklist")
    assert not step.fired
    assert "squeezenet1_1-fire2_3-expand3x3" in step.reason and "55x55" in step.reason
