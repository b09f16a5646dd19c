"""A report as a terminal table and as PNG charts (matplotlib, no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..algorithms.registry import REGISTRY
from ..policies.predicted import DEFAULT_TOP
from .report import CV_POLICY, Report

_ALGORITHM_COLOURS = {spec.id: spec.colour for spec in REGISTRY}
# ACL's pick circles the algorithm's dot; the measured pick is a red triangle just above it,
# so both stay visible when they agree and the dot's colour still shows the algorithm.
_PICK_STYLE: dict[str, dict[str, Any]] = {
    "acl": {"marker": "o", "s": 190, "facecolors": "none", "edgecolors": "black",
            "linewidths": 1.6},
    "measured": {"marker": "v", "s": 60, "color": "red"},
    "predicted": {"marker": "^", "s": 60, "color": "tab:purple"},
    CV_POLICY: {"marker": "x", "s": 70, "color": "black"}}
_PICK_OFFSET = {"acl": 0.0, "measured": -0.36, "predicted": 0.36, CV_POLICY: -0.2}
_BAR_COLOUR = {"acl": "tab:gray", "measured": "tab:red", "predicted": "tab:purple",
               CV_POLICY: "black"}
_FROM = {"tuning-db": "db", "model": "model", "rules": "rules"}


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _x(value: float | None, missing: str = "fail") -> str:
    return f"{missing:>6}" if value is None else f"{value:6.2f}"


def table(report: Report, worst: int = 5) -> str:
    """The per-layer table, the summary per net and overall, and ACL's costliest layers."""
    dev = report.device
    stat = "fastest runs" if report.judge == "min" else "medians"
    lines = [(f"backend {report.backend} on {dev.get('name', '?')} ({dev.get('driver', '?')}), "
              f"ACL target {report.target}; times are {stat} in ms, × is pick / fastest")]
    policies = report.policies
    for net in report.nets:
        head = "".join(f"   {p + ' pick':<16} {'×':>6} {'from':<5}" for p in policies)
        lines += ["", f"{net}", f"  {'layer':<34} {'fastest':<14} {'ms':>8}{head}"]
        for r in (r for r in report.layers if r.layer.net == net):
            cells = "".join(f"   {r.picks[p].label:<16} {_x(r.picks[p].regret)} "
                            f"{_FROM.get(r.picks[p].source, r.picks[p].source):<5}"
                            if p in r.picks else f"   {'-':<16} {'':>6} {'':<5}"
                            for p in policies)
            lines.append(f"  {_short(r.layer.name, 34):<34} {r.oracle:<14} "
                         f"{r.oracle_time * 1e3:8.3f}{cells}")
    lines += ["", ("geometric-mean regret (1.00 = always the fastest; a pick tied with the "
                   "fastest within the run's noise counts 1.00); mean = MIOpen's mean slowdown"),
              (f"  {'set':<26} {'policy':<13} {'layers':>6} {'regret':>7} {'mean':>7} "
               f"{'worst':>7} {'tuned':>6} {'model':>6} {'picks fastest':>16} "
               f"{'fastest algorithm':>18} {'in noise':>8}")]
    for name, summary in [*((n, report.summary(n)) for n in report.nets),
                          ("all", report.summary())]:
        for policy in policies:
            s = summary[policy]
            share = f"{s['fastest_share']:.0%}" if s["fastest_share"] is not None else "-"
            alg = f"{s['algorithm_share']:.0%}" if s["algorithm_share"] is not None else "-"
            lines.append(f"  {_short(name, 26):<26} {policy:<13} {s['layers']:>6} "
                         f"{_x(s['geomean_regret'], '-'):>7} {_x(s['mean_regret'], '-'):>7} "
                         f"{_x(s['worst_regret'], '-'):>7} "
                         f"{s['tuned_layers']:>6} {s['model_layers']:>6} "
                         f"{s['oracle_picks']:>5}/{s['layers']:<4} {share:>5} "
                         f"{s['algorithm_picks']:>7}/{s['layers']:<4} {alg:>5} "
                         f"{s['within_noise']:>8}")
    if report.crossval:
        lines += ["", f"leave-one-net-out ({CV_POLICY}): per net, the model fitted without it"]
        for net, fold in report.crossval.items():
            lines.append(f"  {net:<26} " + (fold["error"] if "error" in fold else
                         f"model {fold['model_id']} ({fold['family']}) on "
                         f"{fold['training_problems']} shapes, "
                         f"{fold['excluded_training_entries']} of this net's left out"))
    if report.family_cv:
        lines += ["", family_table(report.family_cv)]
    costly = report.worst("acl", worst)
    if costly:
        lines += ["", "where ACL's choice costs most"]
    for r in costly:
        acl = r.picks["acl"]
        lines.append(f"  {acl.regret or float('inf'):5.2f}×  {r.layer.label}: ACL runs "
                     f"{acl.label} ({acl.method}), fastest is {r.oracle}; rule {acl.rule}: "
                     f"{acl.reason}")
    noisy = [r for r in report.layers if r.measurement.noise]
    if noisy:
        lines += ["", f"{len(noisy)} layer(s) timed with noise (their ties are wider, and a "
                  "pick inside a tie is not charged): " + ", ".join(
                      _short(r.layer.label, 40) for r in noisy[:8])
                  + (" ..." if len(noisy) > 8 else "")]
    lines += [f"left out: {m}" for m in report.left_out]
    return "\n".join(lines)


