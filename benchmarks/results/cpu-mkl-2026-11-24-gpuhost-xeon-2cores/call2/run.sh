#!/bin/bash
# device: oneMKL GEMM vs numpy's OpenBLAS, ResNet-50 b1 on the quiet host (2 pinned cores)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/mkl && cat /tmp/mklparts/mklpart.00 /tmp/mklparts/mklpart.01 .wt/mkl3/mklpart.02 | tar -C /tmp/mkl -xJf - || exit 1
ls -la /tmp/mkl; ldconfig -p | grep -i gomp
export CONVSEL_MKL_RT=/tmp/mkl/libmkl_rt.so.3
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 PYTHONUNBUFFERED=1 taskset -c 4,5 python3"
CONVSEL_GEMM=mkl $B -c "
from convsel.backends.numpy import blas, device_identity
from convsel import threads
print(blas.describe()); print(device_identity()); print(threads.current())" || exit 1
ALG="--algorithm gemm_1x1 --algorithm im2col_gemm --algorithm winograd --algorithm indirect_gemm"
for round in 1 2; do
  for v in bands plain; do
    start=$(date +%s); extra=""; [ $v = bands ] && extra="--bands"
    CONVSEL_GEMM=mkl $B benchmarks/cpu.py --threads 2 --repeats 7 --profile-runs 0 $extra --layers .wt/mkl3/layers.json --net resnet50 $ALG --out $OUT/cpu-resnet50-mkl-$v-$round.json > $OUT/r50-mkl-$v-$round.log 2>&1
    echo "mkl $v round $round: rc $? $(( $(date +%s) - start )) s; $(grep 'geometric mean' $OUT/r50-mkl-$v-$round.log)"
  done
done
for g in mkl numpy; do
  CONVSEL_GEMM=$g $B benchmarks/cpu.py --threads 2 --repeats 7 --profile-runs 0 --layers .wt/mkl3/layers.json --net mobilenet_v2 --out $OUT/cpu-mobilenetv2-$g.json > $OUT/mnv2-$g.log 2>&1
  echo "mobilenet_v2 $g rc $?: $(grep 'geometric mean' $OUT/mnv2-$g.log)"
done
tar -C $OUT -czf $OUT/logs.tgz $(cd $OUT && ls *.log) && rm $OUT/*.log
# (run in session 5 with the code of then: blas.describe() is gemm.describe() now)
