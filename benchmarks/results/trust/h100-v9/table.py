"""Issue 22's v9 tables from a `convsel report --cv` output (report.json[.gz]): per held-out
family, ACL's rules, the predicted policy (geomean / worst), its abstentions, tune-auto (the
candidates it timed) and the three targets for both policies, with each blunder named; then
leave-one-net-out and the worst tune-auto layers per family.

    python table.py report.json.gz [WORST]
"""

from __future__ import annotations

import gzip
import json
import sys


def gw(stats: dict) -> str:
    return f"{stats['geomean_regret']:.3f} / {stats['worst_regret']:.2f}×"


def targets(t: dict, reg: float) -> str:
    out = []
    out.append("met" if t["regret_at_most_1.03"] else f"**missed** (+{reg - 1.03:.3f})")
    out.append("met" if t["not_worse_than_acl"] else "**missed**")
    if t["no_blunder_above_1.5x"]:
        out.append("met")
    else:
        names = "; ".join(str(b) for b in t["blunders"])
        out.append(f"**missed**: {len(t['blunders'])} ({names})")
    return " | ".join(out)


def main() -> None:
    path = sys.argv[1]
    worst = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        report = json.load(f)
    cv = report["family_cv"]
    print("| held out | layers | ACL's rules | predicted | abstained | tune-auto (candidates "
          "timed) | predicted: ≤ 1.03 | not worse than ACL | no layer > 1.5× unless ACL's is "
          "| tune-auto: ≤ 1.03 | not worse than ACL | no layer > 1.5× unless ACL's is |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row in cv.items():
        pred, tuned = row["predicted"], row["predicted_tuned"]
        print(f"| {name} | {pred['layers']} | {gw(row['acl'])} | {gw(pred)} | "
              f"{row['abstained']} | {gw(tuned)} ({row['tuned_timed_candidates']} of "
              f"{row['tuned_candidates']}) | "
              f"{targets(row['targets'], pred['geomean_regret'])} | "
              f"{targets(row['targets_tuned'], tuned['geomean_regret'])} |")
    print()
    for name in ("acl", "predicted-cv"):
        s = report["summary"][name]
        print(f"leave-one-net-out {name}: {s['layers']} layers, geomean "
              f"{s['geomean_regret']:.3f}, worst {s['worst_regret']:.2f}x, fastest "
              f"{s['fastest_share']:.0%}")
    for name, row in cv.items():
        rt, pr = row.get("retimed"), row.get("predicted_on_retimed")
        if rt:
            print(f"re-timed floor {name}: {gw(rt)} on {rt['layers']} layers "
                  f"(predicted there {gw(pr)})")
    print()
    for key in ("predicted_regret", "tuned_regret"):
        print(f"worst layers by {key} (ACL's regret, pick, fastest):")
        for name, row in cv.items():
            layers = sorted(row["layers"], key=lambda x: -x[key])[:worst]
            for x in layers:
                pick = x["tuned"] if key == "tuned_regret" else x["predicted"]
                where = x["layer"] if x["shape"] in x["layer"] else f"{x['layer']} [{x['shape']}]"
                print(f"  {name}: {where} {x[key]:.2f}x "
                      f"(ACL {x['acl_regret']:.2f}x {x['acl']}; picked {pick}; "
                      f"fastest {x['oracle']})")


if __name__ == "__main__":
    main()
