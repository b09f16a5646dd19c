// The tensor-core probe (mma.py): one warp multiplies a 16x8-word A by an 8-word x 8 B with
// MMA(), reading and writing its fragments at the places the PTX ISA gives (mma.cl), so the
// answer checks both that the inline PTX builds and that the layout is the one we use.
// A: a[16][8] words, B: b[8][8] words (word slot, column), D: d[16][8] floats.
// One work-group of 32 work-items.

__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void mma_probe(__global const uint* a, __global const uint* b, __global float* d) {
    const int lane = get_local_id(0);
#if defined(MMA_EMULATE)
    __local uint mma_scr[MMA_SCRATCH_WORDS];
#endif
    const int g = lane >> 2, t = lane & 3;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    MMA(acc, a[g * 8 + t], a[(g + 8) * 8 + t], a[g * 8 + t + 4], a[(g + 8) * 8 + t + 4],
        b[t * 8 + g], b[(t + 4) * 8 + g]);
    d[g * 8 + 2 * t] = acc[0];
    d[g * 8 + 2 * t + 1] = acc[1];
    d[(g + 8) * 8 + 2 * t] = acc[2];
    d[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
