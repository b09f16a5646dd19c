#!/usr/bin/env bash
# Issue 22's closing data in one device call: for the H100 (OpenCL) and the quiet host CPU
# (2 pinned cores, numpy) at the same time, on disjoint cores, the training run (a broad
# `tune --sample`, then the nets) and a separate, later fresh run (the nets again, and a
# sample of another seed) to judge on; then `fit` and `report --cv` (leave-one-net-out and
# leave-one-family-out) for each, as far as the time left allows; and on two more quiet
# cores meanwhile, benchmarks/selection.py (µs per choose() per policy).
#
#   [ONLY=h100|cpu2] [JUDGE=0] [FRESH_ONLY=1 FRESH_SEED=S | TRAIN_ONLY=1 [SAMPLE_S=170]] \
#       bash benchmarks/trust.sh OUTDIR SCALE
#
# SCALE multiplies every step's time budget (1 = the full run, about 530 s; 0.05 = a smoke
# test). OUTDIR/{h100,cpu2} get train.json.gz and fresh.json.gz (`convsel db export`), one log
# per step, fit.txt and report/ (report.json, report.txt), each folder also packed as
# OUTDIR/{h100,cpu2}.tgz (a device call brings back at most 8 files). ONLY runs one device;
# JUDGE=0 leaves fit and report to be run elsewhere. Judge again elsewhere with
# `convsel db --db X.sqlite import X.json` and `convsel report --cv --fresh-db ...` (NOTES).
# FRESH_ONLY=1 takes a new fresh run only (the nets re-timed, then `--sample M --seed
# FRESH_SEED`, default 1), no training run and no judging: a new, unread test set for a design
# fitted on an earlier run's committed train.json.gz (NOTES, "v3").
# TRAIN_ONLY=1 takes the training run only (the sample, then the nets), no fresh run and no
# judging, so that a fresh run can be taken in a second device call (NOTES, "v6"). SAMPLE_S
# is the training sample's budget in seconds before SCALE (default 170): on a fresh device
# machine every OpenCL build is a cold compile and 170 s times about 180 sampled shapes of the
# 800 instead of about 480 on a warm one, so a training run alone can afford more.
set -u
out=$1 scale=$2
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
secs() { python3 -c "print(max(1, round($1 * $scale)))"; }

step() {   # step DIR NAME LIMIT_S ARGS...: one convsel command, its log and wall time kept
    local dir=$1 name=$2 limit=$3 t0=$SECONDS
    shift 3
    timeout "$((limit + 30))" "${prefix[@]}" python3 -m convsel "$@" >"$dir/$name.log" 2>&1
    echo "$name rc=$? wall_s=$((SECONDS - t0))" | tee -a "$dir/$name.log"
}

device() {   # device DIR BACKEND TARGET NETS_VAR SAMPLE FRESH_SAMPLE TIMING_FLAGS...
    local dir=$1 backend=$2 target=$3 nets=$4 sample=$5 fresh=$6
    shift 6
    mkdir -p "$dir"
    # shellcheck source=benchmarks/net_flags.sh
    NETS="$nets" source "$here/net_flags.sh"
    local t=(--backend "$backend" --no-progress "$@") dbs=(fresh) sample_s=${SAMPLE_S:-170}
    if [ "${FRESH_ONLY:-0}" != 1 ]; then
        dbs=(train fresh)
        step "$dir" tune-sample "$(secs "$sample_s")" tune "${t[@]}" --sample "$sample" \
            --seed 0 --budget "$(secs "$sample_s")" --db "$dir/train.sqlite"
        step "$dir" tune-nets "$(secs 100)" tune "${t[@]}" "${net_flags[@]}" \
            --budget "$(secs 100)" --db "$dir/train.sqlite"
    fi
    if [ "${TRAIN_ONLY:-0}" = 1 ]; then
        dbs=(train)
    else
        step "$dir" fresh-nets "$(secs 100)" tune "${t[@]}" "${net_flags[@]}" \
            --budget "$(secs 100)" --db "$dir/fresh.sqlite"
        step "$dir" fresh-sample "$(secs 90)" tune "${t[@]}" --sample "$fresh" \
            --seed "${FRESH_SEED:-1}" --budget "$(secs 90)" --db "$dir/fresh.sqlite"
    fi
    for db in "${dbs[@]}"; do
        python3 -m convsel db --db "$dir/$db.sqlite" export "$dir/$db.json" >/dev/null \
            && gzip -f "$dir/$db.json"
    done
    echo "$dir: timing done at $SECONDS s"
}

