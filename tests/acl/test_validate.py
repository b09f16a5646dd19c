"""validate() predicates on ACL's own "SupportedKernels" evidence (spec §3.1, §5.1) and their
edge cases."""

import pytest

from convsel import ConvProblem as P
from convsel.acl import validate_cpu, validate_gpu
from convsel.rules import default_rules
from convsel.targets import resolve_target

RULES = default_rules()
CPU, CPU_NOFP16, G77 = (resolve_target(t, RULES) for t in ("cpu", "cpu-nofp16", "G77"))


def supported_kernels_problem(kh, kw, dtype="F32", layout="NCHW"):
    # ACL's test: input 17x31x2 (W=17, H=31, C=2), stride 1, pad 0, fast-math on.
    return P(1, 31, 17, 2, 1, kh, kw, dtype=dtype, layout=layout, fast_math=True)


CPU_F32_VALID = [(3, 3), (1, 3), (3, 1), (5, 5), (1, 5), (5, 1), (1, 7), (7, 1)]
INVALID = [(7, 7), (2, 2), (2, 5), (5, 2), (6, 3), (3, 6)]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("kernel", CPU_F32_VALID + INVALID)
def test_cpu_winograd_supported_kernels_f32(kernel, layout):
    verdict = validate_cpu.winograd(supported_kernels_problem(*kernel, layout=layout), CPU, RULES)
    assert verdict.ok == (kernel in CPU_F32_VALID), verdict.reason


@pytest.mark.parametrize("kernel", CPU_F32_VALID + INVALID)
def test_cpu_winograd_supported_kernels_f16(kernel):
    p = supported_kernels_problem(*kernel, dtype="F16")
    assert validate_cpu.winograd(p, CPU, RULES).ok == (kernel == (3, 3))
    assert not validate_cpu.winograd(p, CPU_NOFP16, RULES).ok


def test_cpu_winograd_edges():
    base = P(1, 32, 32, 32, 32, 5, 5, pad=2)
    assert validate_cpu.winograd(base, CPU, RULES).ok          # F32 needs no fast-math
    assert not validate_cpu.winograd(base.replace(stride=2), CPU, RULES).ok
    f16 = P(1, 32, 32, 32, 32, 3, 3, pad=1, dtype="F16")
    assert "fast-math" in validate_cpu.winograd(f16, CPU, RULES).reason
    assert not validate_cpu.winograd(base.replace(dtype="QASYMM8"), CPU, RULES).ok
    assert validate_cpu.winograd(P(1, 32, 32, 32, 32, 3, 3, pad=2), CPU, RULES).ok  # any pad


def test_cpu_gemm_direct_and_direct():
    p = P(1, 32, 32, 32, 32, 3, 3, pad=1)
    assert validate_cpu.gemm_direct(p, CPU).ok
    assert not validate_cpu.gemm_direct(p.replace(layout="NCHW"), CPU).ok
    assert not validate_cpu.gemm_direct(p.replace(dilation=2, pad=2), CPU).ok
    assert not validate_cpu.gemm_direct(p.replace(dtype="F16"), CPU_NOFP16).ok
    assert validate_cpu.gemm_direct(p.replace(dtype="QASYMM8_SIGNED"), CPU).ok
    assert validate_cpu.direct(p.replace(layout="NCHW"), CPU).ok
    assert not validate_cpu.direct(P(1, 32, 32, 32, 32, 3, 5, pad=1), CPU).ok
    assert not validate_cpu.direct(p.replace(dtype="QASYMM8"), CPU).ok


GPU_VALID = {"NCHW": [(3, 3), (1, 3), (3, 1), (5, 5), (1, 5), (5, 1)],
             "NHWC": [(3, 3), (1, 3), (3, 1), (5, 5), (1, 5), (5, 1), (7, 7), (1, 7), (7, 1)]}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("kernel", GPU_VALID["NHWC"] + [(2, 2), (2, 5), (5, 2), (6, 3)])
