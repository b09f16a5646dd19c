"""A report as a terminal table and as PNG charts (matplotlib, no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..algorithms.registry import REGISTRY
from .report import POLICIES, Report

_ALGORITHM_COLOURS = {spec.id: spec.colour for spec in REGISTRY}
# ACL's pick circles the algorithm's dot; the measured pick is a red triangle just above it,
# so both stay visible when they agree and the dot's colour still shows the algorithm.
_PICK_STYLE: dict[str, dict[str, Any]] = {
    "acl": {"marker": "o", "s": 190, "facecolors": "none", "edgecolors": "black",
            "linewidths": 1.6},
    "measured": {"marker": "v", "s": 60, "color": "red"}}
_PICK_OFFSET = {"acl": 0.0, "measured": -0.36}


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _x(value: float | None, missing: str = "fail") -> str:
    return f"{missing:>6}" if value is None else f"{value:6.2f}"


def table(report: Report, worst: int = 5) -> str:
    """The per-layer table, the summary per net and overall, and ACL's costliest layers."""
    dev = report.device
    lines = [(f"backend {report.backend} on {dev.get('name', '?')} ({dev.get('driver', '?')}), "
              f"ACL target {report.target}; times are medians in ms, × is pick / fastest")]
    for net in report.nets:
        lines += ["", f"{net}",
                  (f"  {'layer':<34} {'fastest':<14} {'ms':>8}   {'acl pick':<14} {'×':>6}   "
                   f"{'measured pick':<14} {'×':>6} {'from':<5}")]
        for r in (r for r in report.layers if r.layer.net == net):
            acl, mea = r.picks["acl"], r.picks["measured"]
            source = "db" if mea.source == "tuning-db" else "rules"
            lines.append(f"  {_short(r.layer.name, 34):<34} {r.oracle:<14} "
                         f"{r.oracle_time * 1e3:8.3f}   {acl.label:<14} {_x(acl.regret)}   "
                         f"{mea.label:<14} {_x(mea.regret)} {source:<5}")
    lines += ["", "geometric-mean regret (1.00 = always the fastest)",
              (f"  {'set':<14} {'policy':<9} {'layers':>6} {'regret':>7} {'tuned':>6} "
               f"{'regret(tuned)':>13} {'picks fastest':>14}")]
    for name, summary in [*((n, report.summary(n)) for n in report.nets),
                          ("all", report.summary())]:
        for policy in POLICIES:
            s = summary[policy]
            lines.append(f"  {name:<14} {policy:<9} {s['layers']:>6} "
                         f"{_x(s['geomean_regret'], '-'):>7} {s['tuned_layers']:>6} "
                         f"{_x(s['geomean_regret_tuned'], '-'):>13} "
                         f"{s['oracle_picks']:>7}/{s['layers']:<6}")
    costly = report.worst("acl", worst)
    if costly:
        lines += ["", "where ACL's choice costs most"]
    for r in costly:
        acl = r.picks["acl"]
        lines.append(f"  {acl.regret or float('inf'):5.2f}×  {r.layer.label}: ACL runs "
                     f"{acl.label} ({acl.method}), fastest is {r.oracle}; rule {acl.rule}: "
                     f"{acl.reason}")
    lines += [f"left out: {m}" for m in report.left_out]
    return "\n".join(lines)


def plots(report: Report, out_dir: str | Path) -> list[Path]:
    """Write ``layers-<net>.png`` (every candidate's time per layer, the picks marked) and
    ``regret.png`` (geometric-mean regret per policy and net); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [_layers_png(report, net, out / f"layers-{net}.png") for net in report.nets]
    paths.append(_regret_png(report, out / "regret.png"))
    return paths


def _layers_png(report: Report, net: str, path: Path) -> Path:
    from matplotlib.figure import Figure  # no pyplot: no global state, no display
    from matplotlib.ticker import FuncFormatter

    rows = [r for r in report.layers if r.layer.net == net]
    fig = Figure(figsize=(11, 1.6 + 0.42 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    seen: set[str] = set()
    for y, r in enumerate(rows):
        for t in r.measurement.timings.values():
            if "median_s" not in t:
                continue
            alg = str(t["algorithm"])
            ax.scatter(t["median_s"] * 1e3, y, s=36, color=_ALGORITHM_COLOURS.get(alg, "grey"),
                       marker="D", label=None if alg in seen else alg, zorder=2)
            seen.add(alg)
        for policy in POLICIES:
            pick = r.picks[policy]
            if pick.time_s is not None:
                ax.scatter(pick.time_s * 1e3, y + _PICK_OFFSET[policy], zorder=3,
                           label=None if y else f"{policy} policy's pick",
                           **_PICK_STYLE[policy])
    ax.set_yticks(range(len(rows)), [_short(r.layer.name, 40) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(_minor_label))
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("median time per run (ms, log scale)")
    ax.grid(axis="x", which="both", alpha=0.3)
    ax.set_title(f"{net}: median time of each algorithm per layer\n{report.backend} on "
                 f"{report.device.get('name', '?')}; ○ ACL's pick, ▼ measured policy's pick",
                 fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: _legend_rank(labels[i]))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.savefig(path, dpi=110)
    return path


def _legend_rank(label: str) -> int:
    names = list(_ALGORITHM_COLOURS)
    return names.index(label) if label in names else len(names)


def _minor_label(value: float, _: int) -> str:
    # label 2 and 5 of each decade only: all eight crowd the axis
    mantissa = round(value / 10 ** math.floor(math.log10(value)))
    return f"{value:g}" if mantissa in (2, 5) else ""


def _regret_png(report: Report, path: Path) -> Path:
    from matplotlib.figure import Figure

    sets = [*report.nets, "all"]
    summaries = {n: report.summary(None if n == "all" else n) for n in sets}
    fig = Figure(figsize=(max(5.0, 1.8 * len(sets) + 2), 4.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(POLICIES)
    for i, policy in enumerate(POLICIES):
        values = [summaries[n][policy]["geomean_regret"] or 0.0 for n in sets]
        xs = [j + (i - (len(POLICIES) - 1) / 2) * width for j in range(len(sets))]
        bars = ax.bar(xs, values, width, label=f"{policy} policy",
                      color="tab:gray" if policy == "acl" else "tab:red")
        ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(sets)), sets)
    ax.set_ylabel("geometric-mean regret (pick time / fastest)")
    ax.set_ylim(bottom=0.9)
    ax.set_title(f"How far each policy is from the fastest ({report.backend})")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path
