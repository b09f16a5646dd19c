"""The "measured" policy: answer from the tuning database, else from the device's fitted
model (:mod:`convsel.policies.predicted`), else from ACL's rules.

It never times anything unless asked (``tune=True`` or ``tune="auto"``, as
``torch.backends.cudnn.benchmark``): an unseen problem gets the rules' answer at once, with a
trace step that says no entry was found. With ``tune="auto"`` the first use of a problem on
this device times its candidates (within ``tune_budget_s``), records the result, and every
later use (this process or another sharing the database) reuses it. A database that cannot
be opened degrades to the rules too, with the reason in the trace.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from .. import backends, threads
from ..algorithms import label_of, method_for
from ..errors import ConvselError, InvalidProblemError, TuningDatabaseError
from ..problem import ConvProblem
from ..rules import Rules
from ..selection import Selection, select
from ..targets import Target
from ..tuning import cache
from ..tuning.db import TuningDB, TuningEntry, open_db
from ..tuning.identity import device_identity
from ..verdict import TraceStep


@dataclass(frozen=True)
class MeasuredPolicy:
    """Answer from the tuning database's timings on ``backend``/``device``, else ACL's rules.

    ``db`` defaults to ``$CONVSEL_TUNING_DB`` or the user's data directory; ``tune=True``
    (or ``"auto"``) times an unseen problem now and records it, spending at most about
    ``tune_budget_s`` seconds (None: no limit). ``verify=True`` is MIOpen's trust-but-verify:
    the first time this process answers from an entry, its answer is raced against its
    runner-up again (:mod:`convsel.tuning.verify`) and the entry confirmed, corrected or
    flagged before it is used.
    """

    backend: str = "numpy"
    device: Any = None
    db: TuningDB | str | os.PathLike[str] | None = None
    tune: bool | str = False
    tune_budget_s: float | None = None
    verify: bool = False
    name: str = "measured"

    def __post_init__(self) -> None:
        if self.backend not in backends.BACKENDS:
            raise InvalidProblemError("backend", self.backend,
                                      f"unknown backend; known: {', '.join(backends.BACKENDS)}")
        if self.tune not in (False, True, "auto", "off"):
            raise InvalidProblemError("tune", self.tune, "expected True/\"auto\" (time an "
                                      "unseen problem on first use) or False/\"off\"")
        budget = self.tune_budget_s
        if budget is not None and (isinstance(budget, bool) or not isinstance(
                budget, (int, float)) or not budget > 0):
            raise InvalidProblemError("tune_budget_s", budget, "must be a number > 0 "
                                      "(seconds), or None for no limit")

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection:
        from .predicted import remembered

        def answer() -> Selection:
            return select_measured(problem, target, rules,
                                   select(problem, target, rules=rules), backend=self.backend,
                                   device=self.device, db=self.db,
                                   tune=self.tune in (True, "auto"),
                                   tune_budget_s=self.tune_budget_s, verify=self.verify)
        # the answer names threads other than the timing's: a change of threads is a new key
        now = tuple(threads.current().items()) if self.backend == "numpy" else ()
        return remembered(self.db, ("measured", self, problem, target, rules, now), answer)


def select_measured(problem: Any, target: Target, rules: Rules, acl_selection: Selection, *,
                    backend: str = "numpy", device: Any = None,
                    db: TuningDB | str | os.PathLike[str] | None = None,
                    tune: bool = False, tune_budget_s: float | None = None,
                    verify: bool = False) -> Selection:
    """The tuned answer for ``problem`` on ``backend``/``device``, or ACL's with the reason.

    Parameters
    ----------
    problem : ConvProblem
    target : Target
        Names the methods and breaks ties: when the database holds a tie, ACL's pick wins it
        if it is among the tied, else the fastest of them.
    rules : Rules
    acl_selection : Selection
        What the rules answer; returned (as policy "measured", source "rules") when the
        database has no entry.
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
    Selection
        ``source="tuning-db"`` with ``measurement`` holding the timings, or
        ``source="rules"``; the last trace step says which and why.
    """
    try:
        ident = _identity(backend, device)
        database = open_db(db)
        entry = _entries(database, backend, ident).get(problem)
    except (TuningDatabaseError, ConvselError, ImportError, OSError) as exc:
        return _rules_answer(acl_selection, "measured.db-unavailable",
                             f"tuning database unavailable ({exc}); answered from ACL's rules")
    where = f"{backend} on {ident['name']} ({ident['driver']})"
    if entry is None and tune:
        entry = _MEMO.get((problem, backend, tuple(sorted(ident.items()))))
    if entry is None and tune:
        entry, note = _tune(problem, backend, device, rules, database, tune_budget_s)
        if entry is None:
            return _rules_answer(acl_selection, "measured.tune-failed", note)
    if entry is None:
        return _from_model(problem, target, rules, acl_selection, backend, device, database,
                           f"the tuning database ({database.path}) holds no entry for this "
                           f"problem on {where}")
    verified = _verified(entry, device, rules, database) if verify else None
    sel = from_entry(verified.entry if verified and verified.entry else entry, acl_selection,
                     target, str(database.path))
    if verified is None:
        return sel
    return dataclasses.replace(sel, trace=(*sel.trace, TraceStep(
        "measured.verified", verified.status == "confirmed",
        f"verified on first use: {verified.status}: {verified.reason}")))


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


def _entries(database: TuningDB, backend: str,
             ident: Mapping[str, str]) -> dict[ConvProblem, TuningEntry]:
    """This convsel's entries of ``backend`` on the device ``ident``, by problem: read whole
    (one query, ~0.06 ms an entry, where a lookup per problem costs ~0.5 ms in connection
    setup) and kept until the database changes (:mod:`convsel.tuning.cache`)."""
    def read() -> dict[ConvProblem, TuningEntry]:
        return {e.problem: e for e in database.entries(backend=backend, device=ident)
                if e.is_current}
    return cache.cached(database, ("entries", backend, *sorted(ident.items())), read)


def _from_model(problem: Any, target: Target, rules: Rules, acl: Selection, backend: str,
                device: Any, database: TuningDB, no_entry: str) -> Selection:
    """No exact measurement: the device's fitted model answers if there is one, else the
    rules; the trace says which."""
    from .predicted import select_predicted

    sel = select_predicted(problem, target, rules, acl, backend=backend, device=device,
                           db=database, policy="measured")
    if sel.source == "model":
        note = TraceStep("measured.no-entry", False, f"{no_entry}; answered from the fitted "
                         "model (next step)")
        return dataclasses.replace(sel, trace=(*sel.trace[:-1], note, sel.trace[-1]))
    return dataclasses.replace(sel, trace=(*sel.trace[:-1], TraceStep(
        "measured.no-entry", False, f"{no_entry}, and {sel.trace[-1].reason} (run `convsel "
        f"tune` or select with tune=True to measure it)")))


def _identity(backend: str, device: Any) -> dict[str, str]:
    try:
        return dict(_cached_identity(backend, device))
    except TypeError:  # an unhashable device handle
        return device_identity(backend, device)


@lru_cache(maxsize=64)
def _cached_identity(backend: str, device: Any) -> tuple[tuple[str, str], ...]:
    return tuple(device_identity(backend, device).items())


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
    other = threads.differs(entry.threads, threads.current()) if entry.backend == "numpy" \
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
                             "runs": t["runs"]}
        else:
            timings[name] = {k: t[k] for k in ("error", "skipped") if k in t}
    return {"chosen": label, "winner": entry.winner, "tie": list(entry.tie),
            "confident": entry.confident, "noise": entry.noise, "threads": entry.threads,
            "backend": entry.backend, "device": dict(entry.device), "database": path,
            "measured_at": datetime.fromtimestamp(entry.created, UTC).isoformat(),
            "timings": timings}
