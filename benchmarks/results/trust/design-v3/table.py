"""The leave-one-family-out table of a `convsel report --cv` output (report.json[.gz]):
per family, ACL's rules, the predicted policy and never-abstaining as geomean / worst, the
abstentions, the model kept and the three targets (met or missed, by how much).

    python table.py report.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys


def main() -> None:
    path = sys.argv[1]
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        report = json.load(f)
    cv = report["family_cv"]
    print("| held out | layers | ACL's rules | predicted | abstained | never abstaining "
          "| model | ≤ 1.03 | not worse than ACL | no layer > 1.5× unless ACL's is |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, row in cv.items():
        acl, pred, bold = row["acl"], row["predicted"], row["predicted_never_abstaining"]
        t = row["targets"]
        reg = pred["geomean_regret"]
        at_most = "met" if t["regret_at_most_1.03"] else f"**missed** (+{reg - 1.03:.3f})"
        no_worse = "met" if t["not_worse_than_acl"] else "**missed**"
        blunder = ("met" if t["no_blunder_above_1.5x"]
                   else f"**missed**: {len(t['blunders'])} layer(s)")
        print(f"| {name} | {pred['layers']} | {acl['geomean_regret']:.3f} / "
              f"{acl['worst_regret']:.2f}× | **{reg:.3f}** / {pred['worst_regret']:.2f}× | "
              f"{row['abstained']} | {bold['geomean_regret']:.3f} / {bold['worst_regret']:.2f}× "
              f"| {row['family']} | {at_most} | {no_worse} | {blunder} |")
    net_out(report)


def net_out(report: dict) -> None:
    """The summary over every fresh layer: ACL's rules and leave-one-net-out."""
    for name in ("acl", "predicted-cv"):
        s = report["summary"][name]
        print(f"{name}: {s['layers']} layers, geomean {s['geomean_regret']:.3f}, worst "
              f"{s['worst_regret']:.2f}x, fastest {s['fastest_share']:.0%}")


if __name__ == "__main__":
    main()
