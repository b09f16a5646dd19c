"""The tuning database's answer: the measured timings of a problem on this device.

This is the first source of the "measured" policy (:mod:`convsel.policies.composed` tries
it, then the device's fitted model, then ACL's rules). It never times anything unless asked
(``tune=True``, as ``torch.backends.cudnn.benchmark``): an unseen problem gets
:class:`NoEntry`, which says so. With ``tune`` the first use of a problem on this device
times its candidates (within ``tune_budget_s``), records the result, and every later use
(this process or another sharing the database) reuses it. A database that cannot be opened
degrades to ACL's rules, with the reason in the trace.

An answer says how far to trust it: a tie the noise may have caused is a tie (ACL's rules
break it) and the trace names the noise; a timing made with other threads than this process
has says so. ``verify=True`` (MIOpen's trust-but-verify) races an entry's answer against its
runner-up once per process before using it (:mod:`convsel.tuning.verify`). The device's
entries are read in one query and kept; when the database changes only the entries it names
are read again, and an answer depends on its own problem's entry only
(:mod:`convsel.tuning.cache`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import threads
from .._version import __version__
from ..algorithms import label_of, method_for
from ..backends.registry import on_host
from ..errors import ConvselError, TuningDatabaseError
from ..rules import Rules
from ..selection import Selection
from ..targets import Target
from ..tuning import cache, system
from ..tuning.db import TuningDB, TuningEntry, entry_of_row, open_db
from ..tuning.entry import DEVICE_FIELDS, IMPLEMENTATIONS_VERSION, problem_key
from ..tuning.fleet.devices import RESOLVE_TTL_S
from ..tuning.store.schema import ENTRY_COLUMNS
from ..verdict import TraceStep
from .device import identity, is_local
from .shipped import marked


@dataclass(frozen=True)
class NoEntry:
    """The database holds no timing of the problem on this device: ``reason`` says where it
    looked; ``database`` is the open database, for the next source to read its model from."""

    reason: str
    database: TuningDB


def answer_from_db(problem: Any, target: Target, rules: Rules, acl: Selection, *,
                   backend: str = "numpy", device: Any = None,
                   db: TuningDB | str | os.PathLike[str] | None = None,
                   tune: bool = False, tune_budget_s: float | None = None,
                   verify: bool = False) -> Selection | NoEntry:
    """The tuned answer for ``problem`` on ``backend``/``device``, ACL's (``acl``) with the
    reason when the database cannot be used, or :class:`NoEntry`.

    Parameters
    ----------
    problem : ConvProblem
    target : Target
        Names the methods and breaks ties: when the database holds a tie, ACL's pick wins it
        if it is among the tied, else the fastest of them.
    rules : Rules
    acl : Selection
        What the rules answer; returned (as policy "measured", source "rules") when the
        database cannot be read or tuning fails.
    backend, device
        Whose timings to use; the device identity is part of the database key.
    db : TuningDB or path, optional
        Defaults to ``$CONVSEL_TUNING_DB`` or the user's data directory.
    tune : bool
        Time the problem now when there is no entry, and record it (a measurement the
        budget cut short is used by this process but not recorded).
    tune_budget_s : float, optional
        About how long that timing may take.
    verify : bool
        Time the entry's answer against its runner-up once per process before using it, and
        store what that found (:func:`convsel.tuning.verify.verify_entry`).

    Returns
    -------
    Selection or NoEntry
        ``source="tuning-db"`` with ``measurement`` holding the timings, or
        ``source="rules"``; the last trace step says which and why.
    """
    if isinstance(device, str) and device.strip():
        # A class named in the store is resolved again after a while (a variant of it with
        # more entries may take its name): so is an answer that used the resolution.
        cache.expires(RESOLVE_TTL_S)
    try:
        ident = identity(backend, device, db)
    except (TuningDatabaseError, ConvselError, ImportError, OSError) as exc:
        return _rules_answer(acl, "measured.db-unavailable",
                             f"tuning database unavailable ({exc}); answered from ACL's rules")
    try:
        database = open_db(db, create=bool(tune))   # a lookup never makes a store
        entry = _entry(database, backend, ident, problem)
    except (TuningDatabaseError, ConvselError, ImportError, OSError) as exc:
        shipped = system.lookup(problem, backend, ident)
        if shipped is not None:   # the shipped layer answers even without the user's store
            return marked(from_entry(shipped, acl, target, system.LOCATION),
                          f"the tuning database is unavailable ({exc})")
        return _rules_answer(acl, "measured.db-unavailable",
                             f"tuning database unavailable ({exc}); answered from ACL's rules")
    shipped = system.lookup(problem, backend, ident) if entry is None else None
    if shipped is not None:   # beneath the user's store: its entries win, then these
        return marked(from_entry(shipped, acl, target, system.LOCATION))
    if entry is None and tune and not is_local(backend, device, ident):
        return NoEntry(f"no entry for this problem on {backend} on {ident['name']} "
                       f"({ident['driver']}), a device class this machine cannot time",
                       database)
    if entry is None and tune:
        entry = _MEMO.get((problem, backend, tuple(sorted(ident.items()))))
    if entry is None and tune:
        entry, note = _tune(problem, backend, device, rules, database, tune_budget_s)
        if entry is None:
            return _rules_answer(acl, "measured.tune-failed", note)
    if entry is None:
        return NoEntry(f"the tuning database ({database.path}) holds no entry for this "
                       f"problem on {backend} on {ident['name']} ({ident['driver']})", database)
    verified = _verified(entry, device, rules, database) if verify else None
    sel = from_entry(verified.entry if verified and verified.entry else entry, acl, target,
                     str(database.path))
    if verified is None:
        return sel
    return dataclasses.replace(sel, trace=(*sel.trace, TraceStep(
        "measured.verified", verified.status == "confirmed",
        f"verified on first use: {verified.status}: {verified.reason}")))


def _entry(database: TuningDB, backend: str, ident: Mapping[str, str],
           problem: Any) -> TuningEntry | None:
    """This convsel's entry of ``problem`` on ``backend`` on the device ``ident``, from the
    device's entries: read whole (one query, ~0.06 ms an entry, where a lookup per problem
    costs ~0.5 ms in connection setup), kept, and refreshed row by row as the store says what
    changed (:func:`convsel.tuning.cache.collection`). The answer being read depends on this
    problem's entry only, present or not."""
    device = ("entries", backend, *(str(ident[k]) for k in DEVICE_FIELDS))
    name = problem_key(problem)
    cache.uses((*device, name))
    where = (f"SELECT {', '.join(ENTRY_COLUMNS)} FROM entries WHERE backend=? AND vendor=? AND "
             "device=? AND driver=? AND convsel_version=? AND implementations_version=?")
    args = [*device[1:], __version__, IMPLEMENTATIONS_VERSION]

    def read(sql: str, more: list[str]) -> dict[str, TuningEntry]:
        return {row[0]: entry_of_row(row) for row in database.rows(sql, [*args, *more])}

    def read_some(names: set[str]) -> dict[str, TuningEntry]:
        wanted = sorted(names)
        return read(f"{where} AND problem IN ({', '.join('?' * len(wanted))})", wanted)

    rows = cache.collection(database, ("entries", backend, *sorted(ident.items())), device,
                            lambda: read(where, []), read_some)
    return rows.get(name)


