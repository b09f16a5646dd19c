// Direct convolution, NHWC in and out, grouped and dilated included.
//
// Weights are [KH][KW][C/G][K] (K fastest), so the TK output channels of a work item are
// contiguous. A work item computes TK channels x TW output columns of one output row;
// TK divides K/G whenever G > 1, so a block never straddles two groups.
// Build options: KH KW SY SX DY DX TK TW, ACT*, DATA_*, HAS_BIAS.
// Global size: (ceil(K/TK), ceil(OW/TW), N*OH).

__kernel void direct_conv(__global const DATA_T* x, __global const DATA_T* w,
                          __global const DATA_T* bias, __global DATA_T* y,
                          int H, int W, int C, int K, int OH, int OW, int NOH,
                          int PT, int PL, int CG, int KG) {
    const int k0 = get_global_id(0) * TK;
    const int ox0 = get_global_id(1) * TW;
    const int noy = get_global_id(2);
    if (k0 >= K || ox0 >= OW || noy >= NOH) return;
    const int n = noy / OH;
    const int oy = noy - n * OH;
    const int cbase = (k0 / KG) * CG;        // first input channel of this block's group

    float acc[TW][TK];
    for (int u = 0; u < TW; ++u)
        for (int t = 0; t < TK; ++t) acc[u][t] = 0.0f;

    for (int i = 0; i < KH; ++i) {
        const int iy = oy * SY - PT + i * DY;
        if (iy < 0 || iy >= H) continue;
        const int row = (n * H + iy) * W;
        for (int j = 0; j < KW; ++j) {
            int xoff[TW];
            for (int u = 0; u < TW; ++u) {
                const int ix = (ox0 + u) * SX - PL + j * DX;
                // -1 marks padding (and columns past OW, whose results are not stored)
                xoff[u] = (ix >= 0 && ix < W) ? (row + ix) * C + cbase : -1;
            }
            const int wrow = (i * KW + j) * CG;
            for (int c = 0; c < CG; ++c) {
                COMPUTE_T wv[TK];
                const int wbase = (wrow + c) * K + k0;
                for (int t = 0; t < TK; ++t) wv[t] = (k0 + t < K) ? LOAD(w, wbase + t) : ZERO;
                for (int u = 0; u < TW; ++u) {
                    if (xoff[u] < 0) continue;
                    const COMPUTE_T xv = LOAD(x, xoff[u] + c);
                    for (int t = 0; t < TK; ++t) acc[u][t] += xv * wv[t];
                }
            }
        }
    }

    for (int u = 0; u < TW; ++u) {
        if (ox0 + u >= OW) break;
        const int obase = (noy * OW + ox0 + u) * K + k0;
        for (int t = 0; t < TK; ++t)
            if (k0 + t < K) finish_store(acc[u][t], bias, k0 + t, y, obase + t);
    }
}
