// Indirect GEMM (ACL's INDIRECT / GEMM_CONV2D): y[m][k] = sum_tap sum_c x[ind[m][tap] + c]
// * w[tap][c][k]. The indirection buffer holds, for every output pixel and kernel tap, the
// element offset of the input pixel's channel 0, or -1 where the tap falls in the padding;
// it is built once at prepare time, so no im2col copy is made.
// Build options: KH KW RM RN, ACT*, DATA_*, HAS_BIAS.
// Global size: (ceil(K/RN), ceil(M/RM), 1).

#define TAPS (KH * KW)

__kernel void indirect_gemm(__global const DATA_T* x, __global const int* ind,
                            __global const DATA_T* w, __global const DATA_T* bias,
                            __global DATA_T* y, int M, int K, int C) {
    const int n0 = get_global_id(0) * RN;
    const int m0 = get_global_id(1) * RM;
    if (n0 >= K || m0 >= M) return;

    float acc[RM][RN];
    for (int r = 0; r < RM; ++r)
        for (int t = 0; t < RN; ++t) acc[r][t] = 0.0f;
    int col[RN];
    for (int t = 0; t < RN; ++t) col[t] = min(n0 + t, K - 1);

    for (int tap = 0; tap < TAPS; ++tap) {
        int off[RM];
        for (int r = 0; r < RM; ++r) off[r] = ind[min(m0 + r, M - 1) * TAPS + tap];
        for (int c = 0; c < C; ++c) {
            COMPUTE_T wv[RN];
            const int wrow = (tap * C + c) * K;
            for (int t = 0; t < RN; ++t) wv[t] = LOAD(w, wrow + col[t]);
            for (int r = 0; r < RM; ++r) {
                if (off[r] < 0) continue;
                const COMPUTE_T xv = LOAD(x, off[r] + c);
                for (int t = 0; t < RN; ++t) acc[r][t] += xv * wv[t];
            }
        }
    }

    for (int r = 0; r < RM; ++r) {
        if (m0 + r >= M) break;
        for (int t = 0; t < RN; ++t) {
            if (n0 + t >= K) break;
            finish_store(acc[r][t], bias, n0 + t, y, (m0 + r) * K + n0 + t);
        }
    }
}
