"""One row per GPU rule path of ACL's ClConv2d::get_convolution_method (spec §4), every target
group, and the spec's worked examples."""

import pytest

from convsel import ConvProblem as P
from convsel import select

CASES = [
    ("known alexnet NCHW", P(1, 27, 27, 48, 128, 5, 5, pad=2, layout="NCHW"), "G77", "DIRECT",
     "gpu.known_network"),
    ("known vgg NCHW", P(1, 224, 224, 3, 64, 3, 3, pad=1, layout="NCHW"), "G71", "DIRECT",
     "gpu.known_network"),
    ("known mobilenet224 NCHW", P(1, 224, 224, 3, 32, 3, 3, stride=2, pad=(0, 1, 0, 1),
                                  layout="NCHW"), "G52", "GEMM", "gpu.known_network"),
    ("known mobilenet160 NHWC", P(1, 160, 160, 3, 24, 3, 3, stride=2, pad=(0, 1, 0, 1)),
     "G77", "GEMM", "gpu.known_network"),
    ("alexnet row is NCHW-only", P(1, 27, 27, 48, 128, 5, 5, pad=2), "G77", "GEMM",
     "gpu.nhwc.default"),
    ("dilation", P(1, 56, 56, 64, 64, 3, 3, pad=2, dilation=2), "G77", "GEMM", "gpu.dilation"),
    # NCHW branch
    ("nchw srgan quantized", P(1, 1080, 1920, 64, 3, 9, 9, dtype="QASYMM8", layout="NCHW"),
     "G77", "DIRECT", "gpu.nchw.srgan"),
    ("nchw srgan float: direct invalid for 9x9", P(1, 1080, 1920, 64, 3, 9, 9, layout="NCHW"),
     "G77", "GEMM", "gpu.nchw.default"),
    ("nchw fft", P(1, 64, 64, 64, 32, 7, 7, pad=3, layout="NCHW"), "G71", "FFT",
     "gpu.nchw.fft"),
    ("nchw fft needs C > OFM", P(1, 64, 64, 32, 64, 7, 7, pad=3, layout="NCHW"), "G71", "GEMM",
     "gpu.nchw.default"),
    ("nchw small ifm", P(1, 56, 56, 8, 64, 3, 3, pad=1, layout="NCHW"), "G77", "GEMM",
     "gpu.nchw.small_ifm"),
    ("nchw winograd", P(1, 56, 56, 64, 64, 3, 3, pad=1, layout="NCHW"), "G77", "WINOGRAD",
     "gpu.nchw.winograd"),
    ("nchw 3x3 stride 2", P(1, 56, 56, 64, 64, 3, 3, stride=2, pad=1, layout="NCHW"), "G77",
     "GEMM", "gpu.nchw.default"),
    # NHWC branch
    ("nhwc srgan", P(1, 1080, 1920, 64, 3, 9, 9), "G71", "DIRECT", "gpu.nhwc.srgan"),
    ("nhwc srgan needs pad_top < 3", P(1, 1080, 1920, 64, 3, 9, 9, pad=4), "G71", "DIRECT",
     "gpu.nhwc.direct.old_gpu"),
    ("nhwc quantized", P(1, 56, 56, 64, 64, 3, 3, pad=1, dtype="QASYMM8"), "G77", "GEMM",
     "gpu.nhwc.quantized"),
    ("winograd OFM > 8", P(1, 56, 56, 64, 64, 3, 3, pad=1), "G710", "WINOGRAD",
     "gpu.nhwc.winograd"),
    ("winograd gate C >= 8", P(1, 56, 56, 8, 16, 3, 3, pad=1), "G52", "WINOGRAD",
     "gpu.nhwc.winograd"),
    ("winograd gate C = 7", P(1, 56, 56, 7, 16, 3, 3, pad=1), "G52", "GEMM", "gpu.nhwc.default"),
    ("winograd OFM <= 8 on old GPU", P(1, 56, 56, 64, 8, 3, 3, pad=1), "T700", "WINOGRAD",
     "gpu.nhwc.winograd"),
    ("UNKNOWN counts as old GPU", P(1, 56, 56, 64, 8, 3, 3, pad=1), "UNKNOWN", "WINOGRAD",
     "gpu.nhwc.winograd"),
    ("old GPU direct: G71 thr 7", P(1, 64, 64, 64, 32, 7, 7, stride=2, pad=3), "G71", "DIRECT",
     "gpu.nhwc.direct.old_gpu"),
    ("old GPU: 5x5 below G71's thr 7", P(1, 64, 64, 64, 32, 5, 5, stride=2, pad=2), "G71",
     "GEMM", "gpu.nhwc.default"),
    ("old GPU: T600 thr is 5", P(1, 64, 64, 64, 32, 5, 5, stride=2, pad=2), "T600", "DIRECT",
     "gpu.nhwc.direct.old_gpu"),
    ("old GPU needs C > OFM", P(1, 64, 64, 32, 64, 7, 7, stride=2, pad=3), "G72", "GEMM",
     "gpu.nhwc.default"),
    ("G76 large kernel + workload", P(1, 224, 224, 16, 32, 5, 5, stride=2, pad=2), "G76",
     "DIRECT", "gpu.nhwc.direct.g76"),
    ("G76 last layer", P(1, 7, 7, 1024, 8, 1, 1), "G76", "DIRECT", "gpu.nhwc.direct.g76"),
    ("G76 no workload", P(1, 28, 28, 16, 32, 5, 5, stride=2, pad=2), "G76", "GEMM",
     "gpu.nhwc.default"),
    ("first layer G52", P(1, 224, 224, 3, 32, 3, 3, stride=2, pad=1), "G52", "DIRECT",
     "gpu.nhwc.direct.first_layer"),
    ("first layer G77 -> indirect", P(1, 224, 224, 3, 32, 3, 3, stride=2, pad=1), "G77",
     "INDIRECT", "gpu.nhwc.direct.first_layer"),
    ("first layer needs OFM < 64", P(1, 224, 224, 3, 64, 7, 7, stride=2, pad=3), "G77", "GEMM",
     "gpu.nhwc.default"),
    ("large kernel G52", P(1, 224, 224, 32, 64, 5, 5, stride=2, pad=2), "G52", "DIRECT",
     "gpu.nhwc.direct.large_kernel"),
    ("BIFROST generic thr 7", P(1, 224, 224, 32, 64, 5, 5, stride=2, pad=2), "BIFROST", "GEMM",
     "gpu.nhwc.default"),
    ("G78 9x9 ksz 81 -> indirect", P(1, 224, 224, 32, 64, 9, 9, stride=2, pad=4), "G78",
     "INDIRECT", "gpu.nhwc.direct.large_kernel"),
    ("G78 11x11 ksz 121 -> direct", P(1, 224, 224, 32, 64, 11, 11, stride=2, pad=5), "G78",
     "DIRECT", "gpu.nhwc.direct.large_kernel"),
    ("G77 6x6 even ksz -> direct", P(1, 224, 224, 32, 64, 6, 6, stride=2, pad=2), "G77",
     "DIRECT", "gpu.nhwc.direct.large_kernel"),
    ("G78AE is not an INDIRECT target", P(1, 224, 224, 32, 64, 9, 9, stride=2, pad=4), "G78AE",
     "DIRECT", "gpu.nhwc.direct.large_kernel"),
    ("m_one output", P(1, 7, 7, 16, 131072, 7, 7), "G57", "DIRECT",
     "gpu.nhwc.direct.large_kernel"),
    ("last layer G710", P(1, 56, 56, 64, 8, 3, 3, pad=1), "G710", "DIRECT",
     "gpu.nhwc.direct.last_layer"),
    ("last layer G77 1x1 keeps direct", P(1, 7, 7, 1024, 8, 1, 1), "G77", "DIRECT",
     "gpu.nhwc.direct.last_layer"),
    ("nhwc default", P(1, 56, 56, 64, 128, 3, 3, stride=2, pad=1), "G77", "GEMM",
     "gpu.nhwc.default"),
    ("F16 no fast-math: no winograd", P(1, 56, 56, 64, 64, 3, 3, pad=1, dtype="F16"), "G77",
     "GEMM", "gpu.nhwc.default"),
    ("F16 fast-math winograd", P(1, 56, 56, 64, 64, 3, 3, pad=1, dtype="F16", fast_math=True),
     "G77", "WINOGRAD", "gpu.nhwc.winograd"),
    ("7x7 winograd needs fast-math", P(1, 56, 56, 64, 64, 7, 7, pad=3, fast_math=True), "G610",
     "WINOGRAD", "gpu.nhwc.winograd"),
    ("grouped (convsel extension)", P(1, 56, 56, 144, 144, 3, 3, pad=1, groups=144), "G77",
     "DIRECT", "convsel.grouped"),
]


