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
// runs in slices of TK channels of one tap (zero-filled past the tap's channels); each slice
// of A and B is staged in local memory, and the next slice is fetched into registers while
// the current one is multiplied.
// DOUBLE_BUFFER: two local buffers, slice t in buffer t % 2, so one barrier per slice: the
// stores of slice t + 1 go to the buffer last read for slice t - 1, which every work-item has
// finished before it passes slice t's barrier. Without it, one buffer and a second barrier
// after the multiply (half the local memory).
// MERGE_KW (unit DX, few channels: the 7x7 RGB stem): the KW taps of a kernel row are one
// tap of KW*C channels, since they lie side by side in an NHWC row; a slice of 8 then holds
// 8 useful values instead of C.
// INDIRECT (indirect_gemm): the offset of each (output pixel, tap)'s input pixel comes from
// an indirection buffer ind[M][KH*KW] built at prepare time (-1: padding) instead of being
// computed from the geometry.
// Split-K (splits > 1): work-group z = batch*splits + s sums only its share of the slices
// and stores raw float partial sums to part[z][M][N]; splitk_reduce adds them up and applies
// the epilogue. It gives small-M, large-reduction layers (batch 1, 7x7 maps) enough groups.
// VW = 4 loads 4 channels of A and 4 columns of B at once as float4 (needs C and N multiples
// of 4, and batch offsets too, so that every such load is 16-byte aligned).
//
// Build options: TM TN TK WM WN VW, KH KW SY SX DY DX, DOUBLE_BUFFER, DATA_*, and either
// EPILOGUE (ACT*, HAS_BIAS: Y in DATA_T) or GEMM_FLOAT_IO (A, B, Y float, Y stored raw:
// Winograd).
// Local size: (TN/WN, TM/WM, 1), fixed by reqd_work_group_size. Global size:
// (ceil(N/TN)*TN/WN, ceil(M/TM)*TM/WM, batches*splits).

#define RTM (TM / WM)                 // work-items along M
#define RTN (TN / WN)                 // work-items along N
#define NT (RTM * RTN)
#define NVA (TM * TK / VW)            // vectors of A per slice
#define NVB (TK * TN / VW)
#define LA ((NVA + NT - 1) / NT)      // A vectors each work-item loads per slice
#define LB ((NVB + NT - 1) / NT)
#define PADL 4                        // keeps float4 rows aligned, spreads the stores' banks
#if defined(DOUBLE_BUFFER)
#define NBUF 2                        // local buffers the slices alternate between
#else
#define NBUF 1
#endif

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

#if defined(MERGE_KW) && VW != 1
#error "MERGE_KW gathers one value at a time (a merged row is not 4-aligned): VW must be 1"
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

// Only INDIRECT takes the indirection buffer (PoCL 3.0's CPU device crashes generating code
// for the MERGE_KW kernel when it has an unused global pointer argument).
#if defined(INDIRECT)
#define IND_PARAM __global const int* ind,
#else
#define IND_PARAM
#endif

