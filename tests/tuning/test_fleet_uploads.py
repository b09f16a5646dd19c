"""Uploads into a shared store (convsel.tuning.fleet) on a real SQLite file: checks, one
transaction, merging into robust statistics, disputes flagged, other versions kept unused,
and a device named by its class answered from its uploads."""

from __future__ import annotations

import math

import pytest
from fleet_entries import BOARD, P, entry, export

from convsel import InvalidProblemError, choose
from convsel.tuning import TuningDB
from convsel.tuning.fleet import UploadRefused, device_classes, receive, uploads_of
from convsel.tuning.measure import measure
from convsel.tuning.timing import TimingSettings


def counts(db: TuningDB) -> tuple[int, int]:
    return (db.rows("SELECT COUNT(*) FROM entries")[0][0],
            db.rows("SELECT COUNT(*) FROM uploads")[0][0])


@pytest.fixture
def db(tmp_path):
    return TuningDB(tmp_path / "fleet.sqlite")


def test_uploads_merge_flag_and_answer_for_the_device_class(db):
    first = receive(db, export(entry(base_ms=1.0)), uploader="token:aa")
    assert first.counts == {"accepted": 1, "merged": 0, "flagged": 0, "rejected": 0}
    # a second machine of the class: same winner, a bit slower -> one entry, median of both
    slower = entry(base_ms=1.2)
    second = receive(db, export(slower), uploader="client:board-2")
    assert second.counts["merged"] == 1, second.to_dict()
    [stored] = db.entries(device=BOARD)
    win = stored.timings["winograd:4x4"]
    assert math.isclose(win["median_s"], 1.1e-3) and win["uploads"] == 2
    assert win["runs"] == 18 and win["iqr_s"] > 0.1e-3      # the spread between machines
    assert stored.winner == "winograd:4x4"
    # the same measurement again (a resumed upload): nothing changes
    again = receive(db, export(slower), uploader="client:board-2")
    assert again.counts["merged"] == 1 and "nothing changed" in again.outcomes[0].reason
    # a third says another winner beyond the noise: flagged, the stored answer stands
    third = receive(db, export(entry(fastest="im2col_gemm")), uploader="client:odd")
    assert third.counts["flagged"] == 1, third.to_dict()
    assert "contradicts the stored winner winograd:4x4" in third.outcomes[0].reason
    assert db.entries(device=BOARD)[0].winner == "winograd:4x4"
    who = [(u["uploader"], u["status"]) for u in uploads_of(db, stored)]
    assert who == [("token:aa", "accepted"), ("client:board-2", "merged"),
                   ("client:odd", "flagged")]
    [board] = [c for c in device_classes(db) if c["name"] == BOARD["name"]]
    assert board["layer"] == "user" and board["shapes"] == 1
    assert board["uploads"] == {"count": 3, "uploaders": 3, "flagged": 1,
                                "last": board["uploads"]["last"]}
    # the measured policy answers for that device, named by its class, from the uploads
    sel = choose(P, policy="measured", backend="numpy", device=BOARD["name"], db=db)
    assert (sel.source, sel.algorithm, sel.params) == ("tuning-db", "winograd", {"tile": (4, 4)})
    assert sel.measurement["device"] == BOARD


def test_an_entry_of_another_implementations_version_is_kept_not_used(db):
    report = receive(db, export(entry(implementations_version="0")), uploader="old")
    [outcome] = report.outcomes
    assert outcome.status == "accepted" and not outcome.used and "kept, not used" in \
        outcome.reason
    assert len(db.entries()) == 1
    sel = choose(P, policy="measured", backend="numpy", device=BOARD["name"], db=db)
    assert sel.source == "rules"     # nothing of this convsel's versions to answer from


@pytest.mark.parametrize(("change", "field", "words"), [
    (lambda e: e["timings"]["direct"].update(algorithm="warp_drive"),
     "entries.1.timings.direct.algorithm", "unknown algorithm"),
    (lambda e: e["timings"]["direct"].update(median_s=-1e-3),
     "entries.1.timings.direct.median_s", "positive"),
    (lambda e: e["timings"]["direct"].update(median_s=math.inf),
     "entries.1.timings.direct.median_s", "finite"),
    (lambda e: e["timings"].update({"winograd:9x9": e["timings"]["winograd:4x4"]}),
     "entries.1.timings.winograd:9x9", "label of winograd"),
    (lambda e: e["device"].update(name="x" * 5000), "entries.1.device.name", "at most"),
    (lambda e: e.update(winner="direct"), "entries.1.winner", "fastest"),
])
def test_a_bad_entry_refuses_the_whole_upload_and_stores_nothing(db, change, field, words):
    receive(db, export(entry()), uploader="first")
    before = counts(db)
    bad = entry(fastest="im2col_gemm")
    change(bad)
    with pytest.raises(UploadRefused) as caught:
        receive(db, export(entry(base_ms=2.0), bad), uploader="second")
    assert caught.value.field == field and words in caught.value.rule, caught.value
    assert "nothing was stored" in caught.value.rule
    report = caught.value.report
    assert not report.stored and report.counts["rejected"] == 2
    assert counts(db) == before
    # partial: the good one is stored, the bad one reported
    partial = receive(db, export(entry(base_ms=2.0), bad), uploader="second", partial=True)
    assert [o.status for o in partial.outcomes] == ["merged", "rejected"]


def test_too_many_entries_or_not_an_export_is_refused_before_any_check(db):
    with pytest.raises(InvalidProblemError) as caught:
        receive(db, {"format": "convsel-tuning-export", "entries": [{}] * 1_000_000},
                uploader="x")
    assert caught.value.field == "entries" and "1 to 5000 entries" in caught.value.rule
    with pytest.raises(InvalidProblemError, match="convsel db export"):
        receive(db, {"entries": []}, uploader="x")
    assert counts(db) == (0, 0)


def test_an_entry_tuned_here_before_counts_as_a_measurement(db):
    m = measure(P, "numpy", settings=TimingSettings(min_runs=2, min_time=0.0, warmup=0))
    db.record(m.entry())
    local = m.entry()
    upload = {**entry(device=dict(local.device)), "winner": None, "tie": []}
    report = receive(db, export(upload), uploader="peer")
    assert report.counts["merged"] + report.counts["flagged"] == 1, report.to_dict()
    assert [u["uploader"] for u in uploads_of(db, local)] == ["(stored before uploads)", "peer"]
