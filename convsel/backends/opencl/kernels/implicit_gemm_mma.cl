// Implicit GEMM on tensor cores: Y (M x N) = A (M x R) * B (R x N) as implicit_gemm.cl
// gathers it (A from the NHWC input, zeros for padding; R = KH*KW*C), multiplied by warps
// with mma.sync (mma.cl): TF32 for F32 data (MATH_TF32), F16 for F16 data (MATH_F16), float
// accumulation either way.
//
//   A[m][r] = x[((n*H + oy*SY - PT + i*DY)*W + ox*SX - PL + j*DX)*C + c],  r = (i*KW + j)*C + c
//   B[r][k] = w[k][r]: the OHWI weights as they come (each output channel's R values are
//             contiguous, which is the "col" operand mma.sync wants)
//
// A work-group of WARPS_M x WARPS_N warps computes a BM x BN tile of Y; each warp a
// (BM/WARPS_M) x (BN/WARPS_N) tile of 16x8 mma fragments. The reduction runs in slices of SW
// words (SW TF32 channels or 2*SW halves) of one tap; each slice of A and of B is staged in
// local memory as rows of SW words, k fastest, their 8-byte chunks swizzled (XOR by the row)
// so that a warp's 64-bit fragment loads hit distinct banks without padding.
// Two ways to stage a slice:
// - registers (ASYNC 0): the next slice is fetched into registers while the current one is
//   multiplied (TF32 words rounded with cvt.rna on the way to local memory); STAGES 1 or 2
//   local buffers (2: one barrier per slice);
// - cp.async (ASYNC 1, UW 4 only): global -> local copies in flight for STAGES - 1 slices ahead
//   (zero-filled for padding and tails), no registers in between; TF32 words are rounded when
//   fragments are loaded. One barrier per slice.
// UW = 4 loads 16 bytes at a time (C a multiple of 4 floats or 8 halves); UW = 1 one word
// (one float, or two halves fetched one by one), for any C. MERGE_KW (UW = 1, unit DX, few
// channels: the 7x7 RGB stem) takes a kernel row's KW taps as one tap of KW*C channels.
// Split-K (splits > 1): group z sums its share of the slices into part[z][M][N]; splitk.cl
// adds them up and applies the epilogue.
//
// Build options: MATH_TF32 | MATH_F16, DATA_F32 | DATA_F16 (storage; halves move as bits),
// BM BN WARPS_M WARPS_N SW STAGES ASYNC UW, KH KW SY SX DY DX, MERGE_KW, ACT*, HAS_BIAS,
// MMA_EMULATE. Local size (32*WARPS_M*WARPS_N, 1, 1), fixed; global size
// (ceil(N/BN)*that, ceil(M/BM), splits).

#define NWARPS (WARPS_M * WARPS_N)
#define NT (32 * NWARPS)
#define WTM (BM / WARPS_M)            // a warp's tile
#define WTN (BN / WARPS_N)
#define FM (WTM / 16)                 // its mma fragments
#define FN (WTN / 8)
#define BKE (SW * ELEMS_PER_WORD)     // channels of a slice
#define UPR (SW / UW)                 // load units per row
#define UE (UW * ELEMS_PER_WORD)      // elements per load unit
#define NUA (BM * UPR)
#define NUB (BN * UPR)
#define LA ((NUA + NT - 1) / NT)      // units each work-item loads per slice
#define LB ((NUB + NT - 1) / NT)
#define STAGE_WORDS ((BM + BN) * SW)

#if WTM % 16 || WTN % 8 || BM % WARPS_M || BN % WARPS_N
#error "each warp's tile must be whole 16x8 fragments"
#endif
#if defined(MERGE_KW) && UW != 1
#error "MERGE_KW gathers one word at a time: UW must be 1"
#endif
#if ASYNC && UW != 4
#error "cp.async copies 16 bytes: ASYNC needs UW 4"
#endif
#if ASYNC && (STAGES < 2 || STAGES > 4)
#error "ASYNC keeps 2 to 4 stages"
#endif
#if !ASYNC && STAGES > 2
#error "the register path has 1 or 2 stages"
#endif