_POLICY_NAMES = {"acl": "acl", "predicted": "predicted", "predicted_never_abstaining": "no-abstain",
                 "predicted_tuned": "tune-auto", "retimed": "re-timed"}


def family_table(folds: dict[str, Any]) -> str:
    """Leave-one-family-out: per held-out family, ACL's rules against the model fitted
    without it (geomean, MIOpen's mean, worst, picks of the fastest), where the model's picks
    came from, and issue 22's targets (regret <= 1.03, not worse than ACL, no layer above
    1.5x unless ACL's is too); where the training run timed some of the layers, its own
    winners re-timed (the floor)."""
    lines = [("leave-one-family-out: per family, a model fitted without any shape of it, "
              "judged on its layers"),
             (f"  {'family':<13} {'layers':>6} {'policy':<10} {'regret':>7} {'mean':>7} "
              f"{'worst':>7} {'fastest':>8}  model / answers from / targets")]
    for name, fold in folds.items():
        if "error" in fold:
            lines.append(f"  {name:<13} {fold['error']}")
            continue
        for policy in ("acl", "predicted", "predicted_never_abstaining", "predicted_tuned",
                       "retimed"):
            s = fold.get(policy)
            if s is None:   # a report written before the row, or no layer re-timed
                continue
            share = f"{s['fastest_share']:.0%}" if s["fastest_share"] is not None else "-"
            tail = ""
            if policy == "predicted":
                t = fold["targets"]
                met = [k for k in ("regret_at_most_1.03", "not_worse_than_acl",
                                   "no_blunder_above_1.5x") if t[k]]
                missed = [k for k in ("regret_at_most_1.03", "not_worse_than_acl",
                                      "no_blunder_above_1.5x") if not t[k]]
                sources = ", ".join(f"{k} {v}" for k, v in sorted(fold["sources"].items()))
                state = "accepted" if fold["accepted"] else "REJECTED"
                tail = (f"  {fold['model_id']} {fold['family']} {state}; {sources}, "
                        f"{fold['abstained']} abstained; met: {', '.join(met) or '-'}; "
                        f"MISSED: {', '.join(missed) or '-'}")
            elif policy == "predicted_tuned":
                tail = (f"  the {s['tuned_layers']} layers outside the training data "
                        f"({fold['abstained']} abstained on) timed "
                        f"{fold['tuned_timed_candidates']} of their "
                        f"{fold['tuned_candidates']} candidates (top {DEFAULT_TOP} + ACL's)")
            elif policy == "retimed":
                mine = fold["predicted_on_retimed"]
                tail = (f"  the training run's own winners on the {s['layers']} layers it "
                        f"timed (the floor for any policy); predicted there "
                        f"{_x(mine['geomean_regret'], '-')} / {_x(mine['worst_regret'], '-')}")
            lines.append(f"  {name if policy == 'acl' else '':<13} "
                         f"{s['layers'] if policy == 'acl' else '':>6} "
                         f"{_POLICY_NAMES[policy]:<10} "
                         f"{_x(s['geomean_regret'], '-'):>7} {_x(s['mean_regret'], '-'):>7} "
                         f"{_x(s['worst_regret'], '-'):>7} {share:>8}{tail}")
    return "\n".join(lines)


