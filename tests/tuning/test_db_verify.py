"""`convsel db verify` on a database with a planted wrong winner: the stored winner is timed
against its runner-up again and the entry corrected (or flagged), never kept as it was."""

from __future__ import annotations

import json
from typing import Any

import pytest

from convsel import ConvProblem, choose, threads
from convsel.cli import main
from convsel.policies import device as policy_device
from convsel.policies import measured as policy
from convsel.tuning.db import TuningDB, TuningEntry
from convsel.tuning.measure import candidates, device_identity
from convsel.tuning.timing import TimingSettings
from convsel.tuning.verify import contenders, summary, verify

# FFT is over 10x slower than Winograd 4x4 here (numpy, one thread or two)
P = ConvProblem(1, 24, 24, 64, 64, 3, 3, pad=1)
FAST = TimingSettings(warmup=1, min_runs=3, min_time=0.01, threads=1)


def planted(winner: str, runner_up: str) -> TuningEntry:
    """An entry claiming ``winner`` beat ``runner_up`` (and everything else) clearly."""
    found, _ = candidates(P, "numpy")
    times = {c.label: 1e-3 for c in found} | {winner: 1e-4, runner_up: 2e-4}
    timings: dict[str, dict[str, Any]] = {
        c.label: {"algorithm": c.algorithm, "params": {k: list(v) for k, v in c.params.items()},
                  "median_s": times[c.label], "iqr_s": 0.0, "runs": 10, "min_s": times[c.label]}
        for c in found}
    return TuningEntry(problem=P, backend="numpy", device=device_identity("numpy"),
                       winner=winner, tie=(), timings=timings)


@pytest.fixture(autouse=True)
def _fresh_identity():
    yield
    policy_device.cached_identity.cache_clear()


def test_a_planted_wrong_winner_is_corrected(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(planted("fft", "winograd:4x4"))
    assert choose(P, "cpu", policy="measured", db=db).algorithm == "fft"
    assert contenders(db.entries()[0]) == ("fft", "winograd:4x4")
    results = verify(db, settings=FAST)
    assert summary(results)["corrected"] == 1, results[0].reason
    assert results[0].now == "winograd:4x4" and results[0].ratio < 0.5
    entry = db.lookup(P, "numpy", device_identity("numpy"))
    assert entry.winner == "winograd:4x4" and entry.timings["fft"].get("verified")
    assert entry.timings["fft"]["median_s"] > entry.timings["winograd:4x4"]["median_s"]
    sel = choose(P, "cpu", policy="measured", db=db)
    assert (sel.source, sel.algorithm) == ("tuning-db", "winograd")


def test_a_right_winner_is_confirmed_and_a_dry_run_writes_nothing(tmp_path, capsys):
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(planted("winograd:4x4", "fft"))
    before = db.entries()[0]
    assert main(["db", "--db", str(db.path), "verify", "--threads", "1", "--min-time",
                 "0.01", "--repeats", "3", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["confirmed"] == 1 and out["entries"][0]["now"] == "winograd:4x4"
    assert db.entries()[0] == before            # the dry run left it alone


def test_the_cli_corrects_and_says_so(tmp_path, capsys):
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(planted("fft", "winograd:4x4"))
    assert main(["db", "--db", str(db.path), "verify", "--threads", "1", "--min-time",
                 "0.01", "--repeats", "3"]) == 0
    out = capsys.readouterr().out
    assert "corrected" in out and "winograd:4x4 beat the stored answer fft" in out
    assert "1 corrected" in out
    assert db.lookup(P, "numpy", device_identity("numpy")).winner == "winograd:4x4"


def test_verify_on_use_corrects_the_entry_before_answering(tmp_path):
    """The measured policy's trust-but-verify option: the first answer from an entry times
    it against its runner-up, stores the correction, and says so in the trace."""
    db = TuningDB(tmp_path / "t.sqlite")
    db.record(planted("fft", "winograd:4x4"))
    policy._VERIFIED.clear()
    with threads.limited(1):   # the process's own threads, as a user would set them
        sel = choose(P, "cpu", policy="measured", db=db, verify=True)
    assert sel.trace[-1].id == "measured.verified" and "corrected" in sel.trace[-1].reason
    assert (sel.source, sel.algorithm) == ("tuning-db", "winograd")
    assert db.lookup(P, "numpy", device_identity("numpy")).winner == "winograd:4x4"
    again = choose(P, "cpu", policy="measured", db=db, verify=True)   # once per process
    assert again.algorithm == "winograd" and policy._VERIFIED