def test_gpu_winograd_supported_kernels(kernel, layout):
    verdict = validate_gpu.winograd(supported_kernels_problem(*kernel, layout=layout), G77, RULES)
    assert verdict.ok == (kernel in GPU_VALID[layout]), verdict.reason


@pytest.mark.parametrize("kernel,fast_math_needed", [((3, 3), False), ((1, 3), False),
                                                      ((3, 1), False), ((5, 1), False),
                                                      ((1, 5), False), ((7, 1), False),
                                                      ((1, 7), False), ((5, 5), True),
                                                      ((7, 7), True)])
def test_gpu_winograd_fast_math(kernel, fast_math_needed):
    kh, kw = kernel
    p = P(1, 32, 32, 32, 32, kh, kw, pad=(kh // 2, kh // 2, kw // 2, kw // 2))
    assert validate_gpu.winograd(p, G77, RULES).ok == (not fast_math_needed)
    assert validate_gpu.winograd(p.replace(fast_math=True), G77, RULES).ok
    f16 = p.replace(dtype="F16")
    assert not validate_gpu.winograd(f16, G77, RULES).ok           # F16 always needs fast-math
    assert validate_gpu.winograd(f16.replace(fast_math=True), G77, RULES).ok


def test_gpu_winograd_pad_limits_and_stride():
    at_limit = P(1, 32, 32, 32, 32, 5, 5, pad=(2, 2, 2, 2), fast_math=True)
    assert validate_gpu.winograd(at_limit, G77, RULES).ok
    over = at_limit.replace(pad=(3, 2, 2, 2))
    assert "pad" in validate_gpu.winograd(over, G77, RULES).reason
    asym = P(1, 32, 32, 32, 32, 3, 3, pad=(0, 1, 1, 0))
    assert validate_gpu.winograd(asym, G77, RULES).ok
    assert not validate_gpu.winograd(asym.replace(stride=2), G77, RULES).ok


def test_gpu_direct_nchw_limits():
    p = P(1, 32, 32, 32, 32, 3, 3, pad=1, layout="NCHW")
    assert validate_gpu.direct(p, G77, RULES).ok
    assert not validate_gpu.direct(p.replace(stride=3), G77, RULES).ok
    assert validate_gpu.direct(P(1, 32, 32, 32, 32, 1, 1, stride=3, layout="NCHW"), G77,
                               RULES).ok
    assert not validate_gpu.direct(P(1, 32, 32, 32, 32, 9, 9, layout="NCHW"), G77, RULES).ok
    assert validate_gpu.direct(P(1, 32, 32, 32, 32, 9, 9, layout="NCHW", dtype="QASYMM8"), G77,
                               RULES).ok
    assert validate_gpu.direct(P(1, 32, 32, 32, 32, 9, 9, stride=4), G77, RULES).ok  # NHWC


def test_gpu_indirect_and_fft():
    p = P(1, 32, 32, 32, 32, 3, 3, pad=1)
    assert validate_gpu.indirect(p, G77).ok
    assert not validate_gpu.indirect(p.replace(layout="NCHW"), G77).ok
    assert not validate_gpu.indirect(p.replace(dtype="QASYMM8"), G77).ok
    assert validate_gpu.fft(p, G77).ok
    assert not validate_gpu.fft(p.replace(pad=(1, 1, 1, 0)), G77).ok
    assert not validate_gpu.fft(p.replace(stride=2), G77).ok          # output size changes
    assert not validate_gpu.fft(p.replace(dtype="F16"), G77).ok
    assert validate_gpu.fft(p.replace(dtype="F16", fast_math=True), G77).ok


def test_grouped_problems_fail_every_acl_predicate():
    g = P(1, 32, 32, 32, 32, 3, 3, pad=1, groups=32)
    for verdict in (validate_cpu.winograd(g, CPU, RULES), validate_cpu.gemm_direct(g, CPU),
                    validate_cpu.direct(g, CPU), validate_gpu.direct(g, G77, RULES),
                    validate_gpu.winograd(g, G77, RULES), validate_gpu.indirect(g, G77)):
        assert not verdict.ok and "groups" in verdict.reason