# What verify=True found per entry, once per process.
_VERIFIED: dict[tuple[Any, ...], Any] = {}


def _verified(entry: TuningEntry, device: Any, rules: Rules, database: TuningDB) -> Any:
    from ..tuning.verify import verify_entry  # times candidates: only when asked to

    key = (entry.problem, entry.backend, tuple(sorted(entry.device.items())))
    if key not in _VERIFIED:
        result = verify_entry(entry, device=device, rules=rules)
        if result.entry is not None:
            try:
                database.record(result.entry)
            except TuningDatabaseError:
                pass   # read-only: this process still answers from what it found
        _VERIFIED[key] = result
    return _VERIFIED[key]


def _rules_answer(acl: Selection, step_id: str, reason: str) -> Selection:
    # fired=False: the ACL rule that decided stays the answer's rule and reason.
    return dataclasses.replace(acl, policy="measured", source="rules",
                               trace=(*acl.trace, TraceStep(step_id, False, reason)))


# Measurements this process made but could not record (read-only database, or cut short by
# the budget): reused rather than timed again at every prepare().
_MEMO: dict[tuple[Any, str, tuple[tuple[str, str], ...]], TuningEntry] = {}


def _tune(problem: Any, backend: str, device: Any, rules: Rules, database: TuningDB,
          budget_s: float | None = None) -> tuple[TuningEntry | None, str]:
    from ..tuning.measure import measure  # times candidates: only when asked to tune

    try:
        m = measure(problem, backend, device, rules=rules, budget_s=budget_s)
    except ConvselError as exc:
        return None, f"tuning failed ({exc}); answered from ACL's rules"
    entry = m.entry()
    try:
        if not m.complete:
            raise TuningDatabaseError("cut short by the time budget")
        database.record(entry)
    except TuningDatabaseError:
        # the answer still uses what was just measured, and this process reuses it
        _MEMO[(problem, backend, tuple(sorted(dict(m.device).items())))] = entry
    return entry, ""


