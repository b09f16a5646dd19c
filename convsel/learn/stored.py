"""A model read back from the tuning database, ready to rank the candidates of a problem.

The key is the database's model key (backend, vendor, device, driver); the database returns
only a model saved by this convsel and these implementations, and :func:`decode` refuses one
whose feature list is not this code's, so a model is never applied where it was not made.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from . import domain as domains
from . import trust
from .families import FAMILIES
from .features import FEATURE_NAMES, FEATURES_VERSION, feature_matrix
from .models import Model, ModelError


def model_key(backend: str, ident: Mapping[str, str]) -> dict[str, str]:
    """The database's model key of ``backend`` on the device ``ident`` (vendor, name, driver)."""
    return {"backend": backend, "vendor": str(ident["vendor"]), "device": str(ident["name"]),
            "driver": str(ident["driver"])}


@dataclass(frozen=True)
class Ranked:
    """One candidate's predicted time: ``factor`` is the model's typical error for that
    algorithm (held-out, ×/÷), so the time is likely within [ms / factor, ms * factor]."""

    label: str
    algorithm: str
    params: Mapping[str, Any]
    predicted_s: float
    factor: float

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "algorithm": self.algorithm,
                "params": {k: list(v) if isinstance(v, tuple) else v
                           for k, v in self.params.items()},
                "predicted_ms": _round(self.predicted_s * 1e3),
                "uncertainty_factor": round(self.factor, 3),
                "low_ms": _round(self.predicted_s / self.factor * 1e3),
                "high_ms": _round(self.predicted_s * self.factor * 1e3)}


def _g(summary: Mapping[str, Any]) -> str:
    value = summary.get("geomean_regret")
    return "?" if value is None else f"{value:.3f}"


def _round(v: float) -> float | None:
    return float(f"{v:.4g}") if math.isfinite(v) else None


@dataclass(frozen=True)
class StoredModel:
    family: str
    model: Model
    meta: Mapping[str, Any]
    created: float

    @property
    def id(self) -> str:
        return str(self.meta.get("id", "?"))

    @property
    def training_problems(self) -> int:
        return int(self.meta.get("training_problems", 0))

    @cached_property
    def domain(self) -> domains.Domain | None:
        """The shapes it was trained on (None for a model stored without them)."""
        return domains.Domain.from_dict(dict(self.meta.get("domain") or {}))

    def inside(self, problem: Any) -> domains.Verdict:
        """Whether ``problem`` is inside what the model was trained on (see
        :mod:`convsel.learn.domain`); a model stored without its domain is taken as is."""
        if self.domain is None:
            return domains.Verdict(True, "", "")
        return domains.check(self.domain, problem)

    def extrapolates(self, problem: Any, outside: domains.Verdict | None = None,
                     ) -> tuple[bool, str]:
        """Whether to answer ``problem`` although it is outside the training data
        (``outside``: :meth:`inside`'s verdict), from what ``convsel fit`` measured of this
        model fitted without each family of shapes (:mod:`convsel.learn.trust` says how)."""
        measured = dict(self.meta.get("extrapolation") or {})
        if not measured:
            return False, "fit measured no extrapolation for it"
        rule = outside.rule if outside is not None else ""
        judged = trust.judged_families(domains.families_of(problem), rule, measured)
        mine, theirs = trust.pooled([measured[f] for f in judged])
        figures = ", ".join(f"{f} {_g(measured[f]['model'])} vs ACL's {_g(measured[f]['rules'])}"
                            for f in judged)
        pooled = (f"pooled {mine[0]:.3f} vs {theirs[0]:.3f}, worst {mine[1]:.2f}x vs "
                  f"{theirs[1]:.2f}x")
        if not trust.trusted([measured[f] for f in judged]):
            return False, (f"fitted without them, this device's models did worse than ACL's "
                           f"rules on {', '.join(judged)} ({figures}; {pooled})")
        return True, (f"fitted without them, this device's models did at least as well as "
                      f"ACL's rules on {', '.join(judged)} ({figures}; {pooled})")

    @property
    def accepted(self) -> bool:
        """Whether it beat ACL's rules on held-out shapes when it was fitted (a model from
        before that check is not taken on trust either)."""
        return self.meta.get("accepted") is True

    @property
    def rejection(self) -> str:
        """Why it does not answer ("" when it does)."""
        if self.accepted:
            return ""
        if "accepted" not in self.meta:
            return ("was fitted before models had to beat ACL's rules; run `convsel fit` "
                    "again")
        return f"was rejected by `convsel fit`: it {self.meta.get('verdict', '')}"

    def identity(self) -> dict[str, Any]:
        """Who the model is: id, family, training size, device, versions, held-out figures."""
        held = dict(self.meta.get("held_out") or {}).get(self.family, {})
        return {"id": self.id, "family": self.family,
                "training_problems": self.training_problems,
                "training_rows": self.meta.get("training_rows"),
                "device": dict(self.meta.get("device") or {}), "created": self.created,
                "convsel_version": self.meta.get("convsel_version"),
                "implementations_version": self.meta.get("implementations_version"),
                "held_out_geomean_regret": held.get("geomean_regret"),
                "held_out_fastest_share": held.get("fastest_share"),
                "accepted": self.accepted, "verdict": self.meta.get("verdict"),
                "rules_held_out_geomean_regret": dict(self.meta.get("rules") or {}).get(
                    "geomean_regret"),
                "layer": str(self.meta.get("layer", "user"))}   # "system": shipped with convsel

    def rank(self, problem: Any, variants: Sequence[tuple[str, str, Mapping[str, Any]]],
             ) -> list[Ranked]:
        """``variants`` as (label, algorithm, params), fastest predicted first; ties in
        prediction fall to the label's order, so the answer is deterministic."""
        if not variants:
            return []
        # described as the backend the model was fitted on runs each candidate
        x = feature_matrix(problem, [(alg, params) for _, alg, params in variants],
                           self._backend)
        pred = self.model.predict(x, [label for label, _, _ in variants]).tolist()
        seen = self._seen
        factor = self._factor
        out = [Ranked(label, alg, dict(params),
                      # trees answer for an algorithm they never saw timed: that means nothing
                      math.exp(p) if math.isfinite(p) and (seen is None or alg in seen)
                      else math.inf,
                      factor(alg))
               for (label, alg, params), p in zip(variants, pred, strict=True)]
        return sorted(out, key=lambda r: (r.predicted_s, r.label))

    @cached_property
    def _backend(self) -> str:
        """The backend whose timings it was fitted on ("": stored without saying)."""
        return str(self.meta.get("backend") or "")

    @cached_property
    def _seen(self) -> frozenset[str] | None:
        """The algorithms its training timed (None: stored without saying)."""
        seen = self.meta.get("algorithms")
        return None if seen is None else frozenset(seen)

    def _factor(self, algorithm: str) -> float:
        """The model's typical error for ``algorithm`` (×/÷)."""
        factors = self._factors
        if algorithm not in factors:
            return math.exp(1.0)
        return factors[algorithm]

    @cached_property
    def _factors(self) -> dict[str, float]:
        return {str(alg): math.exp(float(s))
                for alg, s in dict(self.meta.get("sigma") or {}).items()}


