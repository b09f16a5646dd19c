"""``convsel plan``: text, JSON, overrides and one-line errors."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("onnx")

from onnx_models import Chain, groups_chain, squeezenet_fire2_f16

from convsel.cli import main
from convsel.tuning.db import TuningDB


@pytest.fixture
def model_file(tmp_path):
    def write(model, name="model.onnx"):
        path = tmp_path / name
        path.write_bytes(model.SerializeToString())
        return str(path)
    return write


def test_text_table_notes_and_summary(model_file, capsys):
    assert main(["plan", model_file(squeezenet_fire2_f16()), "--fast-math", "-v"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("features.3.expand3x3"))
    assert "1x16x55x55 -> 64" in row and "WINOGRAD" in row and "winograd 4x4" in row
    assert "cpu.winograd" in row and "relu" in row
    assert ("near miss  features.3.expand3x3: cpu.f16_winograd_blacklist row "
            "'squeezenet1_1-fire2_3-expand3x3': input (h, w) is 55x55, the row has 56x56") in out
    assert "summary  1 convolutions: WINOGRAD 1; 1 fused activations" in out
    assert "CpuWinogradConv2d::validate" in out   # -v prints the reason


def test_json_matches_the_library(model_file, capsys):
    assert main(["plan", model_file(groups_chain()), "--target", "G77", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "G77" and doc["policy"] == "acl"
    assert [n["name"] for n in doc["nodes"]] == ["depthwise", "grouped", "dilated"]
    assert doc["nodes"][2]["rule"] == "gpu.dilation"
    assert doc["summary"]["convolutions"] == 3


def test_input_shape_override(model_file, capsys):
    path = model_file(Chain(("batch", 3, 32, 32)).conv(8, 3, name="c", pads=[1] * 4).model())
    assert main(["plan", path, "--input-shape", "input=4,3,32,32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"][0]["problem"]["n"] == 4


@pytest.mark.parametrize("extra, words", [
    ([], "node 'c': the shape of input 'input' is (batch, 3, 32, 32)"),
    (["--input-shape", "input"], "--input-shape='input': expected NAME=D0,D1"),
    (["--input-shape", "other=1,3,32,32"], "--input-shape='other=1,3,32,32': no tensor"),
    (["--db", "t.sqlite"], "db applies to policy measured or predicted"),
    (["--backend", "numpy,cuda"], "unknown backend; known: numpy, opencl"),
    (["--target", "G999"], "G999"),
])
def test_errors_are_one_line(model_file, capsys, extra, words):
    path = model_file(Chain(("batch", 3, 32, 32)).conv(8, 3, name="c", pads=[1] * 4).model())
    assert main(["plan", path, *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and err.startswith("convsel plan: error:") and err.count("\n") == 1


def test_not_onnx_file(tmp_path, capsys):
    path = tmp_path / "notes.onnx"
    path.write_text("hello, I am a text file\n")
    assert main(["plan", str(path)]) == 2
    assert "not an ONNX model" in capsys.readouterr().err


def test_measured_policy_with_a_database_path(model_file, capsys, tmp_path):
    pytest.importorskip("convsel.policies.measured")
    db = str(tmp_path / "tuning.sqlite")
    TuningDB(db)   # an empty store: plan reads it, never makes one
    assert main(["plan", model_file(groups_chain()), "--policy", "measured", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "policy measured" in out and "measured 0 of 3 nodes" in out
