#!/bin/bash
# device: benchmarks/cpu.py with oneMKL (numpy backend) and oneDNN (onednn backend) on the quiet
# host (2 pinned cores): ResNet-50 twice, then MobileNetV2 (both nets)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .wt/stems/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/mkl && cat /tmp/mklparts/mklpart.00 /tmp/mklparts/mklpart.01 .wt/mkl3/mklpart.02 | tar -C /tmp/mkl -xJf - || exit 1
export CONVSEL_MKL_RT=/tmp/mkl/libmkl_rt.so.3 CONVSEL_GEMM=mkl
mkdir -p /tmp/dnnl && xz -dc /tmp/dnnlpart/libdnnl.xz > /tmp/dnnl/libdnnl.so.3 || exit 1
export CONVSEL_DNNL_LIB=/tmp/dnnl/libdnnl.so.3
B="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 PYTHONUNBUFFERED=1 taskset -c 4,5 python3"
$B -c "import convsel.backends.onednn as o, convsel.backends.numpy.gemm as g; print(o.available(), g.describe())"
L=.wt/dnnlrun/layers.json
ALG="--algorithm gemm_1x1 --algorithm im2col_gemm --algorithm winograd --algorithm indirect_gemm --algorithm direct@onednn"
for round in 1 2; do
  $B benchmarks/cpu.py --threads 2 --repeats 7 --profile-runs 2 --layers $L --net resnet50 --backend numpy --backend onednn $ALG --out $OUT/cpu-resnet50-onednn-$round.json > $OUT/cpu-resnet50-onednn-$round.log 2>&1
  echo "resnet50 $round rc $?: $(grep 'geometric mean' $OUT/cpu-resnet50-onednn-$round.log)"
done
$B benchmarks/cpu.py --threads 2 --repeats 7 --profile-runs 2 --layers $L --net mobilenet_v2 --net mobilenet_v2_depthwise --backend numpy --backend onednn --algorithm gemm_1x1 --algorithm im2col_gemm --algorithm direct --algorithm indirect_gemm --out $OUT/cpu-mobilenetv2-onednn.json > $OUT/cpu-mobilenetv2-onednn.log 2>&1
echo "mobilenetv2 rc $?: $(grep 'geometric mean' $OUT/cpu-mobilenetv2-onednn.log)"
grep -h "above 1.3x\|depthwise\|geometric" $OUT/*.log | head -12
tar -C $OUT -czf $OUT/onednn-logs.tgz $(cd $OUT && ls *.log) && rm $OUT/*.log
