"""The time a plan shows for a node: measured (from the tuning database) or nothing.

convsel does not estimate times. A FLOP count divided by a per-algorithm rate would look like
data without being measured anywhere, so a node without a tuning-database entry shows its FLOPs
and no time; ``convsel tune`` (or ``policy="measured", tune=True``) measures it.
"""

from __future__ import annotations

from typing import Any

from ..selection import Selection


def measured_time(selection: Selection, acl: Selection) -> dict[str, Any] | None:
    """The tuning database's timing of the chosen algorithm, and of ACL's pick when the
    entry holds it; None when the answer did not come from the database."""
    m = selection.measurement
    if selection.source != "tuning-db" or not m:
        return None
    chosen = str(m.get("chosen"))
    timings = dict(m.get("timings") or {})
    out: dict[str, Any] = {"kind": "measured", "label": chosen, **_ms(timings.get(chosen)),
                           "backend": m.get("backend"),
                           "device": dict(m.get("device") or {}).get("name"),
                           "measured_at": m.get("measured_at")}
    acl_label = _label(acl)
    if acl_label != chosen and acl_label in timings:
        out["acl_pick"] = {"label": acl_label, **_ms(timings[acl_label])}
    return out


def _ms(t: Any) -> dict[str, Any]:
    t = dict(t or {})
    return {"median_ms": t.get("median_ms"), "iqr_ms": t.get("iqr_ms"), "runs": t.get("runs")}


def _label(s: Selection) -> str:
    # The tuning database labels a Winograd timing with its tile ("winograd:4x4").
    tile = s.params.get("tile")
    return f"{s.algorithm}:{tile[0]}x{tile[1]}" if tile else s.algorithm
