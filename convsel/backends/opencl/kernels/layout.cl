// NCHW <-> NHWC for device-resident runs of NCHW problems (the convolutions compute in NHWC).
// Both are one batched transpose of the last two axes: dst[n][b][a] = src[n][a][b], with
// (a, b) = (C, H*W) one way and (H*W, C) the other. A TILE x TILE block goes through local
// memory so that reads and writes are both along rows. ELEM_T is a bit-copy type of the
// element's size (no arithmetic: F16 needs no half support).

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1)))
void swap_last2(__global const ELEM_T* src, __global ELEM_T* dst, int a_len, int b_len) {
    __local ELEM_T tile[TILE][TILE + 1];   // +1: no bank conflicts on the transposed read
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int b0 = get_group_id(0) * TILE, a0 = get_group_id(1) * TILE;
    const size_t plane = (size_t)a_len * b_len;
    src += get_global_id(2) * plane;
    dst += get_global_id(2) * plane;
    if (a0 + ly < a_len && b0 + lx < b_len)
        tile[ly][lx] = src[(size_t)(a0 + ly) * b_len + b0 + lx];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (b0 + ly < b_len && a0 + lx < a_len)
        dst[(size_t)(b0 + ly) * a_len + a0 + lx] = tile[lx][ly];
}
