#!/bin/bash
# device: oneMKL multiplying on both sides; the fused kernels' threads as HEAD runs them (the
# checkout: alone, or Python pool threads) against the same kernels on GNU OpenMP, the pool
# oneMKL's threads come from (.wt/omp: numba's "omp" layer)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .wt/stems/whl/*.whl || exit 1
mkdir -p /tmp/mkl && cat /tmp/mklparts/mklpart.00 /tmp/mklparts/mklpart.01 .wt/mkl3/mklpart.02 | tar -C /tmp/mkl -xJf - || exit 1
export CONVSEL_MKL_RT=/tmp/mkl/libmkl_rt.so.3 CONVSEL_GEMM=mkl
R=benchmarks/results/cpu-mkl-2026-11-24-gpuhost-xeon-2cores
CH="--choice $R/call1/cpu-resnet50-mkl-1.json --choice $R/call1/cpu-resnet50-mkl-2.json --choice $R/call2/cpu-resnet50-mkl-plain-1.json --choice $R/call2/cpu-resnet50-mkl-plain-2.json --choice $R/call2/cpu-mobilenetv2-mkl.json --choice .wt/mkl3/choice-depthwise-v3.json"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 PYTHONUNBUFFERED=1 taskset -c 4,5 \
  python3 benchmarks/cpu_ab.py --old . --new .wt/omp --extra-path /tmp/site $CH \
  --layers .wt/mkl3/layers.json --net resnet50 --net mobilenet_v2 --net mobilenet_v2_depthwise \
  --pairs ${PAIRS:-5} --deadline-s ${DEADLINE:-440} --out $OUT/cpu-ab-mkl-omp.json > $OUT/cpu-ab-mkl-omp.log 2>&1
echo "rc $?"; sed -n "/^layer /,\$p" $OUT/cpu-ab-mkl-omp.log