// The swizzle: 8-byte chunk c of row r sits at chunk c ^ SWZ(r). Half a warp's 64-bit
// fragment loads read chunks t + 4 ks (t < 4) of rows g < 4: XOR-ing whole groups of 4 chunks
// by the row puts those 16 loads in 16 different 8-byte bank pairs.
#if SW == 16
#define SWZ(r) ((((r) >> 1) & 1) << 2)       // 64-byte rows: two rows per 128-byte bank line
#elif SW == 32
#define SWZ(r) (((r) & 3) << 2)              // 128-byte rows
#else
#error "SW must be 16 or 32 words"
#endif
#define WORD_AT(r, w) ((r) * SW + (((((w) >> 1) ^ SWZ(r))) << 1) + ((w) & 1))

#if defined(MATH_TF32)
#define ELEM_T float
#else
#define ELEM_T ushort
#endif
#define Y_T DATA_T

#if UW == 4
#define UNIT_T uint4
#define UNIT_ZERO ((uint4)(0u))
#else
#define UNIT_T uint
#define UNIT_ZERO 0u
#endif

// One element of the unit at element offset `off`, as the bits of its word.
#if defined(MATH_TF32)
#define ELEM_BITS(p, off) as_uint((p)[(off)])
#else
#define ELEM_BITS(p, off) ((uint)(p)[(off)])
#endif

// A staged word as the mma wants it: TF32 words copied raw by cp.async are rounded here.
#if ASYNC && defined(MATH_TF32)
#define FRAG(u) to_tf32(as_float(u))
#else
#define FRAG(u) (u)
#endif

