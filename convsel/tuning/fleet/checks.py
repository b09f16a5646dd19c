"""What an uploaded entry must be before a shared store takes it: the ``convsel db export``
form of one :class:`~convsel.tuning.entry.TuningEntry`, every field checked and bounded.

A store that many devices write to cannot trust what it is sent: a label it does not know
would never be chosen (or, worse, be chosen and not run), a negative or infinite time would
win every race, and an identity string of a megabyte would be copied into every answer. Each
check raises :class:`~convsel.errors.InvalidProblemError` naming the field (its path inside
the entry), the value and the rule.

Candidates of an entry measured by this convsel and these implementations must be variants
that convsel would time for the problem (:func:`convsel.algorithms.variants`, implemented on
the entry's backend); an entry of another version only needs known algorithms and labels
that match their parameters (it is kept, never used, so its variants may have changed since).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ... import algorithms, arguments, backends
from ...errors import InvalidProblemError
from ...problem import ConvProblem
from ...rules import as_rules
from ..entry import DEVICE_FIELDS, TuningEntry


@dataclass(frozen=True)
class Limits:
    """Bounds on one upload and on each entry in it."""

    entries: int = 5000            # per upload
    candidates: int = 64           # timings per entry
    text: int = 256                # an identity string, a backend, a version
    label: int = 128               # a candidate's label
    note: int = 2000               # an error or skip message
    entry_bytes: int = 64 * 1024   # one entry as compact JSON (the timings' quality included)
    seconds: float = 3600.0        # no single run of one convolution takes an hour
    runs: int = 10_000_000
    future_s: float = 86400.0      # a measurement's time may be ahead of ours by a day (clocks)


LIMITS = Limits()
ENTRY_FIELDS = ("problem", "backend", "device", "convsel_version", "implementations_version",
                "winner", "tie", "timings", "created")
TIME_FIELDS = ("median_s", "iqr_s", "min_s")


def check_count(count: int, limits: Limits = LIMITS) -> None:
    """An upload holds 1 to ``limits.entries`` entries."""
    if count < 1 or count > limits.entries:
        raise InvalidProblemError("entries", count, f"an upload holds 1 to {limits.entries} "
                                  "entries (split a larger database into several uploads)")


def check_entry(raw: Any, limits: Limits = LIMITS, now: float | None = None) -> TuningEntry:
    """The entry ``raw`` stands for, after every check; raises InvalidProblemError."""
    if not isinstance(raw, dict):
        raise InvalidProblemError("entry", type(raw).__name__, "an entry is a JSON object")
    unknown = sorted(set(raw) - set(ENTRY_FIELDS))
    if unknown:
        raise InvalidProblemError(unknown[0], "given", f"an entry has only the fields "
                                  f"{', '.join(ENTRY_FIELDS)}")
    size = _json_size(raw)
    if size > limits.entry_bytes:
        raise InvalidProblemError("entry", size, f"an entry is at most {limits.entry_bytes} "
                                  "bytes as JSON")
    backend = _text("backend", raw.get("backend"), limits)
    backend = arguments.backend(backend)
    device = raw.get("device")
    if not isinstance(device, dict) or set(device) - set(DEVICE_FIELDS):
        raise InvalidProblemError("device", _short(device), f"an object with only "
                                  f"{', '.join(DEVICE_FIELDS)}")
    ident = {k: _text(f"device.{k}", device.get(k), limits, empty=k != "name")
             for k in DEVICE_FIELDS}
    versions = {k: _text(k, raw.get(k), limits, empty=False)
                for k in ("convsel_version", "implementations_version")}
    problem = _problem(raw.get("problem"))
    created = _created(raw.get("created"), limits, time.time() if now is None else now)
    entry = TuningEntry(problem=problem, backend=backend, device=ident, winner=None, tie=(),
                        timings={}, created=created, **versions)
    timings = _timings(raw.get("timings"), entry, limits)
    winner, tie = _verdict(raw.get("winner"), raw.get("tie", []), timings, limits)
    _json_size(timings, finite=True)   # the fields not checked one by one (timing quality)
    return TuningEntry(problem=problem, backend=backend, device=ident, winner=winner, tie=tie,
                       timings=timings, created=created, **versions)


def _json_size(raw: Any, *, finite: bool = False) -> int:
    try:
        return len(json.dumps(raw, separators=(",", ":"), allow_nan=not finite))
    except ValueError:
        raise InvalidProblemError("entry", "NaN or Infinity", "JSON numbers must be finite "
                                  "(in every field)") from None
    except TypeError as exc:
        raise InvalidProblemError("entry", "not JSON", f"an entry is plain JSON ({exc})"
                                  ) from None


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 80 else text[:77] + "..."


def _text(field: str, value: Any, limits: Limits, *, empty: bool = True,
          most: int | None = None) -> str:
    bound = most or limits.text
    if not isinstance(value, str):
        raise InvalidProblemError(field, _short(value), "must be a string")
    if not value.strip() and not empty:
        raise InvalidProblemError(field, value, "must not be empty")
    if len(value) > bound:
        raise InvalidProblemError(field, f"{len(value)} characters",
                                  f"at most {bound} characters")
    if any(not ch.isprintable() for ch in value):
        raise InvalidProblemError(field, _short(value), "printable characters only (no control "
                                  "characters or line breaks)")
    return value


def _whole(value: Any) -> Any:
    """JSON has one kind of number: 8.0 is the integer 8 (as JSON Schema and the service's
    other routes read it), so an exporter that writes 8.0 is not refused."""
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _problem(raw: Any) -> ConvProblem:
    if isinstance(raw, dict):   # the sizes, groups and pairs; an activation's bounds are reals
        raw = {k: v if k == "activation" else _whole(v) for k, v in raw.items()}
    try:
        return ConvProblem.from_dict(raw)
    except InvalidProblemError as exc:
        raise InvalidProblemError(f"problem.{exc.field}", exc.value, exc.rule) from None
    except (TypeError, ValueError, KeyError) as exc:
        raise InvalidProblemError("problem", _short(raw), f"not a problem ({exc})") from None


def _created(value: Any, limits: Limits, now: float) -> float:
    if value is None:
        return now
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise InvalidProblemError("created", _short(value), "a positive, finite Unix time "
                                  "(seconds)")
    if value > now + limits.future_s:
        raise InvalidProblemError("created", value, f"must not be later than this server's "
                                  f"clock by more than {limits.future_s:g} s")
    return float(value)


def _timings(raw: Any, entry: TuningEntry, limits: Limits) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict) or not raw:
        raise InvalidProblemError("timings", _short(raw), "a non-empty object: label -> "
                                  "statistics")
    if len(raw) > limits.candidates:
        raise InvalidProblemError("timings", len(raw), f"at most {limits.candidates} "
                                  "candidates per entry")
    known = _known_labels(entry) if entry.is_current else None
    out = {}
    for label, stats in raw.items():
        _text(f"timings.{label[:40]}", label, limits, empty=False, most=limits.label)
        out[label] = _candidate(label, stats, entry, known, limits)
    return out


def _known_labels(entry: TuningEntry) -> dict[str, str]:
    """label -> algorithm, for every variant this convsel times for the entry's problem on its
    backend (a problem no algorithm supports has none)."""
    rules = as_rules(None)
    found = {}
    for alg in algorithms.ALGORITHMS:
        if not backends.implemented(alg, entry.backend).ok:
            continue
        if not algorithms.supports(alg, entry.problem, rules).ok:
            continue
        for params in algorithms.variants(alg, entry.problem, rules):
            found[algorithms.label_of(alg, params)] = alg
    return found


def _candidate(label: str, stats: Any, entry: TuningEntry, known: Mapping[str, str] | None,
               limits: Limits) -> dict[str, Any]:
    where = f"timings.{label}"
    if not isinstance(stats, dict):
        raise InvalidProblemError(where, _short(stats), "statistics are a JSON object")
    if "skipped" in stats:
        # a candidate that cannot run here: its label names an algorithm (or a variant)
        _algorithm(where, label.split(":", 1)[0])
        _text(f"{where}.skipped", stats["skipped"], limits, most=limits.note)
        if set(stats) != {"skipped"}:
            raise InvalidProblemError(where, sorted(stats), "a skipped candidate holds only "
                                      "'skipped'")
        return dict(stats)
    algorithm = _algorithm(f"{where}.algorithm", stats.get("algorithm"))
    params = stats.get("params", {})
    if not isinstance(params, dict):
        raise InvalidProblemError(f"{where}.params", _short(params), "a JSON object")
    expected = algorithms.label_of(algorithm, params)
    if label != expected:
        raise InvalidProblemError(where, label, f"the label of {algorithm} with params "
                                  f"{params} is {expected!r}")
    if known is not None and label not in known:
        raise InvalidProblemError(where, label, f"not a variant convsel "
                                  f"{entry.convsel_version} times for this problem on "
                                  f"{entry.backend} (known here: "
                                  f"{', '.join(sorted(known)) or 'none'})")
    if "error" in stats:
        _text(f"{where}.error", stats["error"], limits, most=limits.note)
        return dict(stats)
    for name in TIME_FIELDS:
        if name == "median_s" or name in stats:
            _seconds(f"{where}.{name}", stats.get(name), limits, zero=name == "iqr_s")
    runs = _whole(stats.get("runs"))
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= limits.runs:
        raise InvalidProblemError(f"{where}.runs", _short(runs), f"an integer from 1 to "
                                  f"{limits.runs}")
    if "min_s" in stats and stats["min_s"] > stats["median_s"]:
        raise InvalidProblemError(f"{where}.min_s", stats["min_s"], "the fastest run cannot "
                                  "be slower than the median")
    return {**stats, "runs": runs}


def _algorithm(field: str, value: Any) -> str:
    if not isinstance(value, str) or value not in algorithms.ALGORITHMS:
        raise InvalidProblemError(field, _short(value), f"unknown algorithm; known: "
                                  f"{', '.join(algorithms.ALGORITHMS)}")
    return value


def _seconds(field: str, value: Any, limits: Limits, *, zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise InvalidProblemError(field, _short(value), "a finite number of seconds")
    if value < 0 or (value == 0 and not zero):
        raise InvalidProblemError(field, value, "a time must be positive" if not zero else
                                  "a spread must not be negative")
    if value > limits.seconds:
        raise InvalidProblemError(field, value, f"at most {limits.seconds:g} s")
    return float(value)


def _verdict(winner: Any, tie: Any, timings: Mapping[str, Mapping[str, Any]],
             limits: Limits) -> tuple[str | None, tuple[str, ...]]:
    timed = {k: float(v["median_s"]) for k, v in timings.items() if "median_s" in v}
    if not isinstance(tie, list) or len(tie) > limits.candidates \
            or any(not isinstance(t, str) or t not in timed for t in tie):
        raise InvalidProblemError("tie", _short(tie), "a list of timed labels of this entry")
    if winner is not None:
        if not isinstance(winner, str) or winner not in timed:
            raise InvalidProblemError("winner", _short(winner), "null or a timed label of "
                                      "this entry")
        if tie:
            raise InvalidProblemError("tie", tie, "an entry has a winner or a tie, not both")
        fastest = min(timed, key=lambda k: timed[k])
        if timed[winner] > timed[fastest]:
            raise InvalidProblemError("winner", winner, f"the winner must be the fastest of "
                                      f"its timings ({fastest} has a smaller median)")
    elif tie and min(timed[t] for t in tie) > min(timed.values()):
        raise InvalidProblemError("tie", tie, "a tie holds the fastest timing")
    return winner, tuple(tie)