def pick(entry: TuningEntry, acl: Selection) -> tuple[str | None, str]:
    """The label the measured policy runs for ``entry``, and why."""
    acl_label = label_of(acl.algorithm, acl.params)
    if entry.winner is not None:
        return entry.winner, f"{entry.winner} beat every other candidate by more than the noise"
    if not entry.tie:
        return None, "the entry holds no successful timing"
    tied = ", ".join(entry.tie)
    if acl_label in entry.tie:
        return acl_label, f"tie within noise ({tied}); ACL's rules break it: {acl_label}"
    return entry.tie[0], (f"tie within noise ({tied}) without ACL's pick {acl_label}; "
                          f"the fastest median breaks it: {entry.tie[0]}")


def from_entry(entry: TuningEntry, acl: Selection, target: Target, path: str) -> Selection:
    """The measured policy's answer from ``entry`` (read from the database at ``path``):
    its winner, or its tie broken as :func:`pick` says; ACL's answer if nothing ran."""
    label, why = pick(entry, acl)
    if label is None:
        return _rules_answer(acl, "measured.no-timing", f"the tuning database's entry for this "
                             f"problem {why}; answered from ACL's rules")
    chosen = entry.timings[label]
    algorithm = str(chosen["algorithm"])
    params = {k: tuple(v) if isinstance(v, list) else v
              for k, v in dict(chosen.get("params") or {}).items()}
    acl_label = label_of(acl.algorithm, acl.params)
    versus = "" if label == acl_label else f"; ACL's rules would run {acl_label}" + (
        f" ({_ms(entry.timings[acl_label])})" if "median_s" in entry.timings.get(acl_label, {})
        else "")
    step = TraceStep("measured.tuning-db", True,
                     f"measured on {entry.backend} / {entry.device['name']}: {label} "
                     f"({_ms(chosen)}): {why}{versus}{trust_notes(entry)}")
    return dataclasses.replace(
        acl, method=method_for(algorithm, target.is_gpu), algorithm=algorithm, params=params,
        rule="measured.tuning-db", policy="measured", source="tuning-db", fallback=None,
        trace=(*acl.trace, step), measurement=_measurement(entry, label, path))


def trust_notes(entry: TuningEntry) -> str:
    """What to keep in mind about ``entry``'s answer: its timings' noise (then it is a tie,
    not a confident winner) and threads other than this process's ("" when neither)."""
    notes = []
    if entry.noise and not entry.confident:
        notes.append("not confident, its timings are noisy: " + "; ".join(entry.noise)
                     + " (`convsel db verify` times it again)")
    elif entry.noise:
        notes.append("timed with noise (" + "; ".join(entry.noise) + "), but the winner beat "
                     "the others beyond what that noise can do")
    other = threads.differs(entry.threads, threads.current()) if on_host(entry.backend) \
        else ""
    if other:
        notes.append(f"{other}: the winner may differ (tune again with these threads)")
    return "".join(f"; {n}" for n in notes)


def _ms(t: Mapping[str, Any]) -> str:
    return f"median {t['median_s'] * 1e3:.3g} ms ± {t['iqr_s'] * 1e3:.2g} IQR"


def _measurement(entry: TuningEntry, label: str, path: str) -> dict[str, Any]:
    timings = {}
    for name, t in entry.timings.items():
        if "median_s" in t:
            timings[name] = {"median_ms": t["median_s"] * 1e3, "iqr_ms": t["iqr_s"] * 1e3,
                             "runs": t["runs"], "clock": t.get("clock")}
        else:
            timings[name] = {k: t[k] for k in ("error", "skipped") if k in t}
    return {"chosen": label, "winner": entry.winner, "tie": list(entry.tie),
            "confident": entry.confident, "noise": entry.noise, "threads": entry.threads,
            "backend": entry.backend, "device": dict(entry.device), "database": path,
            "measured_at": datetime.fromtimestamp(entry.created, UTC).isoformat(),
            "timings": timings}
