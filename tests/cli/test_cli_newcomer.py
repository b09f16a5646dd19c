"""The newcomer's command line: tune a model or a plan, an overall budget, --help defaults,
pipes to head, no bars into pipes, NCHW sizes, select with a workspace limit and --db."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from repo import ROOT

from convsel import ConvProblem
from convsel.cli import build_parser, main, tune_cmd
from convsel.tuning.db import TuningDB

FAST = ["--min-time", "0", "--repeats", "1", "--warmup", "0"]
SELECT = ["select", "--h", "56", "--w", "56", "--c", "64", "--k", "64", "--kernel", "3",
          "--pad", "1"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ("import sys; from convsel.cli import main; "
                           "sys.exit(main(sys.argv[1:]))"), *args], capture_output=True,
                          text=True, cwd=ROOT)


# -- tune MODEL.onnx / --layers PLAN.json / --budget ----------------------------------------
@pytest.fixture
def model(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx_models import groups_chain

    path = tmp_path / "tiny.onnx"
    onnx.save(groups_chain(), path)
    return path


def test_tune_an_onnx_model_tunes_each_conv(model, tmp_path, capsys):
    db = tmp_path / "t.sqlite"
    assert main(["tune", str(model), "--db", str(db), *FAST]) == 0
    out = capsys.readouterr().out
    assert "tuned 3 layer(s)" in out
    assert TuningDB(db).status()["entries"] == 3


def test_tune_layers_accepts_plan_json(model, tmp_path, capsys):
    assert main(["plan", str(model), "--json"]) == 0
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(capsys.readouterr().out)
    layers = tune_cmd.layers_from_plan(str(plan_file))
    assert [x.name for x in layers] == ["depthwise", "grouped", "dilated"]
    assert layers[0].problem.groups == 32 and layers[0].problem.layout == "NCHW"
    db = tmp_path / "p.sqlite"
    assert main(["tune", "--layers", str(plan_file), "--db", str(db), *FAST]) == 0
    assert TuningDB(db).status()["entries"] == 3


def test_a_broken_plan_file_names_the_field(tmp_path, capsys):
    bad = tmp_path / "plan.json"
    bad.write_text('{"model": {}}')
    assert main(["tune", "--layers", str(bad), *FAST]) == 2
    assert "layers=" in capsys.readouterr().err


def test_tune_budget_stops_and_says_how_many_were_left(tmp_path, capsys, monkeypatch):
    layers = [{"net": "t", "name": str(i), "n": 1, "h": 8 + i, "w": 8, "c": 8, "k": 8,
               "kh": 3, "kw": 3, "pad": 1} for i in range(6)]
    path = tmp_path / "layers.json"
    path.write_text(json.dumps(layers))
    db = tmp_path / "b.sqlite"
    budgets = []
    real = tune_cmd.measure

    def slow_measure(*args, **kwargs):
        budgets.append(kwargs["budget_s"])
        time.sleep(0.2)            # each layer costs at least 0.2 s, whatever the machine
        return real(*args, **kwargs)

    monkeypatch.setattr(tune_cmd, "measure", slow_measure)
    assert main(["tune", "--layers", str(path), "--db", str(db), "--budget", "0.5",
                 *FAST]) == 0
    out = capsys.readouterr().out
    assert "budget ran out" in out
    assert 1 <= TuningDB(db).status()["entries"] <= 3 and len(budgets) <= 3
    assert budgets == sorted(budgets, reverse=True) and budgets[0] <= 0.5   # what is left
    assert main(["tune", "--layers", str(path), "--budget", "0", *FAST]) == 2


def test_tune_with_a_workspace_limit_records_the_exclusions(tmp_path, capsys):
    db = tmp_path / "w.sqlite"
    assert main(["tune", "--h", "8", "--w", "8", "--c", "8", "--k", "8", "--kernel", "3",
                 "--pad", "1", "--db", str(db), "--max-workspace-bytes", "3000", *FAST]) == 0
    (entry,) = TuningDB(db).entries()
    skipped = {k: v["skipped"] for k, v in entry.timings.items() if "skipped" in v}
    assert any("workspace limit" in why for why in skipped.values())


# -- help, pipes, bars ---------------------------------------------------------------------
def test_help_shows_defaults():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse's only way
    text = sub["select"].format_help()
    assert "(default: cpu)" in text and "(default: acl)" in text
    assert "(default: 1)" in text                   # --n
    tune_help = sub["tune"].format_help()
    assert "(default: numpy)" in tune_help
    assert "(default 0.08)" in tune_help and "(default: 0.08)" not in tune_help   # once


@pytest.mark.parametrize("argv", [
    [*SELECT, "--json"],
    [*SELECT],
    ["targets", "--json"],
])
def test_a_reader_that_left_gets_no_traceback(argv):
    """`convsel select ... --json | head`: the reader closes the pipe; whether the writer
    notices depends on timing, so the read end is closed before the command writes."""
    read, write = os.pipe()
    os.close(read)                                     # the reader already left
    try:
        done = subprocess.run([sys.executable, "-c", ("import sys; from convsel.cli import "
                               "main; sys.exit(main(sys.argv[1:]))"), *argv], stdout=write,
                              stderr=subprocess.PIPE, text=True, cwd=ROOT)
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 1


def test_plan_json_into_head_prints_no_traceback(model):
    cmd = (f"{sys.executable} -c 'import sys; from convsel.cli import main; "
           f"sys.exit(main(sys.argv[1:]))' plan {model} --json | head -1")
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.strip() == "{" and "Traceback" not in done.stderr, done.stderr


def test_no_progress_bar_into_a_pipe_nor_for_an_empty_run(tmp_path):
    args = ["tune", "--h", "6", "--w", "6", "--c", "4", "--k", "4", "--kernel", "3", "--pad",
            "1", "--db", str(tmp_path / "t.sqlite"), *FAST]
    first = _run(*args)
    assert first.returncode == 0, first.stderr
    assert "layer/s" not in first.stderr and "it/s" not in first.stderr
    again = _run(*args)   # already tuned: an empty run
    assert "0layer" not in again.stderr and "already tuned" in again.stdout


def test_bars_are_drawn_on_a_terminal_only(monkeypatch):
    class Tty:
        def isatty(self):
            return True

        def write(self, s):
            return len(s)

        def flush(self):
            pass

    assert tune_cmd._bar(3, False).disable is True            # pytest's stderr: no tty
    monkeypatch.setattr(sys, "stderr", Tty())
    assert tune_cmd._bar(3, False).disable is False
    assert tune_cmd._bar(0, False).disable is True            # empty run
    assert tune_cmd._bar(3, True).disable is True             # --no-progress


# -- select --------------------------------------------------------------------------------
def test_select_with_a_workspace_limit_names_what_it_excluded(capsys):
    assert main([*SELECT, "--max-workspace-bytes", "1048576"]) == 0
    out = capsys.readouterr().out
    assert "workspace.excluded" in out and "workspace.limit" in out
    assert main([*SELECT, "--max-workspace-bytes", "0"]) == 2
    assert "no algorithm runs" in capsys.readouterr().err


def test_select_measured_takes_db(tmp_path, capsys):
    db = tmp_path / "s.sqlite"
    TuningDB(db)   # an empty store: select reads it, never makes one
    assert main([*SELECT, "--policy", "measured", "--db", str(db), "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["policy"] == "measured" and str(db) in answer["trace"][-1]["reason"]
    assert main([*SELECT, "--db", str(db)]) == 2      # --db without the measured policy
    assert "db applies to policy measured or predicted" in capsys.readouterr().err


def test_nchw_problems_print_their_own_layout(capsys):
    p = ConvProblem(2, 56, 28, 64, 32, 3, 3, layout="NCHW")
    assert str(p).startswith("2x64x56x28 -> 32")
    assert str(p.replace(layout="NHWC")).startswith("2x56x28x64 -> 32")
    assert main([*SELECT, "--layout", "NCHW"]) == 0
    assert "problem    1x64x56x56 -> 64" in capsys.readouterr().out
