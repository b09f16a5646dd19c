"""The input-shape override has one spelling per surface (issue 25, item 14), and errors name
that surface's: ``input_shapes={NAME: dims}`` in Python, ``--input-shape NAME=D0,D1,..`` on the
command line (plan and tune MODEL.onnx). (HTTP's form field is ``input_shape``.)"""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")

from onnx_models import Chain  # noqa: E402

from convsel import InvalidProblemError  # noqa: E402
from convsel.cli import main  # noqa: E402
from convsel.onnx import UnknownShapeError, plan  # noqa: E402


@pytest.fixture
def symbolic(tmp_path):
    """A model whose batch is symbolic: planning needs the input's shape."""
    path = tmp_path / "batch.onnx"
    onnx.save(Chain(("batch", 3, 32, 32)).conv(8, 3, name="c", pads=[1] * 4).model(), path)
    return str(path)


def test_python_names_input_shapes(symbolic):
    with pytest.raises(UnknownShapeError) as info:
        plan(symbolic, "cpu")
    assert "input_shapes={'input': (1, 3, 224, 224)}" in str(info.value)
    assert "--input-shape" not in str(info.value)
    with pytest.raises(InvalidProblemError) as info:
        plan(symbolic, "cpu", input_shapes={"other": (1, 3, 32, 32)})
    assert info.value.field == "input_shapes"
    assert plan(symbolic, "cpu", input_shapes={"input": (2, 3, 32, 32)}).nodes[0].problem.n == 2


@pytest.mark.parametrize("command", [["plan"], ["tune", "--min-time", "0", "--repeats", "1"]])
def test_the_command_line_names_input_shape(symbolic, capsys, tmp_path, command):
    argv = [command[0], symbolic, *command[1:]]
    if command[0] == "tune":
        argv += ["--db", str(tmp_path / "t.sqlite")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--input-shape input=1,3,224,224" in err and "input_shapes" not in err, err
    assert main([*argv, "--input-shape", "input=1,3,0,32"]) == 2
    err = capsys.readouterr().err
    assert "--input-shape='input=1,3,0,32': every dimension must be >= 1" in err, err
    assert main([*argv, "--input-shape", "other=1,3,32,32"]) == 2
    err = capsys.readouterr().err
    assert "--input-shape='other=1,3,32,32': no tensor of the graph" in err, err
