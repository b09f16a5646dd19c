// Implicit GEMM: Y[b] (M x N) = A[b] (M x R) * B[b] (R x N), where A is never stored: its
// tiles are gathered from the NHWC input straight into local memory (zeros for padding).
//
//   m = (n*OH + oy)*OW + ox          an output pixel         (M = N_img*OH*OW)
//   r = (i*KW + j)*C + c             a kernel tap and channel (R = KH*KW*C)
//   A[m][r] = x[((n*H + oy*SY - PT + i*DY)*W + ox*SX - PL + j*DX)*C + c]
//   B[r][k] = weights as [KH][KW][C][N]
//
// With KH = KW = 1, SY = SX = 1 and H = OH, W = OW it is a plain GEMM (A row-major, lda = C),
// which is how gemm_1x1, im2col_gemm and Winograd's batched GEMM use it too.
//
// A work-group computes a TM x TN tile of Y with (TN/WN) x (TM/WM) work-items, each a
// WM x WN register tile: WM/4 groups of 4 rows spaced TM/(WM/4) apart (so that the float4
// reads of local memory across a warp are consecutive), the same for columns. The reduction
// runs tap by tap and, within a tap, TK channels at a time (zero-filled past C), so no
// division by C is needed in the loop; each TK slice of A and B is staged in local memory.
// VW = 4 loads 4 channels of A and 4 columns of B at once as float4 (needs C and N multiples
// of 4, and batch offsets too, so that every such load is 16-byte aligned).
//
// Build options: TM TN TK WM WN VW, KH KW SY SX DY DX, DATA_*, and either EPILOGUE (ACT*,
// HAS_BIAS: Y in DATA_T) or GEMM_FLOAT_IO (A, B, Y float, Y stored raw: Winograd).
// Local size: (TN/WN, TM/WM, 1), fixed by reqd_work_group_size. Global size:
// (ceil(N/TN)*TN/WN, ceil(M/TM)*TM/WM, batches).

#define RTM (TM / WM)                 // work-items along M
#define RTN (TN / WN)                 // work-items along N
#define NT (RTM * RTN)
#define NVA (TM * TK / VW)            // vectors of A per slice
#define NVB (TK * TN / VW)
#define LA ((NVA + NT - 1) / NT)      // A vectors each work-item loads per slice
#define LB ((NVB + NT - 1) / NT)
#define PADL 4                        // keeps float4 rows aligned, spreads the stores' banks

#if defined(GEMM_FLOAT_IO)
#define A_T float
#define Y_T float
#define LOADA(p, i) ((p)[(i)])
#define LOADA4(p, i) (*(__global const float4*)((p) + (i)))
#define LOADB LOADA
#define LOADB4 LOADA4
#else
#define A_T DATA_T
#define Y_T DATA_T
#define LOADA(p, i) ((float)LOAD(p, i))
#if defined(DATA_F16) && !defined(HALF_NATIVE)
#define LOADA4(p, i) vload_half4(0, (p) + (i))
#elif defined(DATA_F16)
#define LOADA4(p, i) convert_float4(vload4(0, (p) + (i)))
#else
#define LOADA4(p, i) (*(__global const float4*)((p) + (i)))
#endif
#define LOADB LOADA
#define LOADB4 LOADA4
#endif

#if VW == 4
#define VEC_T float4
#define VLOADA(p, i) LOADA4(p, i)
#define VLOADB(p, i) LOADB4(p, i)
#define VZERO ((float4)(0.0f))
#define LANE(v, e) ((e) == 0 ? (v).s0 : (e) == 1 ? (v).s1 : (e) == 2 ? (v).s2 : (v).s3)
#else
#define VEC_T float
#define VLOADA(p, i) LOADA(p, i)
#define VLOADB(p, i) LOADB(p, i)
#define VZERO 0.0f
#define LANE(v, e) (v)
#endif

