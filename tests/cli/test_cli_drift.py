"""What the command line says matches what it does (issue 25, item 19): plan's --help lists
every policy; the measured trace names calls that exist; tune-cl's --help names files that
ship; tables stay aligned on long labels; a malformed --kernel is an error, not a guess."""

from __future__ import annotations

import inspect
import re

import pytest
from repo import ROOT

import convsel
from convsel import ConvProblem, choose
from convsel.cli import build_parser, main
from convsel.finder import FindEntry, FindResult
from convsel.policies import POLICIES
from convsel.tuning.db import TuningDB

SIZES = ["--h", "8", "--w", "8", "--c", "4", "--k", "8", "--pad", "1"]


def _help(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([command, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_plan_help_lists_every_policy_and_plan_takes_them(capsys, tmp_path):
    text = _help("plan", capsys)
    assert all(policy in text for policy in POLICIES), text
    onnx = pytest.importorskip("onnx")
    from onnx_models import groups_chain

    model, db = tmp_path / "m.onnx", tmp_path / "t.sqlite"
    onnx.save(groups_chain(), model)
    TuningDB(db)
    assert main(["plan", str(model), "--policy", "predicted", "--backend", "numpy", "--db",
                 str(db)]) == 0
    assert "policy predicted" in capsys.readouterr().out


def test_the_measured_trace_names_calls_that_take_tune(tmp_path):
    TuningDB(tmp_path / "t.sqlite")
    reason = choose(ConvProblem(1, 8, 8, 4, 8, 3, 3, pad=1), "cpu", policy="measured",
                    db=tmp_path / "t.sqlite").trace[-1].reason
    assert "select with tune" not in reason            # select() takes no tune
    assert "tune" not in inspect.signature(convsel.select).parameters
    assert 'choose(..., policy="measured", tune=True)' in reason
    assert 'prepare/conv2d with tune="auto"' in reason
    for function in (convsel.prepare, convsel.conv2d):
        assert "tune" in inspect.signature(function).parameters


def test_tune_cl_help_names_only_files_that_ship(capsys):
    text = _help("tune-cl", capsys)
    paths = re.findall(r"[\w.-]+(?:/[\w.-]+)+\.json", text)
    assert paths and all((ROOT / p).exists() for p in paths), paths
    assert "shared/" not in text


def test_the_find_table_stays_aligned_on_long_labels():
    entries = (FindEntry("implicit_gemm:128x64x8:4x4:splitk8", "implicit_gemm", {}, "ok",
                         "fastest", median_s=1e-3, iqr_s=1e-5, runs=5, rank=1,
                         workspace_bytes=1 << 20),
               FindEntry("direct", "direct", {}, "ok", "slower", median_s=2e-3, iqr_s=1e-5,
                         runs=5, rank=2, workspace_bytes=0))
    result = FindResult(ConvProblem(1, 8, 8, 4, 8, 3, 3, pad=1), "opencl", {"name": "gpu"},
                        entries, "implicit_gemm:128x64x8:4x4:splitk8", (), "direct", True)
    lines = result.table().splitlines()
    header = next(i for i, line in enumerate(lines) if "candidate" in line)
    rows = lines[header:header + 3]
    for column in ("status", "reason"):
        starts = {row.index(word) for row, word in
                  zip(rows, (column, *(("ok",) if column == "status" else ("fastest", "slower"))))}
        assert len(starts) == 1, "\n".join(rows)


def test_the_plan_table_stays_aligned_on_long_node_names(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx_models import Chain

    model = tmp_path / "m.onnx"
    long_name = "/backbone/stage4/block12/" + "very_long_module_name/" * 3 + "Conv"
    onnx.save(Chain((1, 8, 16, 16)).conv(8, 3, name=long_name, pads=[1] * 4)
              .conv(8, 1, name="short").model(), model)
    assert main(["plan", str(model)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("node"))
    rows = [line for line in lines if line.startswith((long_name, "short "))]
    assert len(rows) == 2 and long_name in rows[0]            # never cut
    method = header.index("method")
    assert {row[method:].split()[0] for row in rows} <= {"GEMM", "WINOGRAD", "DIRECT"}, rows


@pytest.mark.parametrize("flag,value", [("--kernel", "3x"), ("--kernel", "x3"),
                                        ("--kernel", "3x3x3"), ("--pad", "1,,1"),
                                        ("--stride", "2,")])
def test_a_malformed_size_is_an_error_not_a_guess(capsys, flag, value):
    argv = ["select", *SIZES, "--kernel", "3", flag, value]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and repr(value) in err, err


def test_well_formed_sizes_still_parse(capsys):
    assert main(["select", *SIZES, "--kernel", "1x7", "--pad", "0,0,3,3", "--json"]) == 0
    assert '"kw": 7' in capsys.readouterr().out
