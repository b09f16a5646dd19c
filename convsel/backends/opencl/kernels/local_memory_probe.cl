// Whether a work-group may declare LOCAL_BYTES of local memory as a static __local array
// (implicit_gemm_mma.local_memory_limit): NVIDIA's OpenCL reports 48 KiB
// (CL_DEVICE_LOCAL_MEM_SIZE) and refuses a larger dynamic __local argument, but on the H100 it
// built and ran static arrays of up to 200 KiB (benchmarks/gpu_local_memory.py). Every word is
// written, then read back by another work-item: out[i] = sum of (3 j + 1) over the words j
// that work-item i reads, which the host checks.
// One work-group of 256 work-items.
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void local_memory_probe(__global uint* out) {
    __local uint buf[LOCAL_BYTES / 4];
    const uint words = LOCAL_BYTES / 4;
    const uint tid = get_local_id(0);
    for (uint i = tid; i < words; i += 256u) buf[i] = i * 3u + 1u;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint s = 0u;
    for (uint i = tid; i < words; i += 256u) s += buf[words - 1u - i];
    out[tid] = s;
}