@pytest.mark.parametrize("name,problem,target,method,rule", CASES, ids=[c[0] for c in CASES])
def test_gpu_rule_paths(name, problem, target, method, rule):
    sel = select(problem, target)
    assert (sel.method, sel.rule) == (method, rule), sel.explain()
    assert sel.trace[-1].id == rule and sel.trace[-1].fired
    assert not any(step.fired for step in sel.trace[:-1])


# Spec §4 worked examples: NHWC F32 batch 1; columns G71/MIDGARD, G76, G52, G77/G78,
# G710/FIFTHGEN, CPU.
GROUPS = [("G71", "MIDGARD"), ("G76",), ("G52",), ("G77", "G78"), ("G710", "FIFTHGEN"), ("cpu",)]
WORKED = [
    (P(1, 224, 224, 3, 32, 3, 3, stride=2, pad=1), "GEMM GEMM DIRECT INDIRECT DIRECT GEMM"),
    (P(1, 224, 224, 3, 32, 3, 3, stride=2, pad=(0, 1, 0, 1)), "GEMM GEMM GEMM GEMM GEMM GEMM"),
    (P(1, 56, 56, 64, 64, 3, 3, pad=1), "WINOGRAD " * 6),
    (P(1, 56, 56, 64, 8, 3, 3, pad=1), "WINOGRAD DIRECT DIRECT INDIRECT DIRECT WINOGRAD"),
    (P(1, 7, 7, 1024, 8, 1, 1), "GEMM DIRECT DIRECT DIRECT DIRECT GEMM"),
    (P(1, 224, 224, 3, 64, 7, 7, stride=2, pad=3), "GEMM " * 6),
    (P(1, 64, 64, 32, 16, 5, 5, pad=2), "GEMM GEMM GEMM GEMM GEMM WINOGRAD"),
    (P(1, 64, 64, 32, 16, 5, 5, pad=2, fast_math=True), "WINOGRAD " * 6),
    (P(1, 56, 56, 64, 128, 3, 3, stride=2, pad=1), "GEMM GEMM GEMM GEMM GEMM GEMM_CONV2D"),
]
WORKED_ROWS = [(p, t, m) for p, methods in WORKED
               for targets, m in zip(GROUPS, methods.split()) for t in targets]


