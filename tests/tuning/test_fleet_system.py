"""The shipped system layer (convsel/data/system): carried by the package, current, small,
answering a fresh install for the devices it holds (and saying so), beneath the user's
store, whose entries win. Fails after a change of convsel's or the implementations' version
or the cost model's features until `python benchmarks/build_system_layer.py` is run again."""

from __future__ import annotations

import fnmatch
import tomllib

import pytest
from fleet_entries import export, timings
from repo import ROOT

from convsel import ConvProblem, __version__, choose
from convsel.learn.stored import decode
from convsel.tuning import IMPLEMENTATIONS_VERSION, TuningDB, system
from convsel.tuning.fleet import device_classes, receive

H100 = "NVIDIA H100 80GB HBM3"
XEON = "Intel(R) Xeon(R) Processor"
P = ConvProblem(1, 56, 56, 64, 64, 3, 3, pad=1)


@pytest.fixture
def fresh_install(tmp_path, monkeypatch):
    """No user store at all: the default tuning database does not exist."""
    missing = tmp_path / "never" / "tuning.sqlite"
    monkeypatch.setenv("CONVSEL_TUNING_DB", str(missing))
    yield missing
    assert not missing.exists()     # asking never made one


def test_the_package_carries_a_current_small_layer():
    path = ROOT / "convsel" / "data" / "system" / "layer.json.gz"
    assert path.stat().st_size < 2 * 1024 * 1024
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["convsel"]
    assert any(fnmatch.fnmatch("data/system/layer.json.gz", p) for p in patterns)
    layer = system.layer()
    assert layer.problem == "" and layer.built["convsel_version"] == __version__
    assert layer.built["implementations_version"] == IMPLEMENTATIONS_VERSION, (
        "the shipped layer is of other implementations: python benchmarks/"
        "build_system_layer.py")
    shipped = {(c["backend"], c["name"]): c for c in system.classes()}
    for key in (("opencl", H100), ("numpy", XEON)):
        assert shipped[key]["entries"]["current"] >= 300 and shipped[key]["model"]["status"] \
            == "in use"
    for record in layer.models.values():
        decode(record)   # the features of this convsel (else: rebuild the layer)


@pytest.mark.parametrize(("backend", "device"), [("opencl", H100), ("numpy", XEON)])
def test_a_fresh_install_answers_predicted_from_the_shipped_layer(fresh_install, backend,
                                                                  device):
    sel = choose(P, policy="predicted", device=device, backend=backend)
    assert sel.source == "model", sel.trace[-1].reason
    assert sel.measurement["model"]["layer"] == "system"
    assert sel.measurement["model"]["device"]["name"] == device
    assert "from convsel's shipped system layer" in sel.trace[-1].reason


def test_measured_answers_from_shipped_timings_and_user_entries_win(tmp_path, fresh_install):
    shipped = next(iter(system.layer().entries[next(
        k for k in system.layer().entries if k[2] == H100 and k[4:] == (
            __version__, IMPLEMENTATIONS_VERSION))].values()))
    sel = choose(shipped.problem, policy="measured", device=H100, backend="opencl")
    assert sel.source == "tuning-db" and sel.measurement["database"] == system.LOCATION
    assert "convsel's shipped system layer" in sel.trace[-1].reason
    fastest = min((t["median_s"], label) for label, t in shipped.timings.items()
                  if "median_s" in t)[1]
    # this user's own measurement of that layer says another candidate wins: it is the answer
    other = next(label for label in timings(shipped.problem, fastest, backend="opencl")
                 if label != fastest and "skipped" not in shipped.timings.get(label, {}))
    user = TuningDB(tmp_path / "mine.sqlite")
    mine = {"problem": shipped.problem.to_dict(), "backend": "opencl",
            "device": dict(shipped.device), "convsel_version": __version__,
            "implementations_version": IMPLEMENTATIONS_VERSION, "winner": other, "tie": [],
            "timings": timings(shipped.problem, other, backend="opencl")}
    assert receive(user, export(mine), uploader="me").counts["accepted"] == 1
    answer = choose(shipped.problem, policy="measured", device=H100, backend="opencl", db=user)
    assert answer.measurement["database"] == str(user.path)
    assert answer.measurement["chosen"] == other != fastest
    listed = {(c["layer"], c["name"]) for c in device_classes(user)}
    assert {("user", H100), ("system", H100), ("system", XEON)} <= listed