judge() {   # judge DIR BACKEND TARGET NETS FRESH_SAMPLE LEFT_S: fit and report --cv
    local dir=$1 backend=$2 target=$3 nets=$4 fresh=$5 left=$6
    NETS="$nets" source "$here/net_flags.sh"
    local name
    name=$(python3 - "$dir/fresh.sqlite" "$backend" <<'PY'
import sys
from convsel.tuning.db import TuningDB
names = {e.device["name"] for e in TuningDB(sys.argv[1]).entries(backend=sys.argv[2])}
print(names.pop() if len(names) == 1 else "")
PY
)
    step "$dir" fit "$left" fit --backend "$backend" --device-name "$name" --target "$target" \
        --db "$dir/train.sqlite"
    mv "$dir/fit.log" "$dir/fit.txt"
    step "$dir" report "$left" report --backend "$backend" "${net_flags[@]}" --sample "$fresh" \
        --seed "${FRESH_SEED:-1}" --db "$dir/train.sqlite" --fresh-db "$dir/fresh.sqlite" \
        --device-name "$name" \
        --cv --target "$target" --out "$dir/report"
    mv "$dir/report.log" "$dir/report/report.txt"
    gzip -f "$dir/report/report.json"
}

cpu_nets="resnet50 vgg16 mobilenet_v2 mobilenet_v2_depthwise squeezenet1_1"
cpu_nets+=" squeezenet1_1_torchvision inception_v3 yolov3_416 alexnet alexnet_bvlc"
gpu_nets="$cpu_nets srgan_x4 esrgan_x4 unet"

# the GPU's host side on cores 8-15, the CPU run alone on cores 4 and 5 (no pinning on a
# machine with fewer than 16 cores: a smoke test)
pin() { if [ "$(nproc)" -ge 16 ]; then echo taskset -c "$1"; else echo env; fi; }
# choose() µs per policy on quiet cores while the devices are timed (benchmarks/selection.py)
# shellcheck disable=SC2046
only=${ONLY:-}
if [ -z "$only" ] && [ "${FRESH_ONLY:-0}" != 1 ] && [ "${TRAIN_ONLY:-0}" != 1 ]; then
    $(pin 0-1) python3 "$here/selection.py" --out "$out/selection.json" \
        >"$out/selection.txt" 2>&1 &
fi
if [ "$only" != cpu2 ]; then
    read -r -a prefix <<< "$(pin 8-15)"
    device "$out/h100" opencl G77 "$gpu_nets" 800 400 --min-time 0.002 --repeats 5 &
fi
if [ "$only" != h100 ]; then
    read -r -a prefix <<< "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 \
OPENBLAS_NUM_THREADS=2 $(pin 4,5)"
    device "$out/cpu2" numpy cpu "$cpu_nets" 600 300 --min-time 0.02 --repeats 5 &
fi
wait
left=$(python3 -c "print(max(20, round(($(secs 540) - $SECONDS) )))")
if [ "${JUDGE:-1}" != 0 ] && [ "${FRESH_ONLY:-0}" != 1 ] && [ "${TRAIN_ONLY:-0}" != 1 ]; then
    if [ "$only" != cpu2 ]; then
        read -r -a prefix <<< "$(pin 0-3)"
        judge "$out/h100" opencl G77 "$gpu_nets" 400 "$left" &
    fi
    if [ "$only" != h100 ]; then
        read -r -a prefix <<< "$(pin 8-11)"
        judge "$out/cpu2" numpy cpu "$cpu_nets" 300 "$left" &
    fi
    wait
fi
rm -f "$out"/*/*.sqlite   # the exports hold every entry
for dev in h100 cpu2; do
    [ -d "$out/$dev" ] && tar czf "$out/$dev.tgz" -C "$out" "$dev" && rm -rf "${out:?}/$dev"
done
echo "all done at $SECONDS s"
