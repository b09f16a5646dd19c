#!/bin/bash
# device: the final code, oneMKL (weights of <= 128-row products packed) against numpy's OpenBLAS, alternating processes
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
mkdir -p /tmp/mkl && cat /tmp/mklparts/mklpart.00 /tmp/mklparts/mklpart.01 .wt/mkl3/mklpart.02 | tar -C /tmp/mkl -xJf - || exit 1
export CONVSEL_MKL_RT=/tmp/mkl/libmkl_rt.so.3
R=benchmarks/results/cpu-mkl-2026-11-24-gpuhost-xeon-2cores
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 PYTHONUNBUFFERED=1 taskset -c 4,5 \
  python3 benchmarks/cpu_ab.py --old . --new . --extra-path /tmp/site \
  --old-env CONVSEL_GEMM=numpy --new-env CONVSEL_GEMM=mkl \
  --old-choice $R/call1/cpu-resnet50-numpy-1.json --old-choice $R/call1/cpu-resnet50-numpy-2.json \
  --old-choice $R/call2/cpu-mobilenetv2-numpy.json --old-choice .wt/mkl3/choice-depthwise-v3.json \
  --new-choice $R/call1/cpu-resnet50-mkl-1.json --new-choice $R/call1/cpu-resnet50-mkl-2.json \
  --new-choice $R/call2/cpu-resnet50-mkl-plain-1.json --new-choice $R/call2/cpu-resnet50-mkl-plain-2.json \
  --new-choice $R/call2/cpu-mobilenetv2-mkl.json --new-choice .wt/mkl3/choice-depthwise-v3.json \
  --layers .wt/mkl3/layers.json --net resnet50 --net mobilenet_v2 --net mobilenet_v2_depthwise \
  --pairs 5 --deadline-s 430 --out $OUT/cpu-ab-mkl-final.json > $OUT/cpu-ab-mkl-final.log 2>&1
echo "rc $?"; tail -4 $OUT/cpu-ab-mkl-final.log