#if ASYNC
inline void cp_async16(__local uint* dst, __global const uint* src, int bytes) {
    // bytes < 16: the rest of the 16 bytes is zero-filled (0: padding, past M, N or C)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"((uint)(size_t)dst), "l"((ulong)src), "r"(bytes) : "memory");
}
inline void cp_commit(void) {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
#if STAGES == 2
#define CP_WAIT() asm volatile("cp.async.wait_group 0;" ::: "memory")
#elif STAGES == 3
#define CP_WAIT() asm volatile("cp.async.wait_group 1;" ::: "memory")
#else
#define CP_WAIT() asm volatile("cp.async.wait_group 2;" ::: "memory")
#endif
#endif

// One staged slice: SW/8 k-steps of FM x FN mma fragments into the warp's accumulators.
// `a_row`, `b_row`: the first rows of the warp's A and B fragments for this lane (g), `t4`
// its word pair. Unrolled (the fragments and accumulators must stay in registers), except
// when emulated: unrolling the emulation's barriers only costs the CPU compiler minutes.
inline void multiply_slice(__local const uint* src, int a_row, int b_row, int t4,
                           float acc[FM][FN][4], __local uint* mma_scr, int lane) {
    const int swz = SWZ(a_row);        // rows g, g+8, g+16... share it (multiples of 16 apart)
#if defined(MMA_EMULATE)
#pragma unroll 1
#else
#pragma unroll
#endif
    for (int ks = 0; ks < SW / 8; ++ks) {
        const int pair = ((((4 * ks) ^ swz) + t4) << 1);   // word 2t of k-step ks, swizzled
        uint a[FM][4], b[FN][2];
#if defined(MMA_EMULATE)
#pragma unroll 1
#else
#pragma unroll
#endif
        for (int i = 0; i < FM; ++i) {
            const uint2 lo = *(__local const uint2*)(src + (a_row + i * 16) * SW + pair);
            const uint2 hi = *(__local const uint2*)(src + (a_row + i * 16 + 8) * SW + pair);
            a[i][0] = FRAG(lo.x); a[i][1] = FRAG(hi.x); a[i][2] = FRAG(lo.y);
            a[i][3] = FRAG(hi.y);
        }
#if defined(MMA_EMULATE)
#pragma unroll 1
#else
#pragma unroll
#endif
        for (int j = 0; j < FN; ++j) {
            const uint2 v = *(__local const uint2*)(src + (b_row + j * 8) * SW + pair);
            b[j][0] = FRAG(v.x); b[j][1] = FRAG(v.y);
        }
#if defined(MMA_EMULATE)
#pragma unroll 1
#else
#pragma unroll
#endif
        for (int i = 0; i < FM; ++i)
#if defined(MMA_EMULATE)
#pragma unroll 1
#else
#pragma unroll
#endif
            for (int j = 0; j < FN; ++j)
                MMA(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j][0], b[j][1]);
    }
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void implicit_gemm_mma(__global const ELEM_T* x, __global const ELEM_T* w,
                       __global const DATA_T* bias, __global DATA_T* y,
                       __global float* part, int M, int N, int C, int H, int W, int OH,
                       int OW, int PT, int PL, int splits) {
    __local uint4 smem4[STAGES * STAGE_WORDS / 4];     // uint4: 16-byte aligned rows
    __local uint* smem = (__local uint*)smem4;
#if defined(MMA_EMULATE)
    __local uint mma_scratch[NWARPS * MMA_SCRATCH_WORDS];
#endif
    __local uint* mma_scr = 0;        // each warp's exchange words, emulation only

    const int tid = get_local_id(0);
    const int warp = tid / 32;
    const int lane = tid - warp * 32;
#if defined(MMA_EMULATE)
    mma_scr = mma_scratch + warp * MMA_SCRATCH_WORDS;
#endif
    const int g = lane >> 2, t4 = lane & 3;
    const int wm = warp % WARPS_M, wn = warp / WARPS_M;
    const int n0 = get_group_id(0) * BN;
    const int m0 = get_group_id(1) * BM;
    const int split = get_group_id(2);

#if defined(MERGE_KW)
    const int TAPS = KH;
    const int CR = KW * C;            // channels of one (merged) tap
    const int ROW = W * C;            // elements of one input row
#else
    const int TAPS = KH * KW;
    const int CR = C;
#endif
    const int R = KH * KW * C;
    const int CS = (CR + BKE - 1) / BKE;                // slices per tap
    const int slices = TAPS * CS;
    const int t_begin = (int)(((long)slices * split) / splits);
    const int t_end = (int)(((long)slices * (split + 1)) / splits);

    // The A units this work-item gathers: the same rows and channel offsets every slice, so
    // the pixel of each row is decoded once. a_iy = -2^30 marks a row past M (or no unit).
    // a_word: where the unit goes in a stage (swizzled), -1 for no unit.
    int a_word[LA], a_k[LA], a_pix[LA], a_iy[LA], a_ix[LA];
    for (int l = 0; l < LA; ++l) {
        const int v = tid + l * NT;
        const int row = v / UPR;
        const int unit = v - row * UPR;
        a_word[l] = v < NUA ? WORD_AT(row, unit * UW) : -1;
        a_k[l] = unit * UE;
        const int m = m0 + row;
        a_pix[l] = 0;
        a_iy[l] = -(1 << 30);
        a_ix[l] = 0;
        if (v < NUA && m < M) {
            const int img = m / (OH * OW);
            const int rest = m - img * (OH * OW);
            const int oy = rest / OW;
            const int ox = rest - oy * OW;
            a_pix[l] = img * H * W;
            a_iy[l] = oy * SY - PT;
            a_ix[l] = ox * SX - PL;
        }
    }
    // The B units: output channel n0 + row, its weights from w + b_base (-1: past N).
    int b_word[LB], b_k[LB], b_base[LB];
    for (int l = 0; l < LB; ++l) {
        const int v = tid + l * NT;
        const int row = v / UPR;
        const int unit = v - row * UPR;
        b_word[l] = v < NUB ? BM * SW + WORD_AT(row, unit * UW) : -1;
        b_k[l] = unit * UE;
        b_base[l] = (v < NUB && n0 + row < N) ? (n0 + row) * R : -1;
    }

    float acc[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

    const int a_row = wm * WTM + g;
    const int b_row = BM + wn * WTN + g;
#define COMPUTE(s) multiply_slice(smem + (s) * STAGE_WORDS, a_row, b_row, t4, acc, mma_scr, lane)

#if ASYNC
    // -- cp.async: each unit's 16 bytes go straight to its place in stage s ------------------
#define ISSUE(t, s)                                                                        \
    {                                                                                      \
        const int tap = (t) / CS;                                                          \
        const int c0 = ((t) - tap * CS) * BKE;                                             \
        const int ti = tap / KW;                                                           \
        const int tj = tap - ti * KW;                                                      \
        __local uint* dst = smem + (s) * STAGE_WORDS;                                      \
        for (int l = 0; l < LA; ++l) {                                                     \
            if (a_word[l] < 0) continue;                                                   \
            const int iy = a_iy[l] + ti * DY;                                              \
            const int ix = a_ix[l] + tj * DX;                                              \
            const int c = c0 + a_k[l];                                                     \
            const bool in = iy >= 0 && iy < H && ix >= 0 && ix < W && c < C;               \
            const __global ELEM_T* src = in ? x + (a_pix[l] + iy * W + ix) * C + c : x;    \
            cp_async16(dst + a_word[l], (__global const uint*)src, in ? 16 : 0);           \
        }                                                                                  \
        for (int l = 0; l < LB; ++l) {                                                     \
            if (b_word[l] < 0) continue;                                                   \
            const int c = c0 + b_k[l];                                                     \
            const bool in = b_base[l] >= 0 && c < CR;                                      \
            const __global ELEM_T* src = in ? w + b_base[l] + tap * CR + c : w;            \
            cp_async16(dst + b_word[l], (__global const uint*)src, in ? 16 : 0);           \
        }                                                                                  \
    }
    for (int s = 0; s < STAGES - 1; ++s) {
        if (t_begin + s < t_end) ISSUE(t_begin + s, s)
        cp_commit();
    }
    for (int t = t_begin; t < t_end; ++t) {
        CP_WAIT();                               // this work-item's copies of slice t landed
        barrier(CLK_LOCAL_MEM_FENCE);            // everyone's; and slice t-1 is done with
        const int ahead = t + STAGES - 1;
        if (ahead < t_end) ISSUE(ahead, (ahead - t_begin) % STAGES)
        cp_commit();                             // empty groups too: the count stays exact
        COMPUTE((t - t_begin) % STAGES);
    }
#else
    // -- registers: fetch the next slice while the current one is multiplied ----------------
    UNIT_T pa[LA], pb[LB];

#if defined(MERGE_KW)
#define FETCH_A(tap, c0)                                                                   \
    for (int l = 0; l < LA; ++l) {                                                         \
        const int iy = a_iy[l] + (tap) * DY;                                               \
        const int c = (c0) + a_k[l];                                                       \
        const int pos = a_ix[l] * C + c;                                                   \
        const int base = (a_pix[l] + iy * W) * C + pos;                                    \
        uint bits = 0u;                                                                    \
        if (iy >= 0 && iy < H) {                                                           \
            for (int e = 0; e < ELEMS_PER_WORD; ++e)                                       \
                if (c + e < CR && pos + e >= 0 && pos + e < ROW)                           \
                    bits |= ELEM_BITS(x, base + e) << (16 * e);                            \
        }                                                                                  \
        pa[l] = bits;                                                                      \
    }
#elif UW == 4
#define FETCH_A(tap, c0)                                                                   \
    {                                                                                      \
        const int ti = (tap) / KW;                                                         \
        const int tj = (tap) - ti * KW;                                                    \
        for (int l = 0; l < LA; ++l) {                                                     \
            const int iy = a_iy[l] + ti * DY;                                              \
            const int ix = a_ix[l] + tj * DX;                                              \
            const int c = (c0) + a_k[l];                                                   \
            pa[l] = UNIT_ZERO;                                                             \
            if (iy >= 0 && iy < H && ix >= 0 && ix < W && c < C)                           \
                pa[l] = *(__global const uint4*)(x + (a_pix[l] + iy * W + ix) * C + c);    \
        }                                                                                  \
    }
#else
#define FETCH_A(tap, c0)                                                                   \
    {                                                                                      \
        const int ti = (tap) / KW;                                                         \
        const int tj = (tap) - ti * KW;                                                    \
        for (int l = 0; l < LA; ++l) {                                                     \
            const int iy = a_iy[l] + ti * DY;                                              \
            const int ix = a_ix[l] + tj * DX;                                              \
            const int c = (c0) + a_k[l];                                                   \
            uint bits = 0u;                                                                \
            if (iy >= 0 && iy < H && ix >= 0 && ix < W) {                                  \
                const int base = (a_pix[l] + iy * W + ix) * C + c;                         \
                for (int e = 0; e < ELEMS_PER_WORD; ++e)                                   \
                    if (c + e < C) bits |= ELEM_BITS(x, base + e) << (16 * e);             \
            }                                                                              \
            pa[l] = bits;                                                                  \
        }                                                                                  \
    }
#endif

#if UW == 4
#define FETCH_B(tap, c0)                                                                   \
    for (int l = 0; l < LB; ++l) {                                                         \
        const int c = (c0) + b_k[l];                                                       \
        pb[l] = UNIT_ZERO;                                                                 \
        if (b_base[l] >= 0 && c < CR)                                                      \
            pb[l] = *(__global const uint4*)(w + b_base[l] + (tap) * CR + c);              \
    }
#else
#define FETCH_B(tap, c0)                                                                   \
    for (int l = 0; l < LB; ++l) {                                                         \
        const int c = (c0) + b_k[l];                                                       \
        uint bits = 0u;                                                                    \
        if (b_base[l] >= 0)                                                                \
            for (int e = 0; e < ELEMS_PER_WORD; ++e)                                       \
                if (c + e < CR)                                                            \
                    bits |= ELEM_BITS(w, b_base[l] + (tap) * CR + c + e) << (16 * e);      \
        pb[l] = bits;                                                                      \
    }
#endif

#define FETCH(t)                                                                           \
    {                                                                                      \
        const int tap = (t) / CS;                                                          \
        const int c0 = ((t) - tap * CS) * BKE;                                             \
        FETCH_A(tap, c0)                                                                   \
        FETCH_B(tap, c0)                                                                   \
    }

#if defined(MATH_TF32) && UW == 4
#define TO_WORDS(u) ((uint4)(to_tf32(as_float((u).x)), to_tf32(as_float((u).y)),           \
                             to_tf32(as_float((u).z)), to_tf32(as_float((u).w))))
#elif defined(MATH_TF32)
#define TO_WORDS(u) to_tf32(as_float(u))
#else
#define TO_WORDS(u) (u)
#endif

#if UW == 4
#define PUT(buf, word, u) (*(__local uint4*)((buf) + (word)) = TO_WORDS(u))
#else
#define PUT(buf, word, u) ((buf)[(word)] = TO_WORDS(u))
#endif

#define STORE_STAGE(s)                                                                     \
    {                                                                                      \
        __local uint* dst = smem + (s) * STAGE_WORDS;                                      \
        for (int l = 0; l < LA; ++l)                                                       \
            if (a_word[l] >= 0) PUT(dst, a_word[l], pa[l]);                                \
        for (int l = 0; l < LB; ++l)                                                       \
            if (b_word[l] >= 0) PUT(dst, b_word[l], pb[l]);                                \
    }

    if (t_begin < t_end) {
        FETCH(t_begin)
        STORE_STAGE(0)
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = t_begin; t < t_end; ++t) {
        const int cur = STAGES == 2 ? ((t - t_begin) & 1) : 0;
        const bool more = t + 1 < t_end;
        if (more) FETCH(t + 1)
        COMPUTE(cur);
#if STAGES == 1
        barrier(CLK_LOCAL_MEM_FENCE);
        if (more) STORE_STAGE(0)
#else
        if (more) STORE_STAGE(cur ^ 1)
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif

    if (splits > 1) part += (long)split * M * N;
#pragma unroll
    for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int m = m0 + wm * WTM + i * 16 + g + 8 * (r >> 1);
                const int col = n0 + wn * WTN + j * 8 + 2 * t4 + (r & 1);
                if (m >= M || col >= N) continue;
                if (splits > 1)
                    part[m * N + col] = acc[i][j][r];
                else
                    finish_store(acc[i][j][r], bias, col, y, m * N + col);
            }
        }
    }
}
