"""Receive an upload of measured entries into a shared tuning store: checked, then stored in one
transaction (all or nothing), each entry reported as accepted, merged, flagged or rejected.

The document is what ``convsel db export`` writes (``{"format": "convsel-tuning-export",
"entries": [...]}``). Every entry sent is kept as an *upload* row (its key, a digest of its
content, who sent it and when); the ``entries`` row of its key, which the policies read, is the
combination of that key's uploads (:mod:`.merge`):

- **accepted**: the first measurement of its key; stored as sent.
- **merged**: combined with the key's earlier measurements (the entry's statistics and winner
  recomputed); sending the very same measurement again changes nothing (resumed uploads).
- **flagged**: its winner contradicts the stored one beyond the noise of both: kept, with why,
  but not merged, so the stored answer is not overwritten; ``GET /v1/devices`` counts them.
- **rejected**: it failed a check (:mod:`.checks`). Unless ``partial`` is asked for, one
  rejected entry refuses the whole upload (:class:`UploadRefused`) and nothing is stored.

An entry of another convsel or implementations version is stored under its own versions, as
the store keeps every version: kept, never used (``used`` is false in its report).
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidProblemError
from ..db import ENTRY_UPSERT, EXPORT_FORMAT, TuningDB, entry_of_row, entry_row
from ..entry import DEVICE_FIELDS, TuningEntry, problem_key
from ..store import Transaction
from ..store.schema import ENTRY_COLUMNS, ENTRY_KEY, upsert
from .checks import LIMITS, Limits, check_count, check_entry
from .merge import combine, dispute

DOCUMENT_FIELDS = ("format", "schema_version", "convsel_version", "exported", "entries",
                   "models")
UPLOAD_COLUMNS = (*ENTRY_KEY, "digest", "uploader", "received", "status", "note", "winner",
                  "tie", "timings", "created")
_UPLOAD_INSERT = upsert("uploads", UPLOAD_COLUMNS, (*ENTRY_KEY, "digest"))
# The uploads of one device class are merged one transaction at a time (PostgreSQL: an
# advisory lock per class; SQLite's BEGIN IMMEDIATE already serialises every writer).
_LOCK_SPACE = int.from_bytes(b"flt", "big")
_CHUNK = 200   # problems per IN (...) list
# An entry combines at most this many measurements, the newest: robust statistics need no more,
# and a key uploaded by thousands of devices costs the same to merge as one by 64.
MAX_MERGED = 64
STORED_BEFORE = "(stored before uploads)"
STATUSES = ("accepted", "merged", "flagged", "rejected")
MODELS_IGNORED = ("the upload's 'models' are not taken: the server fits its own (POST "
                  "/v1/fit/jobs)")


@dataclass(frozen=True)
class Outcome:
    """What became of one entry of an upload."""

    index: int
    status: str
    reason: str
    backend: str | None = None
    device: str | None = None
    problem: dict[str, Any] | None = None
    used: bool = False
    winner: str | None = None
    tie: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "status": self.status, "reason": self.reason,
                "backend": self.backend, "device": self.device, "problem": self.problem,
                "used": self.used, "winner": self.winner, "tie": list(self.tie)}


@dataclass(frozen=True)
class UploadReport:
    """Every entry's outcome, in the upload's order, and who sent it when."""

    uploader: str
    received: float
    outcomes: tuple[Outcome, ...]
    stored: bool = True
    notes: tuple[str, ...] = ()

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(o.status == s for o in self.outcomes) for s in STATUSES}

    def to_dict(self, most: int | None = None) -> dict[str, Any]:
        """JSON-ready; ``most`` keeps the first outcomes only (a large upload's answer)."""
        shown = self.outcomes if most is None else self.outcomes[:most]
        return {"stored": self.stored, "uploader": self.uploader, "received": self.received,
                "count": len(self.outcomes), **self.counts, "notes": list(self.notes),
                "entries": [o.to_dict() for o in shown],
                "entries_shown": len(shown)}


class UploadRefused(InvalidProblemError):
    """The upload was refused whole and nothing was stored; ``report`` says why per entry
    (``field`` names the first rejected entry's field)."""

    def __init__(self, field: str, value: Any, rule: str, report: UploadReport) -> None:
        super().__init__(field, value, rule)
        self.report = report


def receive(db: TuningDB, document: Any, *, uploader: str, partial: bool = False,
            limits: Limits = LIMITS, now: float | None = None) -> UploadReport:
    """Check ``document`` and store its entries in ``db`` in one transaction.

    Parameters
    ----------
    db : TuningDB
        The shared store (writable).
    document : dict
        An export: ``{"format": "convsel-tuning-export", "entries": [...]}``.
    uploader : str
        Who sends it (a token's id, a client's name), recorded with every entry.
    partial : bool
        Store the entries that pass and report the others as rejected, instead of refusing
        the whole upload.

    Raises
    ------
    InvalidProblemError
        Not an export, or too many entries (nothing stored).
    UploadRefused
        An entry failed a check and ``partial`` is False (nothing stored).
    TuningDatabaseError
        The store cannot be written (nothing stored).
    """
    received = time.time() if now is None else now
    raw = _entries_of(document, limits)
    checked: list[tuple[int, TuningEntry | InvalidProblemError]] = []
    for i, item in enumerate(raw):
        try:
            checked.append((i, check_entry(item, limits, received)))
        except InvalidProblemError as exc:
            checked.append((i, InvalidProblemError(f"entries.{i}.{exc.field}", exc.value,
                                                   exc.rule)))
    refused = [(i, e) for i, e in checked if isinstance(e, InvalidProblemError)]
    ignored = isinstance(document, dict) and document.get("models")
    notes = (MODELS_IGNORED,) if ignored else ()
    if refused and not partial:
        i, first = refused[0]
        outcomes = tuple(_rejected(i, e) if isinstance(e, InvalidProblemError) else
                         Outcome(i, "rejected", "not stored: the upload was refused (another "
                                 "entry failed a check; send partial=true to store the rest)")
                         for i, e in checked)
        report = UploadReport(uploader, received, outcomes, stored=False, notes=notes)
        raise UploadRefused(first.field, first.value,
                            f"{first.rule} ({len(refused)} of {len(raw)} entries rejected; "
                            "nothing was stored)", report)
    good = [(i, e) for i, e in checked if isinstance(e, TuningEntry)]
    stored = _store(db, good, uploader, received) if good else {}
    outcomes = tuple(_rejected(i, e) if isinstance(e, InvalidProblemError) else stored[i]
                     for i, e in checked)
    return UploadReport(uploader, received, outcomes, notes=notes)


def _entries_of(document: Any, limits: Limits) -> list[Any]:
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise InvalidProblemError("format", _format_of(document), f"an upload is a `convsel db "
                                  f"export` document: {{\"format\": \"{EXPORT_FORMAT}\", "
                                  "\"entries\": [...]}")
    unknown = sorted(set(document) - set(DOCUMENT_FIELDS))
    if unknown:
        raise InvalidProblemError(unknown[0], "given", f"an upload has only the fields "
                                  f"{', '.join(DOCUMENT_FIELDS)}")
    entries = document.get("entries")
    if not isinstance(entries, list):
        raise InvalidProblemError("entries", type(entries).__name__, "a list of entries")
    check_count(len(entries), limits)
    return entries


def _format_of(document: Any) -> Any:
    return document.get("format") if isinstance(document, dict) else type(document).__name__


def _rejected(index: int, exc: InvalidProblemError) -> Outcome:
    return Outcome(index, "rejected", f"{exc.field}: {exc.rule} (got {exc.value!r})"[:1000])


# -- the transaction -----------------------------------------------------------------------------
@dataclass
class _Key:
    """One entry key's state inside the transaction: its stored entry and its uploads, as
    (digest, status, the measurement or its row, parsed only when merged)."""

    entry: TuningEntry | None
    uploads: list[tuple[str, str, TuningEntry | Sequence[Any]]] = field(default_factory=list)
    changed: bool = False

    @property
    def merged(self) -> list[TuningEntry]:
        """The newest :data:`MAX_MERGED` measurements that were merged (not flagged)."""
        kept = [u for u in self.uploads if u[1] != "flagged"][-MAX_MERGED:]
        return [e if isinstance(e, TuningEntry) else _upload_entry(e) for _, _, e in kept]


def digest(entry: TuningEntry) -> str:
    """The fingerprint of a measurement: the same entry sent twice is stored once."""
    text = json.dumps(entry.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def entry_key(e: TuningEntry) -> tuple[str, ...]:
    return (problem_key(e.problem), e.backend, *(e.device[k] for k in DEVICE_FIELDS),
            e.convsel_version, e.implementations_version)


def _store(db: TuningDB, good: Sequence[tuple[int, TuningEntry]], uploader: str,
           received: float) -> dict[int, Outcome]:
    outcomes: dict[int, Outcome] = {}
    with db.transaction("nothing was stored") as tx:
        if db.engine == "postgresql":
            _lock_classes(tx, [e for _, e in good])
        keys = _read_keys(tx, [e for _, e in good])
        rows: list[tuple[Any, ...]] = []
        for i, entry in good:
            state = keys[entry_key(entry)]
            outcomes[i] = _take(i, state, entry, uploader, received, rows)
        tx.executemany(_UPLOAD_INSERT, rows)
        tx.executemany(ENTRY_UPSERT, sorted(entry_row(s.entry) for s in keys.values()
                                            if s.changed and s.entry is not None))
    return outcomes


def _take(index: int, state: _Key, entry: TuningEntry, uploader: str, received: float,
          rows: list[tuple[Any, ...]]) -> Outcome:
    """Fold one checked entry into its key's state; the upload rows to insert go to ``rows``."""
    fingerprint = digest(entry)
    unused = "" if entry.is_current else (
        f"; kept, not used: measured by convsel {entry.convsel_version} with implementations "
        f"version {entry.implementations_version}")
    before = {d: status for d, status, _ in state.uploads}
    if fingerprint in before:
        status = "flagged" if before[fingerprint] == "flagged" else "merged"
        return _outcome(index, status, f"the same measurement was stored before "
                        f"({before[fingerprint]}): nothing changed" + unused, entry,
                        state.entry or entry)
    if state.entry is None:
        state.entry, state.changed = entry, True
        _add(state, rows, entry, fingerprint, uploader, received, "accepted", "")
        return _outcome(index, "accepted", "the first measurement of this problem on this "
                        "device" + unused, entry, entry)
    if not state.uploads:
        # an entry tuned into this store before any upload: it counts as a measurement too
        _add(state, rows, state.entry, digest(state.entry), STORED_BEFORE,
             min(state.entry.created, received), "accepted", "")
    why = dispute(state.entry, entry)
    if why:
        _add(state, rows, entry, fingerprint, uploader, received, "flagged", why)
        return _outcome(index, "flagged", f"kept, not merged: {why}; the stored answer stands"
                        + unused, entry, state.entry)
    was = _verdict_text(state.entry)
    _add(state, rows, entry, fingerprint, uploader, received, "merged", "")
    measurements = state.merged
    state.entry, state.changed = combine(measurements), True
    return _outcome(index, "merged", f"combined with {len(measurements) - 1} earlier "
                    f"measurement(s): {_verdict_text(state.entry)} (was {was})" + unused,
                    entry, state.entry)


def _verdict_text(entry: TuningEntry) -> str:
    return entry.winner or ("tie " + "/".join(entry.tie) if entry.tie else "no timing")


def _outcome(index: int, status: str, reason: str, entry: TuningEntry,
             answer: TuningEntry) -> Outcome:
    """``entry``'s outcome; ``answer`` is its key's stored entry after it."""
    return Outcome(index, status, reason, backend=entry.backend, device=entry.device["name"],
                   problem=entry.problem.to_dict(), used=entry.is_current,
                   winner=answer.winner, tie=answer.tie)


def _add(state: _Key, rows: list[tuple[Any, ...]], entry: TuningEntry, fingerprint: str,
         uploader: str, received: float, status: str, note: str) -> None:
    state.uploads.append((fingerprint, status, entry))
    rows.append((*entry_key(entry), fingerprint, uploader, received, status, note,
                 entry.winner, json.dumps(list(entry.tie)),
                 json.dumps({k: dict(v) for k, v in entry.timings.items()}, sort_keys=True),
                 entry.created))


def _lock_classes(tx: Transaction, entries: Sequence[TuningEntry]) -> None:
    classes = sorted({(e.backend, *(e.device[k] for k in DEVICE_FIELDS)) for e in entries})
    for cls in classes:   # one order for every writer: no deadlock
        code = zlib.crc32("\x1f".join(cls).encode())
        tx.rows("SELECT pg_advisory_xact_lock(CAST(? AS INTEGER), CAST(? AS INTEGER))",
                (_LOCK_SPACE, code - (1 << 32) if code >= 1 << 31 else code))


def _read_keys(tx: Transaction, entries: Sequence[TuningEntry]) -> dict[tuple[str, ...], _Key]:
    """Each key's stored entry and uploads, read inside the transaction."""
    wanted = {entry_key(e) for e in entries}
    keys = {k: _Key(None) for k in wanted}
    for prefix, problems in _by_prefix(wanted):
        where = " AND ".join(f"{c}=?" for c in ENTRY_KEY[1:])
        for chunk in _chunks(problems):
            marks = ", ".join("?" * len(chunk))
            for row in tx.rows(f"SELECT {', '.join(ENTRY_COLUMNS)} FROM entries WHERE {where} "
                               f"AND problem IN ({marks})", (*prefix, *chunk)):
                keys[tuple(row[:len(ENTRY_KEY)])].entry = entry_of_row(row)
            for row in tx.rows(f"SELECT {', '.join(UPLOAD_COLUMNS)} FROM uploads WHERE "
                               f"{where} AND problem IN ({marks}) ORDER BY received, digest",
                               (*prefix, *chunk)):
                key = tuple(row[:len(ENTRY_KEY)])
                keys[key].uploads.append((row[len(ENTRY_KEY)], row[len(ENTRY_KEY) + 3], row))
    return keys


def _by_prefix(keys: set[tuple[str, ...]]) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    groups: dict[tuple[str, ...], list[str]] = {}
    for key in sorted(keys):
        groups.setdefault(key[1:], []).append(key[0])
    yield from groups.items()


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start:start + _CHUNK]


def _upload_entry(row: Sequence[Any]) -> TuningEntry:
    """The measurement an upload row holds, as an entry (the row's key, its own timings)."""
    values = dict(zip(UPLOAD_COLUMNS, row, strict=True))
    entry_like = tuple(values[c] for c in ENTRY_COLUMNS)
    return entry_of_row(entry_like)


def uploads_of(db: TuningDB, entry: TuningEntry) -> list[dict[str, Any]]:
    """Who uploaded measurements of ``entry``'s key, when, and what became of each."""
    where = " AND ".join(f"{c}=?" for c in ENTRY_KEY)
    rows = db.rows(f"SELECT uploader, received, status, note, winner, created FROM uploads "
                   f"WHERE {where} ORDER BY received, digest", entry_key(entry))
    return [dict(zip(("uploader", "received", "status", "note", "winner", "measured"), r,
                     strict=True)) for r in rows]
