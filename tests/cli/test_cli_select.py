"""``convsel select`` and ``convsel targets`` from the command line."""

import json
import subprocess
import sys

import pytest

from convsel.cli import main


def test_select_text(capsys):
    assert main(["select", "--h", "56", "--w", "56", "--c", "64", "--k", "8", "--kernel", "3",
                 "--pad", "1", "--target", "Mali-G77"]) == 0
    out = capsys.readouterr().out
    assert "method     INDIRECT" in out and "gpu.nhwc.direct.last_layer" in out
    assert "candidates:" in out


def test_select_json(capsys):
    assert main(["select", "--h", "17", "--w", "17", "--c", "128", "--k", "192", "--kernel",
                 "1x7", "--pad", "0,0,3,3", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["method"] == "WINOGRAD" and answer["params"]["tile"] == [1, 2]
    assert answer["problem"]["kw"] == 7 and answer["rules"]["digest"]
    assert [s["id"] for s in answer["trace"]][-1] == "cpu.winograd"


@pytest.mark.parametrize("args,words", [
    (["--pad", "5"], "pad=(5, 5, 5, 5)"),
    (["--target", "G99"], "unknown target"),
    (["--dtype", "F64"], "unknown dtype"),
    (["--stride", "0"], "strides must be >= 1"),
])
def test_select_bad_input_one_line(capsys, args, words):
    base = ["select", "--h", "8", "--w", "8", "--c", "8", "--k", "8", "--kernel", "3"]
    assert main(base + args) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_targets_and_entry_point():
    done = subprocess.run([sys.executable, "-m", "convsel.cli", "targets", "--json"],
                          capture_output=True, text=True, check=True)
    names = [t["name"] for t in json.loads(done.stdout)]
    assert names[:2] == ["cpu", "cpu-nofp16"] and "G78AE" in names and "FIFTHGEN" in names