__kernel __attribute__((reqd_work_group_size(RTN, RTM, 1)))
void implicit_gemm(__global const A_T* x, __global const A_T* w, __global const DATA_T* bias,
                   __global Y_T* y, int M, int N, int C, int H, int W, int OH, int OW,
                   int PT, int PL, int ldy, int a_batch, int b_batch, int y_batch,
                   int bias_batch) {
    __local float As[TK][TM + PADL];
    __local float Bs[TK][TN + PADL];

    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int tid = ty * RTN + tx;
    const int n0 = get_group_id(0) * TN;
    const int m0 = get_group_id(1) * TM;
    const int batch = get_group_id(2);
    x += batch * a_batch;
    w += batch * b_batch;

    // The A vectors this work-item gathers: the same rows and channel offsets every slice,
    // so the pixel of each row is decoded once. iy0 = INT_MIN/2 marks a row past M.
    int a_row[LA], a_k[LA], a_pix[LA], a_iy[LA], a_ix[LA];
    for (int l = 0; l < LA; ++l) {
        const int v = tid + l * NT;
        const int row = v / (TK / VW);
        a_row[l] = row;
        a_k[l] = (v - row * (TK / VW)) * VW;
        const int m = m0 + row;
        if (v < NVA && m < M) {
            const int img = m / (OH * OW);
            const int rest = m - img * (OH * OW);
            const int oy = rest / OW;
            const int ox = rest - oy * OW;
            a_pix[l] = img * H * W;
            a_iy[l] = oy * SY - PT;
            a_ix[l] = ox * SX - PL;
        } else {
            a_pix[l] = 0;
            a_iy[l] = -(1 << 30);
            a_ix[l] = 0;
        }
    }
    int b_k[LB], b_col[LB];
    for (int l = 0; l < LB; ++l) {
        const int v = tid + l * NT;
        b_k[l] = v < NVB ? v / (TN / VW) : TK;           // TK: not a vector of the tile
        b_col[l] = (v - (v / (TN / VW)) * (TN / VW)) * VW;
    }

    float acc[WM][WN];
    for (int i = 0; i < WM; ++i)
        for (int j = 0; j < WN; ++j) acc[i][j] = 0.0f;

    for (int tap = 0; tap < KH * KW; ++tap) {
        const int ti = tap / KW;
        const int tj = tap - ti * KW;
        for (int c0 = 0; c0 < C; c0 += TK) {
            for (int l = 0; l < LA; ++l) {
                const int iy = a_iy[l] + ti * DY;
                const int ix = a_ix[l] + tj * DX;
                const int c = c0 + a_k[l];
                VEC_T v = VZERO;
                if (iy >= 0 && iy < H && ix >= 0 && ix < W && c < C) {
                    const int at = (a_pix[l] + iy * W + ix) * C + c;
#if VW == 4
                    v = VLOADA(x, at);
#else
                    v = LOADA(x, at);
#endif
                }
                if (tid + l * NT < NVA)
                    for (int e = 0; e < VW; ++e) As[a_k[l] + e][a_row[l]] = LANE(v, e);
            }
            for (int l = 0; l < LB; ++l) {
                if (b_k[l] >= TK) continue;
                const int c = c0 + b_k[l];
                const int col = n0 + b_col[l];
                VEC_T v = VZERO;
                if (c < C && col < N) v = VLOADB(w, (tap * C + c) * N + col);
#if VW == 4
                vstore4(v, 0, &Bs[b_k[l]][b_col[l]]);
#else
                Bs[b_k[l]][b_col[l]] = v;
#endif
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int kk = 0; kk < TK; ++kk) {
                float a[WM], b[WN];
                for (int q = 0; q < WM / 4; ++q) {
                    const float4 t = vload4(0, &As[kk][q * (RTM * 4) + ty * 4]);
                    a[q * 4] = t.s0; a[q * 4 + 1] = t.s1; a[q * 4 + 2] = t.s2; a[q * 4 + 3] = t.s3;
                }
                for (int q = 0; q < WN / 4; ++q) {
                    const float4 t = vload4(0, &Bs[kk][q * (RTN * 4) + tx * 4]);
                    b[q * 4] = t.s0; b[q * 4 + 1] = t.s1; b[q * 4 + 2] = t.s2; b[q * 4 + 3] = t.s3;
                }
                for (int i = 0; i < WM; ++i)
                    for (int j = 0; j < WN; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }

    y += batch * y_batch;
    for (int i = 0; i < WM; ++i) {
        const int m = m0 + (i / 4) * (RTM * 4) + ty * 4 + (i % 4);
        if (m >= M) continue;
        for (int j = 0; j < WN; ++j) {
            const int col = n0 + (j / 4) * (RTN * 4) + tx * 4 + (j % 4);
            if (col >= N) continue;
#if defined(GEMM_FLOAT_IO)
            y[m * ldy + col] = acc[i][j];
#else
            finish_store(acc[i][j], bias, batch * bias_batch + col, y, m * ldy + col);
#endif
        }
    }
}
