"""Kernel parameters as tuned variants on OpenCL: tuning times every implicit-GEMM variant,
the database keeps each one's timing, and the measured policy runs the winner's parameters."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from opencl_support import data, opencl_runtime
from tolerances import assert_within_tolerance

import convsel
from convsel import algorithms
from convsel.problem import ConvProblem
from convsel.reference import conv2d_reference
from convsel.rules import default_rules
from convsel.tuning.db import TuningDB
from convsel.tuning.measure import measure
from convsel.tuning.timing import TimingSettings

pytest.importorskip("pyopencl")

P = ConvProblem(1, 12, 12, 16, 32, 3, 3, pad=1)
FAST = TimingSettings(warmup=1, min_runs=2, min_time=0.0, max_runs=3, rounds=1)


def test_tuning_times_every_variant_and_the_measured_policy_runs_the_winner(tmp_path):
    opencl_runtime()
    labels = {algorithms.label_of("implicit_gemm", v)
              for v in algorithms.variants("implicit_gemm", P, default_rules())}
    assert len(labels) >= 3, "the search space should offer a real choice here"
    others = [a for a in algorithms.ALGORITHMS if a != "implicit_gemm"]
    found = measure(P, "opencl", settings=FAST, exclude=others)
    assert labels <= set(found.timings), set(found.timings) ^ labels
    assert all("median_s" in found.timings[k] for k in labels), found.errors
    db = TuningDB(tmp_path / "tuning.sqlite")
    db.record(found.entry())

    x, w, b = data(P, 3)
    op = convsel.prepare(P, w, b, backend="opencl", policy="measured", db=db)
    chosen = op.selection.measurement["chosen"]
    assert op.algorithm == "implicit_gemm" and chosen in labels
    stored = found.timings[chosen]["params"]
    assert op.params == {k: tuple(v) if isinstance(v, list) else v for k, v in stored.items()}
    assert algorithms.label_of(op.algorithm, op.params) == chosen
    y = op.run(x)
    assert_within_tolerance(P, x, w, b, y, "implicit_gemm")


def test_opencl_tuning_times_by_the_device_clock_and_can_be_told_the_wall():
    opencl_runtime()
    only = [a for a in algorithms.ALGORITHMS if a != "direct"]
    device = measure(P, "opencl", settings=FAST, exclude=only)
    wall = measure(P, "opencl", settings=dataclasses.replace(FAST, clock="wall"), exclude=only)
    d, w = device.timings["direct"], wall.timings["direct"]
    assert (d["clock"], w["clock"]) == ("device", "wall")
    # the host's clock around the call also holds the launch, the wait and both transfers
    assert 0 < d["min_s"] < w["min_s"]


def test_a_named_variant_runs_through_the_front_door():
    opencl_runtime()
    x, w, _ = data(P, 4, bias=False)
    params = {"tile": (64, 64, 16, 4, 4), "vec": 4, "split": 3}
    op = convsel.prepare(P, w, backend="opencl", algorithm="implicit_gemm", params=params)
    assert op.backend == "opencl" and op.params == params
    ref = conv2d_reference(P, x, w, None)
    assert np.abs(op.run(x) - ref).max() <= 1e-4 * np.abs(ref).max()