__kernel __attribute__((reqd_work_group_size(RTN, RTM, 1)))
void implicit_gemm(__global const A_T* x, __global const A_T* w, __global const DATA_T* bias,
                   __global Y_T* y, __global float* part, IND_PARAM int M, int N, int C,
                   int H, int W,
                   int OH, int OW, int PT, int PL, int ldy, int a_batch, int b_batch,
                   int y_batch, int bias_batch, int splits) {
    __local float As[NBUF][TK][TM + PADL];
    __local float Bs[NBUF][TK][TN + PADL];

    const int tx = get_local_id(0);
    const int ty = get_local_id(1);
    const int tid = ty * RTN + tx;
    const int n0 = get_group_id(0) * TN;
    const int m0 = get_group_id(1) * TM;
    const int batch = get_group_id(2) / splits;
    const int split = get_group_id(2) - batch * splits;
    x += batch * a_batch;
    w += batch * b_batch;

#if defined(MERGE_KW)
    const int TAPS = KH;
    const int CR = KW * C;            // channels of one (merged) tap
    const int ROW = W * C;            // elements of one input row
#else
    const int TAPS = KH * KW;
    const int CR = C;
#endif
    const int CS = (CR + TK - 1) / TK;                  // slices per tap
    const int slices = TAPS * CS;
    const int t_begin = (int)(((long)slices * split) / splits);
    const int t_end = (int)(((long)slices * (split + 1)) / splits);

    // The A vectors this work-item gathers: the same rows and channel offsets every slice,
    // so the pixel of each row is decoded once. a_iy = -2^30 marks a row past M.
    int a_row[LA], a_k[LA], a_pix[LA], a_iy[LA], a_ix[LA];
    for (int l = 0; l < LA; ++l) {
        const int v = tid + l * NT;
        const int row = v / (TK / VW);
        a_row[l] = row;
        a_k[l] = (v - row * (TK / VW)) * VW;
        const int m = m0 + row;
#if defined(INDIRECT)
        a_pix[l] = (v < NVA && m < M) ? m : -1;         // the row of ind to read
        a_iy[l] = a_ix[l] = 0;
#else
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
#endif
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

    VEC_T pa[LA], pb[LB];             // the slice in flight, global -> registers -> local
#define FETCH(t)                                                                           \
    {                                                                                      \
        const int tap = (t) / CS;                                                          \
        const int c0 = ((t) - tap * CS) * TK;                                              \
        FETCH_A(tap, c0)                                                                   \
        for (int l = 0; l < LB; ++l) {                                                     \
            const int c = c0 + b_k[l];                                                     \
            const int col = n0 + b_col[l];                                                 \
            pb[l] = VZERO;                                                                 \
            if (b_k[l] < TK && c < CR && col < N) pb[l] = VLOADB(w, (tap * CR + c) * N + col); \
        }                                                                                  \
    }
#if defined(INDIRECT)
#define FETCH_A(tap, c0)                                                                   \
        for (int l = 0; l < LA; ++l) {                                                     \
            const int c = (c0) + a_k[l];                                                   \
            pa[l] = VZERO;                                                                 \
            if (a_pix[l] >= 0 && c < C) {                                                  \
                const int off = ind[a_pix[l] * (KH * KW) + (tap)];                         \
                if (off >= 0) pa[l] = VLOADA(x, off + c);                                  \
            }                                                                              \
        }
#elif defined(MERGE_KW)
#define FETCH_A(tap, c0)                                                                   \
        for (int l = 0; l < LA; ++l) {                                                     \
            const int iy = a_iy[l] + (tap) * DY;                                           \
            const int c = (c0) + a_k[l];                                                   \
            const int pos = a_ix[l] * C + c;                                               \
            pa[l] = VZERO;                                                                 \
            if (iy >= 0 && iy < H && c < CR && pos >= 0 && pos < ROW)                      \
                pa[l] = LOADA(x, (a_pix[l] + iy * W) * C + pos);                           \
        }
#else
#define FETCH_A(tap, c0)                                                                   \
        const int ti = (tap) / KW;                                                         \
        const int tj = (tap) - ti * KW;                                                    \
        for (int l = 0; l < LA; ++l) {                                                     \
            const int iy = a_iy[l] + ti * DY;                                              \
            const int ix = a_ix[l] + tj * DX;                                              \
            const int c = (c0) + a_k[l];                                                   \
            pa[l] = VZERO;                                                                 \
            if (iy >= 0 && iy < H && ix >= 0 && ix < W && c < C)                           \
                pa[l] = VLOADA(x, (a_pix[l] + iy * W + ix) * C + c);                       \
        }
#endif

    if (t_begin < t_end) FETCH(t_begin)
    int cur = 0;                      // the local buffer of slice t (always 0 with one)
    for (int t = t_begin; t < t_end; ++t) {
        for (int l = 0; l < LA; ++l)
            if (tid + l * NT < NVA)
                for (int e = 0; e < VW; ++e) As[cur][a_k[l] + e][a_row[l]] = LANE(pa[l], e);
        for (int l = 0; l < LB; ++l) {
            if (b_k[l] >= TK) continue;
#if VW == 4
            vstore4(pb[l], 0, &Bs[cur][b_k[l]][b_col[l]]);
#else
            Bs[cur][b_k[l]][b_col[l]] = pb[l];
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (t + 1 < t_end) FETCH(t + 1)
        for (int kk = 0; kk < TK; ++kk) {
            float a[WM], b[WN];
            for (int q = 0; q < WM / 4; ++q) {
                const float4 v = vload4(0, &As[cur][kk][q * (RTM * 4) + ty * 4]);
                a[q * 4] = v.s0; a[q * 4 + 1] = v.s1; a[q * 4 + 2] = v.s2; a[q * 4 + 3] = v.s3;
            }
            for (int q = 0; q < WN / 4; ++q) {
                const float4 v = vload4(0, &Bs[cur][kk][q * (RTN * 4) + tx * 4]);
                b[q * 4] = v.s0; b[q * 4 + 1] = v.s1; b[q * 4 + 2] = v.s2; b[q * 4 + 3] = v.s3;
            }
            for (int i = 0; i < WM; ++i)
                for (int j = 0; j < WN; ++j) acc[i][j] = mad(a[i], b[j], acc[i][j]);
        }
#if NBUF == 2
        cur ^= 1;
#else
        barrier(CLK_LOCAL_MEM_FENCE);   // the next slice's stores overwrite this one
#endif
    }

    if (splits > 1) part += (long)get_group_id(2) * M * N;
    else y += batch * y_batch;
    for (int i = 0; i < WM; ++i) {
        const int m = m0 + (i / 4) * (RTM * 4) + ty * 4 + (i % 4);
        if (m >= M) continue;
        for (int j = 0; j < WN; ++j) {
            const int col = n0 + (j / 4) * (RTN * 4) + tx * 4 + (j % 4);
            if (col >= N) continue;
            if (splits > 1) {
                part[m * N + col] = acc[i][j];
                continue;
            }
#if defined(GEMM_FLOAT_IO)
            y[m * ldy + col] = acc[i][j];
#else
            finish_store(acc[i][j], bias, batch * bias_batch + col, y, m * ldy + col);
#endif
        }
    }
}
