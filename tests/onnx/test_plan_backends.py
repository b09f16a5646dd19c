"""A model planned over backends: each Conv's backend and algorithm, the backends passed over,
and the host-device switches (ArmNN's Optimize with backendPreferences; the fastest
assignment with the measured policy)."""

from __future__ import annotations

import math
import re

import pytest

pytest.importorskip("onnx")

from onnx_models import Chain
from opencl_support import opencl_runtime

import convsel
from convsel.backends.transfer import TransferCost
from convsel.cli import main
from convsel.onnx.placement import Costs, data_flow, fastest, switches
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.identity import device_identity
from convsel.tuning.measure import decide

NO_FFT = "not supported by backend opencl: the opencl backend has no fft implementation"


@pytest.fixture(autouse=True)
def _opencl():
    opencl_runtime()


def _three_convs():
    """On G77 the 7x7 (16 -> 8 channels) is FFT, which OpenCL lacks; the 3x3 and the 1x1 run
    on OpenCL and feed each other; the last one's output is the model's."""
    return (Chain((1, 16, 32, 32)).conv(8, 7, name="big", pads=[3] * 4).relu()
            .conv(8, 3, name="c3", pads=[1] * 4).relu().conv(4, 1, name="c1").model())


def test_first_supported_over_two_backends_lists_assignments_and_switches():
    result = convsel.plan(_three_convs(), "G77", backend="opencl,numpy")
    nodes = {n.name: n for n in result.nodes}
    assert [(n.name, n.backend, n.selection.algorithm) for n in result.nodes] == [
        ("big", "numpy", "fft"), ("c3", "opencl", "im2col_gemm"), ("c1", "opencl", "gemm_1x1")]
    assert nodes["big"].passed_over == (NO_FFT,) and nodes["c3"].passed_over == ()
    # c3 copies its input in (big ran on the host), c1 reads c3 on the device, then copies
    # the model's output out: two switches
    assert [n.copies for n in result.nodes] == [(False, False), (True, False), (False, True)]
    summary = result.summary
    assert summary["switches"] == 2 and summary["backends"] == {"opencl": 2, "numpy": 1}
    doc = result.to_dict()
    assert doc["placement"]["backends"] == ["opencl", "numpy"]
    assert doc["nodes"][0]["backend"] == "numpy" and doc["nodes"][0]["passed_over"] == [NO_FFT]
    # the two copies priced with the device's measured link, as the fastest plan prices them
    link = doc["placement"]["transfers"]["opencl"]
    assert link["source"].startswith("measured") and link["latency_ms"] > 0
    cost = TransferCost(link["latency_ms"] / 1e3,
                        math.inf if link["gb_per_s"] is None else link["gb_per_s"] * 1e9, "")
    nbytes = 1 * 8 * 32 * 32 * 4            # c3's input and c1's output, float32 NCHW
    copy_out = 1 * 4 * 32 * 32 * 4
    assert summary["transfer_ms"] == pytest.approx(
        (cost.seconds(nbytes) + cost.seconds(copy_out)) * 1e3, rel=1e-6)


def test_numpy_first_keeps_everything_on_the_host():
    result = convsel.plan(_three_convs(), "G77", backend=["numpy", "opencl"])
    assert {n.backend for n in result.nodes} == {"numpy"} and result.summary["switches"] == 0
    assert result.summary["transfer_ms"] == 0   # nothing moves: no device link is measured


def test_one_backend_falls_back_to_numpy_as_a_call_does():
    result = convsel.plan(_three_convs(), "G77", backend="opencl")
    assert [n.backend for n in result.nodes] == ["numpy", "opencl", "opencl"]
    assert result.nodes[0].passed_over == (NO_FFT,)