def plots(report: Report, out_dir: str | Path) -> list[Path]:
    """Write ``layers-<net>.png`` (every candidate's time per layer, the picks marked) and
    ``regret.png`` (geometric-mean regret per policy and net); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [_layers_png(report, net, out / f"layers-{net}.png") for net in report.nets]
    paths.append(_regret_png(report, out / "regret.png"))
    if any(CV_POLICY in r.picks for r in report.layers):
        paths.append(_crossval_png(report, out / "crossval.png"))
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
        for policy in r.picks:
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
                 f"{report.device.get('name', '?')}; ○ ACL, ▼ measured, ▲ predicted, "
                 f"x predicted (leave-one-net-out)",
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
    policies = report.policies
    width = 0.8 / max(len(policies), 1)
    for i, policy in enumerate(policies):
        values = [summaries[n][policy]["geomean_regret"] or 0.0 for n in sets]
        xs = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(sets))]
        bars = ax.bar(xs, values, width, label=f"{policy} policy",
                      color=_BAR_COLOUR.get(policy, "tab:blue"))
        ax.bar_label(bars, fmt="%.3f", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(sets)), sets)
    ax.set_ylabel("geometric-mean regret (pick time / fastest)")
    ax.set_ylim(bottom=0.9)
    ax.set_title(f"How far each policy is from the fastest ({report.backend})")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return path


_CV_LABELS = {"acl": "ACL's rules", CV_POLICY: "predicted (model fitted without the net)",
              "measured": "measured (an earlier run of these layers: the repeatability bound)"}


def _crossval_png(report: Report, path: Path) -> Path:
    """Per held-out net and overall: geometric-mean regret and share of layers where the pick
    was the fastest, ACL's rules against the model fitted without that net, and (when the
    report has it) the earlier run's own pick of each layer."""
    from matplotlib.figure import Figure

    sets = [*report.nets, "all"]
    policies = [p for p in ("acl", CV_POLICY, "measured") if p in report.policies]
    summaries = {n: report.summary(None if n == "all" else n) for n in sets}
    fig = Figure(figsize=(max(7.0, 0.9 * len(sets) + 3), 7.0), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        xs = [j + (i - (len(policies) - 1) / 2) * width for j in range(len(sets))]
        label = _CV_LABELS[policy]
        regrets = [summaries[n][policy]["geomean_regret"] or 0.0 for n in sets]
        shares = [100 * (summaries[n][policy]["fastest_share"] or 0.0) for n in sets]
        top.bar(xs, regrets, width, label=label, color=_BAR_COLOUR[policy])
        bars = bottom.bar(xs, shares, width, label=label, color=_BAR_COLOUR[policy])
        bottom.bar_label(bars, fmt="%.0f", fontsize=7)
    top.axhline(1.05, color="tab:red", linewidth=0.8, linestyle="--", label="1.05")
    top.set_ylim(bottom=0.95)
    top.set_ylabel("geometric-mean regret")
    bottom.axhline(70, color="tab:red", linewidth=0.8, linestyle="--", label="70%")
    bottom.set_ylabel("% of layers: pick is the fastest")
    bottom.set_xticks(range(len(sets)), sets, rotation=40, ha="right", fontsize=8)
    top.legend(fontsize=8)
    top.set_title(f"Leave-one-net-out: {report.backend} on {report.device.get('name', '?')}")
    fig.savefig(path, dpi=110)
    return path
