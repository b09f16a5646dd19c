#!/bin/bash
# device: oneMKL multiplying; Winograd's batched product (HEAD, .wt/head) against one packed product per position where tiles <= 128 (the working tree)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/mkl && cat /tmp/mklparts/mklpart.00 /tmp/mklparts/mklpart.01 .wt/mkl3/mklpart.02 | tar -C /tmp/mkl -xJf - || exit 1
export CONVSEL_MKL_RT=/tmp/mkl/libmkl_rt.so.3 CONVSEL_GEMM=mkl
R=benchmarks/results/cpu-mkl-2026-11-24-gpuhost-xeon-2cores
CH="--choice $R/call1/cpu-resnet50-mkl-1.json --choice $R/call1/cpu-resnet50-mkl-2.json --choice $R/call2/cpu-resnet50-mkl-plain-1.json --choice $R/call2/cpu-resnet50-mkl-plain-2.json --choice $R/call2/cpu-mobilenetv2-mkl.json"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 PYTHONUNBUFFERED=1 taskset -c 4,5 \
  python3 benchmarks/cpu_ab.py --old .wt/head --new . --extra-path /tmp/site $CH \
  --layers .wt/mkl3/layers.json --net resnet50 --net mobilenet_v2 \
  --pairs 4 --deadline-s 330 --out $OUT/cpu-ab-mkl-winograd-packed.json > $OUT/cpu-ab-mkl-winograd-packed.log 2>&1
echo "rc $?"; sed -n "/^layer /,\$p" $OUT/cpu-ab-mkl-winograd-packed.log
