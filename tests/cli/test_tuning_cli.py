"""``convsel tune``, ``convsel db`` and ``convsel report`` on small problems."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

import convsel.execute
from convsel.cli import main, tune_cmd
from convsel.tuning.db import TuningDB

FAST = ["--min-time", "0", "--repeats", "1", "--warmup", "0", "--no-progress"]
LAYERS = [
    {"net": "tiny", "name": "a", "n": 1, "h": 8, "w": 8, "c": 8, "k": 8, "kh": 3, "kw": 3,
     "stride": [1, 1], "pad": [1, 1, 1, 1], "dilation": [1, 1], "groups": 1},
    {"net": "tiny", "name": "b", "n": 1, "h": 8, "w": 8, "c": 8, "k": 4, "kh": 1, "kw": 1,
     "stride": [1, 1], "pad": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1, "colour": "red"},
    {"net": "tiny", "name": "bad", "n": 1, "h": 8, "w": 8, "c": 8, "k": 4, "kh": 1, "kw": 1,
     "stride": [0, 1], "pad": [0, 0, 0, 0], "dilation": [1, 1], "groups": 1},
    {"net": "other", "name": "c", "n": 1, "h": 6, "w": 6, "c": 4, "k": 4, "kh": 3, "kw": 3,
     "stride": [2, 2], "pad": [1, 1, 1, 1], "dilation": [1, 1], "groups": 2},
]


def fake_build(p, algorithm, params, backend, w, bias=None, device=None):
    return SimpleNamespace(run=lambda x: x), backend, None


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setattr(convsel.execute, "build", fake_build)   # stand-in kernels: fast
    layers = tmp_path / "layers.json"
    layers.write_text(json.dumps(LAYERS))
    return SimpleNamespace(layers=str(layers), db=str(tmp_path / "t.sqlite"), tmp=tmp_path)


def tune(env, *extra: str) -> int:
    return main(["tune", "--layers", env.layers, "--db", env.db, *FAST, *extra])


def test_tune_records_each_layer_and_reports_bad_ones(env, capsys):
    assert tune(env) == 0
    out, err = capsys.readouterr()
    assert "unknown field 'colour' ignored" in err
    assert "layer 2 (tiny/bad): not a valid problem" in err and "stride" in err
    assert "tuned 3 layer(s)" in out
    assert len(TuningDB(env.db).entries()) == 3
    assert tune(env, "--net", "tiny") == 0
    assert "2 layer(s) already tuned for this device: skipped" in capsys.readouterr().out


def test_tune_a_single_problem_from_flags(env, capsys):
    argv = ["tune", "--db", env.db, *FAST, "--h", "8", "--w", "8", "--c", "4", "--k", "4",
            "--kernel", "3", "--pad", "1"]
    assert main(argv) == 0
    assert "cli/problem: " in capsys.readouterr().out
    assert main(argv[:-4]) == 2
    assert "also needs --kernel" in capsys.readouterr().err


def test_unknown_net_and_missing_input_are_errors(env, capsys):
    assert tune(env, "--net", "nope") == 2
    assert "net='nope': not in" in capsys.readouterr().err
    assert main(["tune", "--db", env.db, *FAST]) == 2
    assert "say what to tune" in capsys.readouterr().err


def test_ctrl_c_keeps_what_was_measured(env, capsys, monkeypatch):
    real = tune_cmd.measure
    calls = []

    def interrupted(*args: Any, **kwargs: Any):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(tune_cmd, "measure", interrupted)
    assert tune(env) == 130
    assert "interrupted: 1 layer(s) measured and kept" in capsys.readouterr().err
    assert len(TuningDB(env.db).entries()) == 1


def test_db_path_list_export_import(env, capsys):
    assert tune(env) == 0
    capsys.readouterr()
    assert main(["db", "--db", env.db, "path"]) == 0
    assert env.db in capsys.readouterr().out
    assert main(["db", "--db", env.db, "list"]) == 0
    assert "3 entries" in capsys.readouterr().out
    export = str(env.tmp / "export.json")
    assert main(["db", "--db", env.db, "export", export]) == 0
    other = str(env.tmp / "other.sqlite")
    assert main(["db", "--db", other, "import", export]) == 0
    assert "imported 3 entries" in capsys.readouterr().out
    assert main(["db", "--db", other, "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {e["problem"]["k"] for e in listed} == {8, 4}


def test_db_import_of_a_non_export_is_an_error(env, capsys):
    bogus = env.tmp / "bogus.json"
    bogus.write_text("[1, 2]")
    assert main(["db", "--db", env.db, "import", str(bogus)]) == 2
    assert "not a convsel tuning export" in capsys.readouterr().err


def test_a_corrupt_database_is_one_clear_line(env, capsys):
    (env.tmp / "junk.sqlite").write_bytes(b"junk" * 500)
    assert main(["db", "--db", str(env.tmp / "junk.sqlite"), "list"]) == 2
    assert "junk.sqlite cannot be used" in capsys.readouterr().err


def test_report_writes_table_json_and_pngs(env, capsys):
    assert tune(env, "--net", "tiny") == 0
    out_dir = env.tmp / "report"
    assert main(["report", "--layers", env.layers, "--db", env.db, "--out", str(out_dir),
                 *FAST]) == 0
    out = capsys.readouterr().out
    assert "geometric-mean regret" in out and "tiny" in out and "other" in out
    doc = json.loads((out_dir / "report.json").read_text())
    assert doc["summary"]["measured"]["tuned_layers"] == 2
    assert doc["per_net"]["other"]["measured"]["tuned_layers"] == 0
    for name in ("layers-tiny.png", "layers-other.png", "regret.png"):
        assert (out_dir / name).read_bytes()[:4] == b"\x89PNG"


def test_tune_then_select_measured_with_the_real_kernels(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "real.sqlite"))
    flags = ["--h", "6", "--w", "6", "--c", "4", "--k", "4", "--kernel", "3", "--pad", "1"]
    assert main(["tune", *FAST, *flags]) == 0
    capsys.readouterr()
    assert main(["select", "--policy", "measured", "--json", *flags]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["source"] == "tuning-db" and answer["trace"][-1]["fired"]
    timed = {k for k, v in answer["measurement"]["timings"].items() if "median_ms" in v}
    assert {"im2col_gemm", "direct", "winograd:4x4", "indirect_gemm", "fft"} <= timed


def test_find_and_select_take_several_backends(tmp_path, monkeypatch, capsys):
    """`--backend numpy,opencl` ranks both backends' candidates together (find) and asks both
    backends' timings for the answer (select --policy measured)."""
    from opencl_support import opencl_runtime

    opencl_runtime()
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(tmp_path / "both.sqlite"))
    flags = ["--h", "6", "--w", "6", "--c", "4", "--k", "4", "--kernel", "1"]
    assert main(["find", "--backend", "numpy,opencl", "--json", "--store", *flags]) == 0
    found = json.loads(capsys.readouterr().out)
    ranked = {c["backend"] for c in found["results"] if c["status"] == "ok"}
    assert ranked == {"numpy", "opencl"}, found["results"]
    assert main(["select", "--policy", "measured", "--backend", "numpy,opencl", "--json",
                 *flags]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["backend"] in ("numpy", "opencl")
    # both backends were asked (a noisy race stored as a tie may leave one uncompared)
    across = " ".join(step["reason"] for step in answer["trace"]
                      if step["id"].startswith("across."))
    assert "numpy" in across and "opencl" in across, answer["trace"]
    assert main(["select", "--policy", "measured", "--backend", "numpy,numpy", *flags]) == 2
    assert "names a backend twice" in capsys.readouterr().err
