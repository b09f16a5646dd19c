#!/bin/bash
# device: benchmarks/cpu.py with oneMKL (packed weights), ResNet-50 twice and MobileNetV2 (both nets)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/mkl && cat /tmp/mklparts/mklpart.00 /tmp/mklparts/mklpart.01 .wt/mkl3/mklpart.02 | tar -C /tmp/mkl -xJf - || exit 1
export CONVSEL_MKL_RT=/tmp/mkl/libmkl_rt.so.3 CONVSEL_GEMM=mkl
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 PYTHONUNBUFFERED=1 taskset -c 4,5 python3"
ALG="--algorithm gemm_1x1 --algorithm im2col_gemm --algorithm winograd --algorithm indirect_gemm"
for round in 1 2; do
  $B benchmarks/cpu.py --threads 2 --repeats 7 --profile-runs 3 --layers .wt/mkl3/layers.json --net resnet50 $ALG --out $OUT/cpu-resnet50-mkl-packed-$round.json > $OUT/cpu-resnet50-mkl-packed-$round.log 2>&1
  echo "resnet50 $round rc $?: $(grep 'geometric mean' $OUT/cpu-resnet50-mkl-packed-$round.log)"
done
$B benchmarks/cpu.py --threads 2 --repeats 7 --profile-runs 3 --layers .wt/mkl3/layers.json --net mobilenet_v2 --net mobilenet_v2_depthwise --algorithm gemm_1x1 --algorithm im2col_gemm --algorithm direct --algorithm indirect_gemm --out $OUT/cpu-mobilenetv2-mkl-packed.json > $OUT/cpu-mobilenetv2-mkl-packed.log 2>&1
echo "mobilenetv2 rc $?: $(grep 'geometric mean' $OUT/cpu-mobilenetv2-mkl-packed.log)"
grep -h "above 1.3x\|depthwise" $OUT/*.log | head -8
tar -C $OUT -czf $OUT/final-logs.tgz $(cd $OUT && ls *.log) && rm $OUT/*.log
