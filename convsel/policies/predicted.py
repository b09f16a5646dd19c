"""The "predicted" policy: rank every valid algorithm and variant with a cost model fitted on
this device's own timings (``convsel fit``), and run the predicted fastest.

No model for this backend and device (or one made by another convsel or implementation
version, which the database never returns), a model that cannot be read, a model that did not
beat ACL's rules when it was fitted (stored as rejected: it never answers), or a problem of a
dtype the model never saw: the answer is ACL's rules', and the trace says why. A problem
outside what the model was trained on is answered by the rules too, unless ``convsel fit``
measured that this device's models extrapolate to such shapes (see
:mod:`convsel.learn.domain`); the trace says which, and why.

The model is read and checked once per process, the answer for each problem kept, and both
read again when the database changes (:mod:`convsel.tuning.cache`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..algorithms import label_of, method_for
from ..errors import ConvselError, TuningDatabaseError
from ..learn.models import ModelError
from ..learn.stored import Ranked, StoredModel, decode, model_key
from ..problem import ConvProblem
from ..rules import Rules
from ..selection import Selection, acl_selection
from ..targets import Target
from ..tuning import cache, system
from ..tuning.db import TuningDB, open_db
from ..tuning.measure import Shortlist, candidates
from ..verdict import TraceStep
from .device import identity

# How many of the model's best candidates tune="auto" times beside ACL's pick.
DEFAULT_TOP = 3


@dataclass(frozen=True)
class PredictedPolicy:
    """Answer from the cost model of ``backend``/``device`` in ``db``, else ACL's rules.

    ``model`` uses that model instead of the database's (cross-validation, tests);
    ``abstain=False`` lets the model answer shapes outside its training data too; with
    ``tune=True`` (or ``"auto"``) a shape it abstains on is timed instead: its ``top`` best
    predicted candidates and ACL's pick, recorded in ``db``.
    """

    backend: str = "numpy"
    device: Any = None
    db: TuningDB | str | os.PathLike[str] | None = None
    model: StoredModel | None = None
    abstain: bool = True
    tune: bool | str = False
    top: int = DEFAULT_TOP
    name: ClassVar[str] = "predicted"

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection:
        def answer() -> Selection:
            acl = acl_selection(problem, target, rules)
            return select_predicted(problem, target, rules, acl, backend=self.backend,
                                    device=self.device, db=self.db, model=self.model,
                                    abstain=self.abstain, tune=self.tune in (True, "auto"),
                                    top=self.top)
        if self.model is not None:
            return answer()
        return remembered(self.db, ("predicted", self, problem, target, rules), answer)


def load_stored(backend: str, device: Any, db: Any) -> tuple[StoredModel | None, str]:
    """The model for ``backend``/``device`` in ``db`` (or the shipped layer beneath it), or
    None with why not: read and checked once per process, again only when the database
    changed (:mod:`convsel.tuning.cache`)."""
    try:
        ident = identity(backend, device, db)
    except (TuningDatabaseError, ConvselError, ImportError, OSError) as exc:
        return None, f"tuning database unavailable ({exc})"
    key = model_key(backend, ident)
    try:
        database = open_db(db, create=False)   # a lookup never makes a store
        # the model's own row is all it reads: timings recorded since (every upload, under
        # a fleet's load) leave it in place, a refit of this device replaces it
        return cache.cached(database, ("model", *sorted(key.items())),
                            lambda: _read_model(database, key, backend, ident),
                            scope=("models", key["backend"], key["vendor"], key["device"],
                                   key["driver"]))
    except (TuningDatabaseError, ConvselError, ImportError, OSError) as exc:
        # the shipped layer beneath answers even without the user's store
        return _read_model(None, key, backend, ident, f"tuning database unavailable ({exc})")


def _read_model(database: TuningDB | None, key: dict[str, str], backend: str,
                ident: dict[str, str], unavailable: str = "",
                ) -> tuple[StoredModel | None, str]:
    record = database.load_model(key) if database is not None else None
    record = record or system.load_model(key)
    if record is None and unavailable:
        return None, unavailable
    where = f"{backend} on {ident['name']} ({ident['driver']})"
    if record is None:
        path = database.path if database is not None else "?"
        return None, (f"no model for {where} in {path} (fitted by this convsel and "
                      f"these implementations) or in {system.LOCATION}; run `convsel tune "
                      f"--sample 200` then `convsel fit`")
    try:
        return decode(record), ""
    except ModelError as exc:
        return None, f"the model for {where} cannot be used: {exc}"


def remembered(db: Any, key: tuple[Any, ...], answer: Callable[[], Selection]) -> Selection:
    """``answer()`` for ``key``, kept per process until the database ``db`` changes (a
    repeated problem costs a dictionary lookup); computed afresh where the key cannot be
    hashed (a device handle) or the database cannot be opened (the answer says why)."""
    try:
        hash(key)
        database = open_db(db, create=False)
    except (TuningDatabaseError, ConvselError, OSError, TypeError):
        return answer()
    return cache.cached(database, ("answer", *key), answer)


_RULES_ANSWER = "; answered from ACL's rules"


def select_predicted(problem: ConvProblem, target: Target, rules: Rules, acl: Selection, *,
                     backend: str = "numpy", device: Any = None, db: Any = None,
                     model: StoredModel | None = None, policy: str = "predicted",
                     abstain: bool = True, tune: bool = False, top: int = DEFAULT_TOP,
                     ) -> Selection:
    """The model's answer for ``problem``, or ACL's (``acl``) with the reason in the trace.

    ``source`` is "model" with ``measurement`` holding the model's identity and the ranking,
    or "rules" when no usable model answers. With ``abstain`` (the default) a problem outside
    what the model was trained on (:meth:`StoredModel.inside`) is answered by the rules unless
    ``convsel fit`` measured that this device's models extrapolate to its kind of shape
    (:meth:`StoredModel.extrapolates`); the trace says which size or kind was out of range.
    With ``tune`` every problem outside its training data is timed instead, whether the model
    would have abstained on it or answered: the model's ``top`` best candidates and ACL's pick
    (:func:`shortlist`'s set), recorded in ``db``, and the answer is the measured policy's from
    that entry (``source`` "tuning-db").
    """
    why = ""
    if model is None:
        model, why = load_stored(backend, device, db)
    if model is None:
        return rules_answer(acl, policy, "predicted.no-model", why)
    if not model.accepted:
        return rules_answer(acl, policy, "predicted.model-rejected",
                            f"model {model.id} ({model.family}) {model.rejection}")
    dtypes = list(model.meta.get("dtypes") or [])
    if dtypes and problem.dtype not in dtypes:
        return rules_answer(acl, policy, "predicted.other-dtype",
                            f"model {model.id} was fitted on {', '.join(dtypes)} timings, not "
                            f"{problem.dtype}")
    outside: TraceStep | None = None
    if abstain:
        verdict = model.inside(problem)
        if not verdict.inside:
            trusted, reason = model.extrapolates(problem, verdict)
            where = (f"this shape is outside what model {model.id} was trained on "
                     f"({verdict.rule}: {verdict.reason})")
            if tune:
                # asked to time what it is unsure of: an extrapolation is one, whether or not
                # fit found this device's models extrapolating better than the rules on average
                why_timed = (f"model {model.id} abstains: {where}, and {reason}" if not trusted
                             else f"{where}; the model would answer because {reason}, but it "
                             "extrapolates")
                return _timed_instead(problem, target, rules, acl, model, why_timed,
                                      backend=backend, device=device, db=db, top=top,
                                      policy=policy)
            if not trusted:
                return rules_answer(acl, policy, "predicted.outside",
                                    f"model {model.id} abstains: {where}, and {reason}")
            outside = TraceStep("predicted.outside-trusted", False,
                                f"{where}; it answers because {reason}")
    found, _ = candidates(problem, backend, rules)
    try:
        ranking = model.rank(problem, [(c.label, c.algorithm, c.params) for c in found])
    except (ModelError, ValueError, ArithmeticError) as exc:
        return rules_answer(acl, policy, "predicted.model-failed",
                            f"model {model.id} could not rank the candidates ({exc})")
    if not ranking or ranking[0].predicted_s == float("inf"):
        return rules_answer(acl, policy, "predicted.no-prediction",
                            f"model {model.id} predicts no candidate of this problem (its "
                            "training saw none of their algorithms)")
    sel = _from_ranking(ranking, model, acl, target, policy)
    if outside is None:
        return sel
    return dataclasses.replace(sel, trace=(*sel.trace[:-1], outside, sel.trace[-1]))


def shortlist(problem: ConvProblem, target: Target, rules: Rules, *, top: int,
              backend: str = "numpy", device: Any = None, db: Any = None,
              model: StoredModel | None = None) -> tuple[Shortlist | None, str]:
    """What to time for ``problem`` when the model narrows it down: the ``top`` candidates it
    predicts fastest, and ACL's pick, so that the tuned answer is never one that ACL's would
    beat in the same measurement (cuDNN's heuristic query, then Find among its first few).
    ``(None, why)`` when no usable model answers: time every candidate then. ``top`` is
    checked by the caller (:func:`convsel.arguments.top`)."""
    acl = acl_selection(problem, target, rules)
    # no abstaining here: the shortlist is timed, ACL's pick with it, which is the hedge
    sel = select_predicted(problem, target, rules, acl, backend=backend, device=device, db=db,
                           model=model, abstain=False)
    if sel.source != "model" or sel.measurement is None:
        # the trace says what the policy would then answer; here nothing is answered yet
        return None, sel.trace[-1].reason.removesuffix(_RULES_ANSWER)
    best = [str(r["label"]) for r in sel.measurement["ranking"][:top]]
    acl_label = label_of(acl.algorithm, acl.params)
    model_id = sel.measurement["model"]["id"]
    return Shortlist(frozenset([*best, acl_label]),
                     f"outside model {model_id}'s top {top} ({', '.join(best)}) and not "
                     f"ACL's pick ({acl_label})"), ""


def _timed_instead(problem: ConvProblem, target: Target, rules: Rules, acl: Selection,
                   model: StoredModel, why_not: str, *, backend: str, device: Any, db: Any,
                   top: int, policy: str) -> Selection:
    """Time the model's ``top`` candidates and ACL's pick, record them, answer from them."""
    from ..errors import UnsupportedError
    from ..tuning.measure import measure  # times candidates: only when asked to tune
    from .measured import from_entry

    found, why = shortlist(problem, target, rules, top=top, backend=backend, device=device,
                           db=db, model=model)
    try:
        m = measure(problem, backend, device, rules=rules, shortlist=found)
    except (UnsupportedError, ConvselError) as exc:
        return rules_answer(acl, policy, "predicted.outside",
                            f"{why_not}; timing it failed ({exc})")
    entry = m.entry()
    where = "this process only"
    try:
        database = open_db(db, create=True)
        if m.complete:
            database.record(entry)
            where = str(database.path)
    except (TuningDatabaseError, OSError):
        database = None
    timed = sorted(found.labels) if found is not None else ["every candidate"]
    sel = from_entry(entry, acl, target, where)
    step = TraceStep("predicted.outside-timed", True,
                     f"{why_not}; tune: timed {', '.join(timed)} instead and recorded it "
                     f"({'in ' + where if database is not None and m.complete else where})")
    return dataclasses.replace(sel, policy=policy, trace=(*sel.trace[:-1], step,
                                                          sel.trace[-1]))


def rules_answer(acl: Selection, policy: str, step_id: str, why_no_model: str) -> Selection:
    # fired=False: the ACL rule that decided stays the answer's rule and reason.
    step = TraceStep(step_id, False, why_no_model + _RULES_ANSWER)
    return dataclasses.replace(acl, policy=policy, source="rules", trace=(*acl.trace, step))


def _from_ranking(ranking: list[Ranked], model: StoredModel, acl: Selection, target: Target,
                  policy: str) -> Selection:
    win = ranking[0]
    ident = model.identity()
    step = TraceStep("predicted.model", True, _why(ranking, model, ident, acl))
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in win.params.items()}
    return dataclasses.replace(
        acl, method=method_for(win.algorithm, target.is_gpu), algorithm=win.algorithm,
        params=params, rule="predicted.model", policy=policy, source="model", fallback=None,
        trace=(*acl.trace, step),
        measurement={"chosen": win.label, "model": ident,
                     "ranking": [r.to_dict() for r in ranking]})


def _why(ranking: list[Ranked], model: StoredModel, ident: dict[str, Any],
         acl: Selection) -> str:
    win = ranking[0]
    device = ident["device"].get("name", "?")
    shipped = f"; from {system.LOCATION}" if model.meta.get("layer") == "system" else ""
    text = (f"model {model.id} ({model.family}, fitted on {model.training_problems} shapes "
            f"timed on {device}{shipped}) predicts {win.label} fastest: "
            f"{win.predicted_s * 1e3:.3g} ms (×/÷ {win.factor:.2f})")
    if len(ranking) > 1:
        second = ranking[1]
        ratio = second.predicted_s / win.predicted_s
        sure = ("beyond" if ratio > max(win.factor, second.factor) else "within")
        text += (f"; runner-up {second.label} {second.predicted_s * 1e3:.3g} ms, {ratio:.2f}× "
                 f"slower, {sure} the model's typical error")
    acl_label = label_of(acl.algorithm, acl.params)
    theirs = next((r for r in ranking if r.label == acl_label), None)
    if acl_label != win.label:
        text += (f"; ACL's rules would run {acl_label}"
                 + (f" (predicted {theirs.predicted_s * 1e3:.3g} ms)" if theirs else ""))
    return text
