"""``convsel db`` and the reading commands' ``--db`` (issue 25, item 13): reading never
creates a store; ``db rm`` and ``db prune`` remove bad or stale entries and models; ``db
export`` carries the fitted models, and ``db import`` brings them back."""

from __future__ import annotations

import json

import pytest

from convsel import ConvProblem, choose
from convsel.cli import main
from convsel.tuning.db import TuningDB, TuningEntry

DEVICE = {"vendor": "x86_64", "name": "cpu-a", "driver": "numpy 2"}
GPU = {"vendor": "NVIDIA", "name": "gpu-b", "driver": "580"}
SIZES = ["--h", "8", "--w", "8", "--c", "4", "--k", "8", "--kernel", "3", "--pad", "1"]
P8 = ConvProblem(1, 8, 8, 4, 8, 3, 3, pad=1)
MODEL_KEY = {"backend": "numpy", "vendor": "x86_64", "device": "cpu-a", "driver": "numpy 2"}


def entry(problem=P8, backend="numpy", device=DEVICE, winner="direct", **changes):
    timings = {winner: {"algorithm": winner.split(":")[0], "params": {}, "median_s": 1e-3,
                        "iqr_s": 1e-5, "runs": 5}}
    return TuningEntry(problem=problem, backend=backend, device=device, winner=winner, tie=(),
                       timings=timings, **changes)


@pytest.fixture
def filled(tmp_path):
    """A store with entries of two backends and devices, two winners, a stale entry, a
    current model and a stale one."""
    db = TuningDB(tmp_path / "t.sqlite")
    db.record_many([entry(), entry(P8.replace(h=9, w=9), winner="winograd:4x4"),
                    entry(backend="opencl", device=GPU)])
    db.save_model(MODEL_KEY, "roofline", {"coef": [1.0]}, {"id": "m1"})
    stale = entry(P8.replace(h=10, w=10)).to_dict() | {"convsel_version": "0.0.1"}
    stale_model = {**MODEL_KEY, "convsel_version": "0.0.1", "implementations_version": "1",
                   "family": "gbt", "model": {"trees": "..."}, "meta": {}, "created": 5.0}
    db.import_json({"format": "convsel-tuning-export", "entries": [stale],
                    "models": [stale_model]})
    return db


# -- reading never creates a store ------------------------------------------------------------
def test_select_with_a_mistyped_db_is_an_error_and_creates_nothing(tmp_path, capsys):
    missing = tmp_path / "nonexistent" / "dir" / "x.sqlite"
    argv = ["select", *SIZES, "--policy", "measured", "--db", str(missing)]
    assert main(argv) == 2
    assert "no tuning database at" in capsys.readouterr().err
    assert not (tmp_path / "nonexistent").exists()


def test_plan_with_a_mistyped_db_creates_nothing(tmp_path, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx_models import groups_chain

    model = tmp_path / "m.onnx"
    onnx.save(groups_chain(), model)
    missing = tmp_path / "nonexistent" / "x.sqlite"
    assert main(["plan", str(model), "--policy", "measured", "--db", str(missing)]) == 2
    assert "no tuning database at" in capsys.readouterr().err
    assert not missing.parent.exists()


@pytest.mark.parametrize("action", [["list"], ["export", "-"], ["rm", "--all"], ["prune"]])
def test_db_actions_that_do_not_add_refuse_a_missing_store(tmp_path, capsys, action):
    missing = tmp_path / "nonexistent" / "x.sqlite"
    assert main(["db", "--db", str(missing), *action]) == 2
    assert "no tuning database at" in capsys.readouterr().err
    assert not missing.parent.exists()


def test_db_path_says_there_is_none_yet(tmp_path, capsys):
    missing = tmp_path / "nonexistent" / "x.sqlite"
    assert main(["db", "--db", str(missing), "path"]) == 0
    assert "no database there yet" in capsys.readouterr().out
    assert not missing.parent.exists()


def test_the_measured_policy_reads_without_creating(tmp_path):
    missing = tmp_path / "nonexistent" / "x.sqlite"
    sel = choose(P8, "cpu", policy="measured", db=missing)
    assert sel.source == "rules" and sel.trace[-1].id == "measured.db-unavailable"
    assert "no tuning database at" in sel.trace[-1].reason
    assert not missing.parent.exists()


# -- rm and prune -----------------------------------------------------------------------------
def _rm(db, *args):
    return main(["db", "--db", str(db.path), "rm", *args])


def test_rm_by_backend_device_problem_or_winner(filled, capsys):
    assert _rm(filled, "--backend", "opencl", "--dry-run") == 0
    assert "would remove 1 entries" in capsys.readouterr().out
    assert len(filled.entries()) == 4                       # a dry run removes nothing
    assert _rm(filled, "--backend", "opencl") == 0
    assert {e.backend for e in filled.entries()} == {"numpy"}
    assert _rm(filled, "--winner", "winograd:4x4") == 0
    assert all(e.winner == "direct" for e in filled.entries())
    assert _rm(filled, *SIZES) == 0                         # the problem of P8
    assert [e.problem.h for e in filled.entries()] == [10]
    assert len(filled.models()) == 2                        # models only with --models
    assert _rm(filled, "--device", "cpu-a", "--models") == 0
    assert filled.entries() == [] and filled.models() == []
    assert "removed 1 entries and 2 models" in capsys.readouterr().out.splitlines()[-1]


def test_rm_without_a_filter_is_refused(filled, capsys):
    assert _rm(filled) == 2
    assert "or --all" in capsys.readouterr().err and len(filled.entries()) == 4
    assert _rm(filled, "--h", "8") == 2
    assert "needs --w, --c, --k, --kernel" in capsys.readouterr().err


def test_prune_removes_what_this_convsel_never_uses(filled, capsys):
    assert main(["db", "--db", str(filled.path), "prune"]) == 0
    assert "removed 1 entries and 1 models" in capsys.readouterr().out
    assert all(e.is_current for e in filled.entries()) and len(filled.entries()) == 3
    assert [m["family"] for m in filled.models()] == ["roofline"]


# -- export carries the models ----------------------------------------------------------------
def test_export_and_import_carry_the_fitted_models(filled, tmp_path, capsys):
    out = tmp_path / "export.json"
    assert main(["db", "--db", str(filled.path), "export", str(out)]) == 0
    assert "4 entries and 2 models" in capsys.readouterr().out
    document = json.loads(out.read_text())
    assert {m["family"] for m in document["models"]} == {"roofline", "gbt"}
    fresh = TuningDB(tmp_path / "fresh.sqlite")
    assert main(["db", "--db", str(fresh.path), "import", str(out)]) == 0
    assert "imported 4 entries and 2 models" in capsys.readouterr().out
    assert fresh.load_model(MODEL_KEY)["model"] == {"coef": [1.0]}
    # importing again keeps what is there (the newer wins, and nothing is newer)
    again = fresh.import_json(document)
    assert (again["imported"], again["models_imported"], again["models_kept"]) == (0, 0, 2)


def test_import_rejects_a_bad_model_by_index(filled):
    result = filled.import_json({"format": "convsel-tuning-export", "entries": [],
                                 "models": [{"backend": "numpy"}]})
    assert result["models_imported"] == 0 and result["rejected"][0].startswith("model 0:")
