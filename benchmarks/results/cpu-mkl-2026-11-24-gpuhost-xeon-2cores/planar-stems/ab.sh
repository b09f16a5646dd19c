#!/bin/bash
# device: oneMKL multiplying; the few-channel stems (C < 8) by the fused im2col (the checkout)
# against the planar numpy im2col (.wt/stems/planar); two unchanged ResNet-50 layers as controls
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .wt/stems/whl/*.whl || exit 1
mkdir -p /tmp/mkl && cat /tmp/mklparts/mklpart.00 /tmp/mklparts/mklpart.01 .wt/mkl3/mklpart.02 | tar -C /tmp/mkl -xJf - || exit 1
export CONVSEL_MKL_RT=/tmp/mkl/libmkl_rt.so.3 CONVSEL_GEMM=mkl
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 PYTHONUNBUFFERED=1 taskset -c 4,5 \
  python3 benchmarks/cpu_ab.py --old . --new .wt/stems/planar --extra-path /tmp/site \
  --choice .wt/stems/choice.json --layers .wt/stems/layers.json \
  --net resnet50 --net mobilenet_v2 --net vgg16 --net squeezenet1_1 --net inception_v3 --net alexnet \
  --pairs ${PAIRS:-12} --deadline-s ${DEADLINE:-420} --out $OUT/cpu-ab-mkl-planar-stems.json > $OUT/cpu-ab-mkl-planar-stems.log 2>&1
echo "rc $?"; sed -n "/^layer /,\$p" $OUT/cpu-ab-mkl-planar-stems.log
