// Register-blocked batched GEMM: C[b] = A[b] (M x KD) * B[b] (KD x N), row-major.
//
// A work item computes RM rows x RN columns; ids are bound-checked, so any global size
// (rounded up to a local size by the tuner) works, and no local memory is used.
// Row m of A starts at a_off + b*a_batch + m*lda, unless A_ROWS_STRIDED: then A is an NHWC
// tensor read at every SY-th row and SX-th column (gemm_1x1 with stride), m = (n*OH+oy)*OW+ox.
// EPILOGUE: bias (HAS_BIAS) + activation, C in DATA_T at column c_col + b*c_batch_col;
// otherwise (Winograd) A, B and C are float and C is stored raw.
// Global size: (ceil(N/RN), ceil(M/RM), batches).

#if defined(GEMM_FLOAT_IO)
#define A_T float
#define B_T float
#define LOAD_A(p, i) ((p)[(i)])
#define LOAD_B(p, i) ((p)[(i)])
#define MUL_T float
#else
#define A_T DATA_T
#define B_T DATA_T
#define LOAD_A(p, i) LOAD(p, i)
#define LOAD_B(p, i) LOAD(p, i)
#define MUL_T COMPUTE_T
#endif

__kernel void gemm(__global const A_T* a, __global const B_T* b,
                   __global const DATA_T* bias,
#if defined(EPILOGUE)
                   __global DATA_T* c,
#else
                   __global float* c,
#endif
                   int M, int N, int KD, int lda, int ldb, int ldc,
                   int a_batch, int b_batch, int c_batch, int c_batch_col,
                   int OH, int OW, int H, int W) {
    const int n0 = get_global_id(0) * RN;
    const int m0 = get_global_id(1) * RM;
    const int batch = get_global_id(2);
    if (n0 >= N || m0 >= M) return;

    int arow[RM];
    for (int r = 0; r < RM; ++r) {
        const int m = min(m0 + r, M - 1);     // rows past M are computed but not stored
#if defined(A_ROWS_STRIDED)
        const int n_img = m / (OH * OW);
        const int rest = m - n_img * OH * OW;
        const int oy = rest / OW;
        const int ox = rest - oy * OW;
        arow[r] = ((n_img * H + oy * SY) * W + ox * SX) * lda;
#else
        arow[r] = batch * a_batch + m * lda;
#endif
    }
    int bcol[RN];
    for (int t = 0; t < RN; ++t) bcol[t] = batch * b_batch + min(n0 + t, N - 1);

    float acc[RM][RN];
    for (int r = 0; r < RM; ++r)
        for (int t = 0; t < RN; ++t) acc[r][t] = 0.0f;

    for (int kk = 0; kk < KD; ++kk) {
        MUL_T bv[RN];
        for (int t = 0; t < RN; ++t) bv[t] = LOAD_B(b, bcol[t] + kk * ldb);
        for (int r = 0; r < RM; ++r) {
            const MUL_T av = LOAD_A(a, arow[r] + kk);
            for (int t = 0; t < RN; ++t) acc[r][t] += av * bv[t];
        }
    }

    for (int r = 0; r < RM; ++r) {
        if (m0 + r >= M) break;
        const int obase = batch * c_batch + (m0 + r) * ldc + batch * c_batch_col + n0;
        for (int t = 0; t < RN; ++t) {
            if (n0 + t >= N) break;
#if defined(EPILOGUE)
            finish_store(acc[r][t], bias, batch * c_batch_col + n0 + t, c, obase + t);
#else
            c[obase + t] = acc[r][t];
#endif
        }
    }
}