def test_plan_cli_prints_each_convs_backend_and_the_switches(tmp_path, capsys):
    import onnx

    path = tmp_path / "three.onnx"
    onnx.save(_three_convs(), str(path))
    assert main(["plan", str(path), "--target", "G77", "--backend", "opencl,numpy"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines()
             if line.startswith("  ") and line.split()[0] in ("big", "c3", "c1")}
    assert lines["big"] == ["numpy", "fft"]
    assert lines["c3"] == ["opencl", "im2col_gemm", "copy", "in"]
    assert lines["c1"] == ["opencl", "gemm_1x1", "copy", "out"]
    assert f"passed over: {NO_FFT}" in out
    assert re.search(r"switches 2 host-device copies \([0-9.e-]+ ms of copies\); opencl 2, "
                     r"numpy 1", out), out


# -- the fastest assignment ---------------------------------------------------------------------
def _t(alg: str, ms: float, clock: str) -> dict:
    return {"algorithm": alg, "params": {}, "median_s": ms / 1e3, "iqr_s": ms / 1e5,
            "runs": 7, "min_s": ms / 1e3, "pruned": False, "clock": clock}


def test_measured_plan_over_two_backends_assigns_each_conv_from_its_timings(tmp_path):
    """c3 is far faster on OpenCL, c1 far faster on numpy: the copies between cannot turn it
    (the device's measured copy cost is microseconds here)."""
    model = (Chain((1, 16, 32, 32)).conv(16, 3, name="c3", pads=[1] * 4).relu()
             .conv(8, 1, name="c1").model())
    acl = convsel.plan(model, "cpu")
    db = TuningDB(tmp_path / "tuning.sqlite")
    plans = {"c3": {"numpy": _t("direct", 50.0, "wall"), "opencl": _t("direct", 0.5, "device")},
             "c1": {"numpy": _t("gemm_1x1", 0.05, "wall"),
                    "opencl": _t("gemm_1x1", 40.0, "device")}}
    for node in acl.nodes:
        for backend, timing in plans[node.name].items():
            label = timing["algorithm"]
            winner, tie = decide({label: timing})
            db.record(TuningEntry(problem=node.problem, backend=backend,
                                  device=device_identity(backend), winner=winner, tie=tie,
                                  timings={label: timing}))
    result = convsel.plan(model, "cpu", "measured", backend=["numpy", "opencl"], db=db.path)
    assert [(n.name, n.backend, n.selection.algorithm) for n in result.nodes] == [
        ("c3", "opencl", "direct"), ("c1", "numpy", "gemm_1x1")]
    assert result.nodes[0].selection.backend == "opencl"
    assert result.nodes[0].selection.trace[-1].id == "placement.fastest"
    assert result.summary["switches"] == 2             # c3: in and out
    assert result.summary["transfer_ms"] > 0
    assert "numpy: direct 50 ms" in result.nodes[0].passed_over[0]


def _chain_flow(n: int):
    tensors = [f"t{i}" for i in range(n + 1)]
    consumers = {t: [f"c{i}"] for i, t in enumerate(tensors[:-1])}
    return data_flow(tensors[:-1], tensors[1:], consumers, {tensors[-1]})


SPACES = {"numpy": "host", "opencl": "opencl:default"}
MB = 1 << 20


def test_a_chain_stays_on_the_device_when_leaving_costs_more_than_it_saves():
    """Three Convs; the middle one is 0.2 ms faster on numpy, but leaving the device costs a
    copy out and a copy back in (1 ms each): all three stay on OpenCL."""
    link = {"opencl": TransferCost(1e-3, math.inf, "given")}
    costs = [Costs({"numpy": 5e-3, "opencl": 1e-3}, MB, MB),
             Costs({"numpy": 1.0e-3, "opencl": 1.2e-3}, MB, MB),
             Costs({"numpy": 5e-3, "opencl": 1e-3}, MB, MB)]
    flow = _chain_flow(3)
    assert fastest(costs, flow, SPACES, link) == ["opencl", "opencl", "opencl"]
    cheap = {"opencl": TransferCost(1e-5, math.inf, "given")}
    assert fastest(costs, flow, SPACES, cheap) == ["opencl", "numpy", "opencl"]
    moves = switches(["opencl", "numpy", "opencl"], flow, SPACES, [MB] * 3, [MB] * 3, cheap)
    assert moves.count == 4 and moves.seconds == pytest.approx(4e-5)


def test_an_output_read_twice_elsewhere_is_copied_out_once():
    """c0 feeds c1 and c2, both on the host: one copy out of the device, not two."""
    flow = data_flow(["x", "a", "a"], ["a", "b", "c"], {"x": ["c0"], "a": ["c1", "c2"]},
                     {"b", "c"})
    assert flow.parent == (None, 0, 0) and flow.children[0] == (1, 2)
    moves = switches(["opencl", "numpy", "numpy"], flow, SPACES, [MB] * 3, [MB] * 3)
    assert moves.count == 2 and moves.per_node[0] == (True, True) and moves.seconds is None
