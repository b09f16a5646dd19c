"""Implicit GEMM on OpenCL: every declared variant, split-K, merged kernel-row taps and the
device-class defaults, each with one and two local buffers (DOUBLE_BUFFER), against the
float64 reference with NaN-poisoned outputs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from opencl_support import data, opencl_runtime
from tolerances import relative_error, tolerance

from convsel import algorithms
from convsel.algorithms import implicit_gemm as home
from convsel.errors import UnsupportedError
from convsel.problem import ConvProblem
from convsel.rules import default_rules
from convsel.tuning.layers import default_layer_file, load_layers

pytest.importorskip("pyopencl")

import pyopencl as cl  # noqa: E402

from convsel.backends.opencl import implicit_gemm as ig  # noqa: E402
from convsel.backends.opencl import prepared  # noqa: E402

RULES = default_rules()


@pytest.fixture(autouse=True)
def _nan_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepared, "OUTPUT_FILL", np.nan)


def _error(p: ConvProblem, params: dict, seed: int = 0) -> tuple[float, object]:
    rt = opencl_runtime()
    x, w, b = data(p, seed)
    kernel = ig.prepare(p, w, b, params, rt)
    y = kernel.run(x)
    assert np.isfinite(y).all(), f"{p} {params}: unwritten or non-finite outputs"
    return relative_error(p, x, w, b, y), kernel


PROBLEMS = [
    ConvProblem(2, 9, 7, 12, 20, 3, 3, pad=1, activation="relu"),
    ConvProblem(1, 11, 10, 8, 7, 3, 2, stride=(2, 1), pad=(1, 0, 1, 1), dilation=(2, 1)),
    ConvProblem(2, 8, 8, 16, 36, 1, 1),
    ConvProblem(1, 9, 9, 16, 8, 1, 1, stride=2),
    ConvProblem(2, 6, 6, 8, 12, 3, 3, pad=1, dtype="F16"),
]


BUFFERS = [1, 2]


def _built_with(kernel: object, buffers: int) -> bool:
    """Whether the implicit-GEMM launch of ``kernel`` was built for ``buffers`` local
    buffers (its configuration id carries the build options)."""
    ids = [s.config_id for s in kernel.steps
           if s.name in ("implicit_gemm", "gemm", "indirect_gemm")]
    return bool(ids) and all(("DOUBLE_BUFFER" in i) == (buffers == 2) for i in ids)


@pytest.mark.parametrize("buffers", BUFFERS)
@pytest.mark.parametrize("p", PROBLEMS, ids=str)
def test_every_variant_matches_the_reference(p, buffers):
    # the tensor-core variants (F16 here) are test_opencl_tensor_cores.py's
    found = [v for v in algorithms.variants("implicit_gemm", p, RULES) if "math" not in v]
    assert 1 <= len(found) <= home.MAX_VARIANTS
    for params in found:
        resolved = algorithms.supports("implicit_gemm", p, RULES,
                                       {**params, "buffers": buffers}).params
        err, kernel = _error(p, resolved)
        assert _built_with(kernel, buffers)
        assert err <= tolerance("implicit_gemm", p.dtype), (params, err)


@pytest.mark.parametrize("buffers", BUFFERS)
@pytest.mark.parametrize("split", [2, 3, 7])
def test_split_k_sums_its_partial_products(split, buffers):
    p = ConvProblem(1, 7, 6, 20, 24, 3, 3, pad=1, activation="leaky_relu")
    err, kernel = _error(p, {"split": split, "tile": (32, 32, 8, 4, 4), "buffers": buffers})
    assert _built_with(kernel, buffers)
    assert err <= tolerance("implicit_gemm", "F32")
    assert [s.name for s in kernel.steps] == ["implicit_gemm", "splitk_reduce"]
    assert kernel.workspace_bytes == split * p.out_h * p.out_w * p.k * 4


@pytest.mark.parametrize("buffers", BUFFERS)
@pytest.mark.parametrize("split", home.SPLIT_K_FACTORS)
@pytest.mark.parametrize("p", [ConvProblem(1, 9, 8, 72, 132, 3, 3, pad=1, activation="relu"),
                               ConvProblem(2, 7, 7, 1024, 136, 1, 1)], ids=str)
def test_offered_split_k_variants_match_the_reference(p, split, buffers):
    # the offered tile and splits (split_k_variants) on a ragged problem: M, N and a tap's
    # channels not multiples of the tile, so every edge of the partial sums is exercised
    params = {"tile": home.SPLIT_K_TILE, "vec": 4, "split": split, "buffers": buffers}
    resolved = algorithms.supports("implicit_gemm", p, RULES, params).params
    err, kernel = _error(p, resolved)
    assert _built_with(kernel, buffers)
    assert err <= tolerance("implicit_gemm", "F32"), (params, err)
    assert [s.name for s in kernel.steps] == ["implicit_gemm", "splitk_reduce"]
    assert kernel.workspace_bytes == split * p.n * p.out_h * p.out_w * p.k * 4
    assert kernel.workspace_bytes == algorithms.workspace_bytes("implicit_gemm", p, resolved,
                                                                "opencl")


def test_split_k_variants_are_offered_where_the_tile_makes_few_groups():
    layers, _ = load_layers(default_layer_file(), ["resnet50"])
    by_name = {x.name: x.problem for x in layers}
    few = by_name["layer3.{1..5}.conv1"].replace(n=32)            # 98 groups of 128x128
    offered = [v for v in algorithms.variants("implicit_gemm", few, RULES) if "split" in v]
    assert offered == [{"tile": home.SPLIT_K_TILE, "vec": 4, "split": s}
                       for s in home.SPLIT_K_FACTORS]
    for v in offered:
        assert algorithms.supports("implicit_gemm", few, RULES, v).ok
    many = by_name["layer1.0.conv1"].replace(n=32)           # 784 groups
    tiny = by_name["layer3.{1..5}.conv1"].replace(n=1)        # 4 groups: the default splits
    short = ConvProblem(32, 14, 14, 128, 256, 1, 1)           # 98 groups, 8 slices of 16
    for p in (many, tiny, short):
        assert not [v for v in algorithms.variants("implicit_gemm", p, RULES) if "split" in v]


def test_split_beyond_the_reduction_is_refused():
    p = ConvProblem(1, 5, 5, 4, 4, 1, 1)             # one slice of 8 channels
    verdict = ig.supports(p, {"split": 2}, opencl_runtime())
    assert not verdict.ok and "split 2" in verdict.reason


@pytest.mark.parametrize("p", [ConvProblem(2, 15, 13, 3, 16, 7, 7, stride=2, pad=3),
                               ConvProblem(1, 10, 9, 5, 6, 3, 3, pad=(2, 0, 1, 2))], ids=str)
def test_few_channels_merge_a_kernel_row(p):
    geo = ig.Geometry.conv(p)
    config = ig.configure({}, opencl_runtime(), geo, p.c, p.k)
    assert config.merge_kw and config.vec == 1
    for split in (1, 2):
        for buffers in BUFFERS:
            err, _ = _error(p, {"split": split, "buffers": buffers})
            assert err <= tolerance("implicit_gemm", "F32")


# the algorithms that run their GEMM on this kernel with the device's default buffers, on
# problems each takes (gemm_1x1: 1x1; winograd: 3x3 stride 1, float GEMM IO; indirect_gemm:
# the indirection buffer; im2col_gemm: a strided 3x3)
SHARED = [("gemm_1x1", ConvProblem(2, 7, 6, 16, 20, 1, 1, activation="relu")),
          ("gemm_1x1", ConvProblem(2, 7, 6, 16, 20, 1, 1, dtype="F16")),
          ("im2col_gemm", ConvProblem(1, 9, 8, 12, 16, 3, 3, stride=2, pad=1)),
          ("winograd", ConvProblem(1, 10, 9, 8, 12, 3, 3, pad=1)),
          ("winograd", ConvProblem(1, 10, 9, 8, 12, 3, 3, pad=1, dtype="F16")),
          ("indirect_gemm", ConvProblem(1, 9, 8, 12, 16, 3, 3, pad=1))]


@pytest.mark.parametrize("default", [False, True])
@pytest.mark.parametrize(("alg", "p"), SHARED, ids=lambda v: str(v))
def test_shared_gemm_paths_with_the_default_buffers(alg, p, default, monkeypatch):
    from convsel.backends import implementation

    monkeypatch.setattr(ig, "DOUBLE_BUFFER", default)
    rt = opencl_runtime()
    x, w, b = data(p, 3)
    params = algorithms.supports(alg, p, RULES).params        # e.g. Winograd's output tile
    kernel = implementation(alg, "opencl").prepare(p, w, b, dict(params), rt)
    y = kernel.run(x)
    assert np.isfinite(y).all(), f"{alg} {p}: unwritten or non-finite outputs"
    assert _built_with(kernel, 2 if default else 1)
    assert relative_error(p, x, w, b, y) <= tolerance(alg, p.dtype)


class _LocalMemory:
    """The runtime with its device's local memory reported as ``size`` bytes (and its type
    as ``kind``, if given)."""

    def __init__(self, runtime: object, size: int, kind: int | None = None) -> None:
        self._runtime = runtime
        self.device = SimpleNamespace(local_mem_size=size,
                                      type=runtime.device.type if kind is None else kind,
                                      max_compute_units=runtime.device.max_compute_units)

    def __getattr__(self, name: str) -> object:
        return getattr(self._runtime, name)


def test_double_buffering_that_does_not_fit_is_refused_or_not_chosen(monkeypatch):
    p = ConvProblem(1, 8, 8, 16, 16, 3, 3, pad=1)
    tile = (32, 32, 8, 4, 4)                         # 8 * (32 + 32 + 8) * 4 = 2304 bytes
    small = _LocalMemory(opencl_runtime(), 4096)
    assert ig.supports(p, {"tile": tile}, small).ok
    verdict = ig.supports(p, {"tile": tile, "buffers": 2}, small)
    assert not verdict.ok
    assert "double-buffered" in verdict.reason and "4608 bytes" in verdict.reason
    with pytest.raises(UnsupportedError, match="double-buffered"):
        ig.prepare(p, np.zeros(p.weights_shape, np.float32), None,
                   {"tile": tile, "buffers": 2}, small)
    # forced on, the default falls back to one buffer where two do not fit
    monkeypatch.setattr(ig, "DOUBLE_BUFFER", True)
    geo = ig.Geometry.conv(p)
    assert ig.configure({"tile": tile}, small, geo, p.c, p.k).buffers == 1
    assert ig.configure({"tile": tile}, opencl_runtime(), geo, p.c, p.k).buffers == 2


def test_constraint_names_the_bad_parameter():
    p = ConvProblem(1, 8, 8, 6, 8, 3, 3, pad=1)
    assert "WM and WN" in algorithms.supports("implicit_gemm", p, RULES,
                                              {"tile": (64, 64, 8, 2, 4)}).reason
    assert "vec 4 needs C and K" in algorithms.supports("implicit_gemm", p, RULES,
                                                        {"vec": 4}).reason
    assert "split" in algorithms.supports("implicit_gemm", p, RULES, {"split": 0}).reason
    assert "buffers" in algorithms.supports("implicit_gemm", p, RULES, {"buffers": 3}).reason
    assert algorithms.supports("implicit_gemm", p, RULES, {"buffers": 2}).params["buffers"] == 2
    grouped = ConvProblem(1, 8, 8, 8, 8, 3, 3, pad=1, groups=2)
    assert not algorithms.supports("implicit_gemm", grouped, RULES).ok
    with pytest.raises(UnsupportedError, match="TK"):
        ig.prepare(p, np.zeros(p.weights_shape, np.float32), None,
                   {"tile": (64, 64, 5, 4, 4)}, opencl_runtime())


def _fake_runtime(kind: int, units: int) -> SimpleNamespace:
    return SimpleNamespace(device=SimpleNamespace(type=kind, max_compute_units=units))


def test_defaults_per_device_class():
    cpu = _fake_runtime(cl.device_type.CPU, 16)
    gpu = _fake_runtime(cl.device_type.GPU, 132)
    assert ig.default_tile(cpu, 10**6, 1024) == ig.CPU_TILE
    assert ig.default_tile(gpu, 32 * 56 * 56, 256) == ig.GPU_TILE       # plenty of groups
    assert ig.default_tile(gpu, 49, 512) == (32, 32, 8, 4, 4)           # batch 1, 7x7 map
    # a 7x7x2048 -> 512 layer at batch 1: split-K gives the GPU enough work-groups
    assert ig.default_splits(gpu, 49, 512, (32, 32, 8, 4, 4), 256) == 8
    assert ig.default_splits(cpu, 49, 512, (32, 32, 8, 4, 4), 256) == 1
    assert ig.default_splits(gpu, 49, 512, (32, 32, 8, 4, 4), 256, batches=16) == 1


def test_registry_entry_is_opencl_only_and_never_acls_pick():
    spec = algorithms.spec("implicit_gemm")
    assert set(spec.backends) == {"opencl"}
    layers, _ = load_layers(default_layer_file())
    for layer in layers:
        assert algorithms.algorithm_for("GEMM", layer.problem) != "implicit_gemm"
    order = algorithms.ALGORITHMS
    assert order.index("implicit_gemm") > order.index("im2col_gemm")


def test_default_buffers_two_on_gpus_for_one_tap_geometries_only():
    rt = opencl_runtime()
    gpu = _LocalMemory(rt, 48 * 1024, cl.device_type.GPU)
    tile = ig.GPU_TILE
    one_tap = ig.Geometry.matrix(4096)
    three = ig.Geometry.conv(ConvProblem(1, 16, 16, 64, 64, 3, 3, pad=1))
    assert ig.DOUBLE_BUFFER is None
    assert ig.configure({"tile": tile}, gpu, one_tap, 64, 64).buffers == 2
    assert ig.configure({"tile": tile}, gpu, three, 64, 64).buffers == 1
    assert ig.configure({"tile": tile, "buffers": 2}, gpu, three, 64, 64).buffers == 2
    if not rt.device.type & cl.device_type.GPU:           # PoCL: unmeasured, one buffer
        assert ig.configure({"tile": tile}, rt, one_tap, 64, 64).buffers == 1
    small = _LocalMemory(rt, 12 * 1024, cl.device_type.GPU)   # 8448 bytes, doubled 16896
    assert ig.configure({"tile": tile}, small, one_tap, 64, 64).buffers == 1
