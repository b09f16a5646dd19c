"""What a write transaction's notice names (convsel.tuning.store.changes), and what the change
log then says changed since a value was read (convsel.tuning.store.changelog). No server: the
statements are the ones convsel's writers run, the payloads what the server would carry."""

from __future__ import annotations

import json

from convsel.tuning.db import _MODEL_UPSERT as MODEL_UPSERT
from convsel.tuning.db import ENTRY_UPSERT
from convsel.tuning.store import changelog
from convsel.tuning.store.changelog import ChangeLog
from convsel.tuning.store.changes import PAYLOAD_LIMIT, Change, Written, parse, payload

DEV = ("numpy", "Arm", "board", "r1")
ENTRIES = ("entries", *DEV)


def entry_row(problem: str, device: tuple[str, ...] = DEV) -> tuple[str, ...]:
    return (problem, *device, "v", "i", "direct", "[]", "{}", "1.0")


def written(*statements: tuple[str, list[tuple[object, ...]]]) -> Change:
    w = Written()
    for sql, rows in statements:
        w.note(sql, rows)
    return w.change


def test_an_entry_upsert_names_each_entry_by_device_and_problem():
    change = written((ENTRY_UPSERT, [entry_row("A"), entry_row("B")]))
    assert change.entries == {ENTRIES: {"A", "B"}} and not change.devices
    assert not change.everything


def test_a_model_upsert_names_its_device():
    row = (*DEV, "v", "i", "gbt", "{}", "{}", 1.0)
    assert written((MODEL_UPSERT, [row])).devices == {("models", *DEV)}


def test_reads_and_other_tables_name_nothing_but_unnamed_rows_are_everything():
    quiet = written(("SELECT pg_advisory_xact_lock(?, ?)", [(1, 2)]),
                    ("SELECT * FROM entries WHERE problem=? FOR UPDATE", [("A",)]),
                    ("INSERT INTO uploads (digest, problem) VALUES (?, ?)", [("d", "A")]),
                    ("UPDATE fit_jobs SET status=? WHERE id=?", [("done", "j")]))
    assert quiet == Change()
    for sql in ("DELETE FROM entries WHERE backend=?", "UPDATE models SET meta=? WHERE 1=1",
                "WITH x AS (SELECT 1) INSERT INTO entries SELECT * FROM x",
                "INSERT INTO entries VALUES (?, ?)"):     # no column list: rows not readable
        assert written((sql, [("x",)])).everything, sql


def test_a_payload_names_entries_then_devices_then_everything_as_it_grows():
    small = written((ENTRY_UPSERT, [entry_row("A")]))
    small.writer = "me"
    assert parse(payload(small)) == small
    many = written((ENTRY_UPSERT, [entry_row("p" * 100 + str(i)) for i in range(100)]))
    text = payload(many)
    assert len(text.encode()) <= PAYLOAD_LIMIT
    assert parse(text) == Change(devices={ENTRIES})       # too long by entry: by device
    boards = [entry_row("A", ("numpy", "Arm", "board" * 20 + str(i), "r1")) for i in range(100)]
    text = payload(written((ENTRY_UPSERT, boards)))
    assert len(text.encode()) <= PAYLOAD_LIMIT and parse(text).everything


def test_a_notice_that_names_nothing_readable_is_everything():
    # "" is what a convsel from before payloads sends (a bare NOTIFY)
    for text in ("", "not json", "[]", '{"w": "x"}', '{"e": [["nope", 1]]}',
                 '{"d": [["uploads", "a", "b", "c", "d"]]}'):
        assert parse(text).everything, text
    assert not parse(json.dumps({"w": "x", "e": [], "d": []})).everything   # other tables


def test_the_log_says_what_changed_since_a_view_by_entry_device_and_store():
    log = ChangeLog("test")
    before = log.view
    log.apply(Change(entries={ENTRIES: {"A"}}))
    assert log.changed(before, [(*ENTRIES, "A")]) and log.changed(before, [ENTRIES])
    assert not log.changed(before, [(*ENTRIES, "B"), ("models", *DEV)])
    assert log.changed(before, None)            # the whole store: any change
    assert log.changed_items(before, ENTRIES) == {"A"}
    middle = log.view
    log.apply(Change())                         # another table: only the whole store moved
    assert log.changed(middle, None) and not log.changed(middle, [ENTRIES])
    assert log.changed_items(middle, ENTRIES) == set()
    log.apply(Change(devices={ENTRIES}))        # the device at once: every entry of it
    assert log.changed(middle, [(*ENTRIES, "B")]) and log.changed_items(middle, ENTRIES) is None


def test_everything_and_an_overfull_log_start_a_new_epoch():
    log = ChangeLog("test")
    before = log.view
    log.apply(Change(everything=True))
    assert log.view.epoch != before.epoch
    assert log.changed(before, []) and log.changed_items(before, ENTRIES) is None
    after = log.view
    log.apply(Change(entries={ENTRIES: {str(i) for i in range(changelog.MAX_ITEMS + 1)}}))
    assert log.view.epoch != after.epoch and log.changed(after, [])
