#!/bin/bash
# One device-machine call for the tensor-core work (issue 27): the probe, the registers and
# spills of the kernel's builds (benchmarks/gpu_mma_registers.py), the tensor-core tests
# (native on the GPU, with their log), whether a work-group gets more than 48 KiB of local
# memory (benchmarks/gpu_local_memory.py), the mma.sync ceiling and benchmarks/gpu.py, each step
# with its own time limit so that one failing step still leaves the others' output.
#
#   [REGISTERS_S=40] [TESTS_K='pytest -k expression'] bash benchmarks/gpu_tensor_cores.sh WHEELS_DIR OUT_DIR [TEST_S] [BENCH_S] \
#       [gpu.py args...]
#
# WHEELS_DIR holds pyopencl and the other wheels the device lacks (benchmarks/NOTES-gpu.md).
set -u
wheels=$1 out=$2 test_s=${3:-240} bench_s=${4:-300}
shift 4 2>/dev/null || shift $#
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheels"/*.whl \
    || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

echo "== probe"
timeout 120 python3 - <<'EOF' 2>&1 | tee "$out/probe.log"
from convsel.backends.opencl import get_runtime, mma
rt = get_runtime()
print(rt, "capability:", mma.device_capability(rt.device).reason)
print("tensor cores:", mma.tensor_cores(rt))
if not mma.tensor_cores(rt).ok:
    for m in mma.MATH_MODES:
        try:
            print(m, mma.run_probe(rt, m))
        except Exception as exc:
            print(m, "FAILED:", exc)
EOF

echo "== registers and spills of the kernel's builds (ptxas, through -cl-nv-verbose)"
timeout $((${REGISTERS_S:-40} + 50)) python3 benchmarks/gpu_mma_registers.py \
    --budget-s "${REGISTERS_S:-40}" --out "$out/registers.txt" 2>&1 \
    | tail -60

# F32 and F16 cases in two processes side by side: building the kernels is most of their
# time, and that runs on the CPU
echo "== tensor-core tests"
tests=tests/backends/opencl/test_opencl_tensor_cores.py
sel=${TESTS_K:+ and ($TESTS_K)}
timeout "$test_s" python3 -m pytest $tests -q -s -p no:cacheprovider -rs -k "not F16$sel" \
    > "$out/tensor-core-tests-f32.log" 2>&1 &
timeout "$test_s" python3 -m pytest $tests -q -s -p no:cacheprovider -rs -k "F16$sel" \
    > "$out/tensor-core-tests-f16.log" 2>&1
wait
cat "$out/tensor-core-tests-f32.log" "$out/tensor-core-tests-f16.log" \
    > "$out/tensor-core-tests.log"
grep -v " ok$" "$out/tensor-core-tests.log" | tail -40
echo "native checks within their bound: $(grep -c ' ok$' "$out/tensor-core-tests.log"), \
beyond: $(grep -c ' FAIL$' "$out/tensor-core-tests.log")"

echo "== local memory beyond the 48 KiB reported"
timeout 60 python3 benchmarks/gpu_local_memory.py --out "$out/local-memory.txt" 2>&1 | tail -16

echo "== benchmark"
timeout "$bench_s" python3 benchmarks/gpu.py --out "$out/gpu.json" "$@" 2>&1 \
    | tee "$out/gpu.log" | tail -60