@pytest.mark.parametrize("problem,target,method", WORKED_ROWS,
                         ids=[f"{p.h}x{p.c}->{p.k} k{p.kh} s{p.stride[0]} {t}"
                              for p, t, _ in WORKED_ROWS])
def test_spec_worked_examples(problem, target, method):
    assert select(problem, target).method == method


@pytest.mark.parametrize("name,expected", [
    ("g77", "G77"), ("Mali-G78AE r0p1", "G78AE"), ("Mali-G51BIG", "G51BIG"),
    ("Mali-G52 MC2", "G52"), ("Mali-G925-Immortalis", "FIFTHGEN"), ("Mali-T880 MP4", "MIDGARD"),
    ("valhall", "VALHALL"), ("CPU", "cpu"), ("cpu-NOFP16", "cpu-nofp16"),
])
def test_target_names(name, expected):
    assert select(P(1, 8, 8, 16, 16, 3, 3, pad=1), name).target == expected


def test_every_target_answers():
    from convsel.rules import default_rules
    from convsel.targets import target_names

    for name in target_names(default_rules()):
        assert select(P(1, 56, 56, 64, 8, 3, 3, pad=1), name).method


def test_winograd_tile_by_kernel():
    tiles = {(3, 3): (4, 4), (5, 5): (4, 4), (7, 7): (2, 2), (1, 3): (1, 4), (3, 1): (4, 1),
             (1, 5): (1, 4), (5, 1): (4, 1), (1, 7): (1, 2), (7, 1): (2, 1)}
    for (kh, kw), tile in tiles.items():
        p = P(1, 32, 32, 32, 32, kh, kw, pad=(kh // 2, kh // 2, kw // 2, kw // 2),
              fast_math=True)
        sel = select(p, "G77")
        assert sel.method == "WINOGRAD" and sel.params["tile"] == tile, (kh, kw)
    small = select(P(1, 4, 4, 32, 32, 3, 3, pad=1, layout="NCHW"), "G77")
    assert small.params["tile"] == (2, 2)
