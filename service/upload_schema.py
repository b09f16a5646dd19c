"""The OpenAPI schema of an upload's entries (``POST /v1/tuning/entries``): what
:mod:`convsel.tuning.fleet.checks` accepts, stated as far as JSON Schema can.

The route does not validate entries with these models: the library checks each entry, so that
``partial=true`` can store the good ones and report the others by index. What no schema can
state is left to the library (and listed in tests/service/test_service_schema.py): a label
that must equal its algorithm's and parameters' label (and be a variant convsel times for the
problem), a winner or tie among the entry's own fastest timings, ``min_s`` against
``median_s``, ``created`` against the server's clock, an entry's whole size in bytes, and
Unicode's printable class beyond the control characters.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from convsel import algorithms, backends
from convsel.tuning import Limits

from .schemas import ProblemIn

LIMITS = Limits()   # the library's defaults; the entry count is the server's (its setting)

_CONTROL = r"\x00-\x1f\x7f-\x9f"          # never printable
_PRINTABLE = rf"^[^{_CONTROL}]*$"
_NOT_BLANK = rf"^[^{_CONTROL}]*[^\s{_CONTROL}][^{_CONTROL}]*$"
_ALGORITHM = "|".join(re.escape(a) for a in algorithms.ALGORITHMS)

Text = Annotated[str, StringConstraints(max_length=LIMITS.text, pattern=_PRINTABLE)]
Named = Annotated[str, StringConstraints(max_length=LIMITS.text, pattern=_NOT_BLANK)]
Note = Annotated[str, StringConstraints(max_length=LIMITS.note, pattern=_PRINTABLE)]
# A label is its algorithm's id, then ':' and its parameters (convsel.algorithms.label_of).
Label = Annotated[str, StringConstraints(max_length=LIMITS.label,
                                         pattern=rf"^({_ALGORITHM})(:[^{_CONTROL}]*)?$")]
Seconds = Annotated[float, Field(gt=0, le=LIMITS.seconds)]
_ALGORITHM_ENUM = {"enum": list(algorithms.ALGORITHMS)}


def _without(*fields: str) -> dict[str, Any]:
    """A candidate of one form holds none of another form's marker fields."""
    return {"not": {"anyOf": [{"required": [f]} for f in fields]}}


class SkippedIn(BaseModel):
    """A candidate that cannot run on the measuring device."""

    model_config = ConfigDict(extra="forbid")

    skipped: Note


class FailedIn(BaseModel):
    """A candidate that raised while timed."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_without("skipped"))

    algorithm: str = Field(json_schema_extra=_ALGORITHM_ENUM)
    params: dict[str, Any] = Field(default_factory=dict)
    error: Note


class TimedIn(BaseModel):
    """A timed candidate (further fields: the timing's quality, kept as sent)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_without("skipped", "error"))

    algorithm: str = Field(json_schema_extra=_ALGORITHM_ENUM)
    params: dict[str, Any] = Field(default_factory=dict)
    median_s: Seconds
    # omitted or a number: null is not taken (hence the default outside the type)
    iqr_s: float = Field(None, ge=0, le=LIMITS.seconds)
    min_s: float = Field(None, gt=0, le=LIMITS.seconds, description="at most median_s")
    runs: int = Field(ge=1, le=LIMITS.runs)


class DeviceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vendor: Text
    name: Named
    driver: Text


class EntryIn(BaseModel):
    """One entry as ``convsel db export`` writes it."""

    model_config = ConfigDict(extra="forbid")

    problem: ProblemIn  # type: ignore[valid-type]
    backend: str = Field(max_length=LIMITS.text, description="one backend name",
                         pattern=rf"^ *({'|'.join(backends.BACKENDS)}) *$")
    device: DeviceIn
    convsel_version: Named
    implementations_version: Named
    winner: Annotated[str, Field(max_length=LIMITS.label)] | None = Field(
        None, description="the fastest timed label, or null")
    tie: list[Annotated[str, Field(max_length=LIMITS.label)]] = Field(
        default_factory=list, max_length=LIMITS.candidates,
        description="timed labels, the fastest among them; empty when there is a winner")
    timings: dict[Label, SkippedIn | FailedIn | TimedIn] = Field(
        min_length=1, max_length=LIMITS.candidates,
        description="label -> statistics; a label is a variant convsel times for the problem",
        # pydantic states the label's pattern as patternProperties: no other key is taken
        json_schema_extra={"additionalProperties": False,
                           "propertyNames": {"maxLength": LIMITS.label}})
    created: float | None = Field(None, gt=0, description="Unix time, not ahead of the "
                                  "server's clock by more than a day; default: when received")


__all__ = ["EntryIn"]
