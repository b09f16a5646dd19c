#!/usr/bin/env bash
# What `convsel tune --top K` costs and gives against timing every candidate, in one go:
# a model fitted on sampled shapes only (the first thing a new user has), then the nets tuned
# with --top K and, separately, in full, then the nets again into fresh.sqlite to judge both.
#
#   bash benchmarks/shortlist.sh OUTDIR K BACKEND [convsel tune flags...]
#
# Judge: convsel report --fresh-db OUTDIR/fresh.sqlite --db OUTDIR/top.sqlite (or full.sqlite):
# the `measured` row is each run's answers judged on the fresh timings.
set -u
out=$1 top=$2 backend=$3
shift 3
mkdir -p "$out"
# shellcheck source=benchmarks/net_flags.sh
source "$(dirname "$0")/net_flags.sh"   # NETS="a b c" to choose

step() {   # step NAME ARGS...: one convsel command, its log and wall time kept
    local name=$1 t0=$SECONDS rc
    shift
    python3 -m convsel "$@" >"$out/$name.log" 2>&1
    rc=$?
    tail -n 1 "$out/$name.log"
    echo "$name rc=$rc wall_s=$((SECONDS - t0))" | tee -a "$out/$name.log"
}

tune=(tune --no-progress --backend "$backend" "$@")
step sample "${tune[@]}" --sample 200 --seed 0 --db "$out/sample.sqlite"
step fit fit --backend "$backend" --db "$out/sample.sqlite"
cp "$out/sample.sqlite" "$out/top.sqlite"
step top "${tune[@]}" "${net_flags[@]}" --top "$top" --db "$out/top.sqlite"
step full "${tune[@]}" "${net_flags[@]}" --db "$out/full.sqlite"
step fresh "${tune[@]}" "${net_flags[@]}" --db "$out/fresh.sqlite"
for db in top full fresh; do
    python3 -m convsel db --db "$out/$db.sqlite" export "$out/$db.json" && gzip -f "$out/$db.json"
done
rm -f "$out"/*.sqlite
