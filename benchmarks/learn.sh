#!/usr/bin/env bash
# Training and fresh timings for the predicted policy's leave-one-net-out (issue 11), in one go,
# each step under its own time limit so the whole fits one device call.
#
#   bash benchmarks/learn.sh OUTDIR SAMPLE_S NETS_S [convsel tune flags...]
#
# OUTDIR gets train.sqlite (`tune --sample 200` then every layer of the nets), fresh.sqlite
# (the nets again, timed separately after) and their `convsel db export` JSON, gzipped, plus
# one log per step. Judge them with `convsel report --cv` (see benchmarks/results/learn/NOTES.md).
set -u
out=$1 sample_s=$2 nets_s=$3
shift 3
mkdir -p "$out"
# shellcheck source=benchmarks/net_flags.sh
source "$(dirname "$0")/net_flags.sh"   # NETS="a b c" to choose

step() {   # step NAME LIMIT_S ARGS...: one timed convsel tune, its log and wall time kept
    local name=$1 limit=$2 t0=$SECONDS
    shift 2
    timeout "$limit" python3 -m convsel tune --no-progress "$@" >"$out/$name.log" 2>&1
    echo "rc=$? wall_s=$((SECONDS - t0))" | tee -a "$out/$name.log"
    tail -n 2 "$out/$name.log"
}

step tune-sample "$sample_s" "$@" --sample 200 --seed 0 --db "$out/train.sqlite"
step tune-nets "$nets_s" "$@" "${net_flags[@]}" --db "$out/train.sqlite"
step fresh-nets "$nets_s" "$@" "${net_flags[@]}" --db "$out/fresh.sqlite"
for db in train fresh; do
    python3 -m convsel db --db "$out/$db.sqlite" export "$out/$db.json" && gzip -f "$out/$db.json"
done
rm -f "$out"/*.sqlite   # the exports hold every entry; the databases are rebuilt from them