_cache: dict[tuple[str, float], StoredModel] = {}
_lock = threading.Lock()


def decode(record: Mapping[str, Any]) -> StoredModel:
    """The usable model of a database record (``load_model``'s answer).

    Raises
    ------
    ModelError
        Unknown family, another feature set, or a body the family cannot read (corrupt).
    """
    family, meta = record.get("family"), record.get("meta")
    if family not in FAMILIES:
        raise ModelError(f"stored model has unknown family {family!r}; known: "
                         f"{', '.join(FAMILIES)}")
    if not isinstance(meta, dict) or not isinstance(record.get("model"), dict):
        raise ModelError("stored model: 'model' and 'meta' must be JSON objects")
    if meta.get("features_version") != FEATURES_VERSION:
        raise ModelError(f"stored model has features version {meta.get('features_version')!r}, "
                         f"this convsel computes version {FEATURES_VERSION!r}; run `convsel fit` "
                         "again")
    theirs = list(meta.get("features") or [])
    if theirs != list(FEATURE_NAMES):
        extra = sorted(set(theirs) - set(FEATURE_NAMES))
        missing = sorted(set(FEATURE_NAMES) - set(theirs))
        raise ModelError("stored model was fitted on other features (the algorithm registry "
                         f"changed? it has {extra or 'no others'}, lacks {missing or 'none'}"
                         f"{'' if extra or missing else ', in another order'}); run `convsel "
                         "fit` again")
    from .fit import model_id

    if model_id(str(family), record["model"]) != meta.get("id"):
        raise ModelError(f"stored model's body does not match its id {meta.get('id')!r} "
                         "(changed or truncated since it was fitted); run `convsel fit` again")
    key = (str(meta.get("id")), float(record.get("created") or 0.0))
    with _lock:
        if key in _cache:
            return _cache[key]
    stored = StoredModel(str(family), FAMILIES[str(family)].load(record["model"]), meta,
                         float(record.get("created") or 0.0))
    with _lock:
        _cache[key] = stored
    return stored
