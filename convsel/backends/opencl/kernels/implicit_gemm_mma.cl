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
// (BM/WARPS_M) x (BN/WARPS_N) tile of 16x8 mma fragments. WARPS_K > 1 (sliced K): that many
// warps share each warp tile, warp wk multiplying k-steps wk, wk + WARPS_K, ... of every
// slice; their partial sums meet in local memory at the end (more warps per work-group, so
// more to hide latency with, at the same block tile and bytes per mma).
// The reduction runs in slices of SW words (SW TF32 channels or 2*SW halves) of one tap;
// each slice of A and of B is staged in local memory as rows of SW words, k fastest,
// swizzled (XOR by the row, no padding) so that the warps' fragment loads hit distinct
// banks: LDSM 1 (the default), one ldmatrix.x4 per A fragment and per two B fragments, on
// 16-byte chunks; LDSM 0, 64-bit loads of word pairs on 8-byte chunks (kept for the ablation
// in benchmarks/gpu.py).
// Two ways to stage a slice:
// - registers (ASYNC 0): the next slice is fetched into registers while the current one is
//   multiplied (TF32 words rounded with cvt.rna on the way to local memory); STAGES 1 or 2
//   local buffers (2: one barrier per slice);
// - cp.async (ASYNC 1, UW 4 only): global -> local copies in flight for STAGES - 1 slices ahead
//   (zero-filled for padding and tails), no registers in between; TF32 words are rounded when
//   fragments are loaded. One barrier per slice.
// UW = 4 loads 16 bytes at a time (C a multiple of 4 floats or 8 halves); UW = 1 one word
// (one float, or two halves fetched one by one), for any C. FLAT (UW = 1, few channels: the
// 7x7 RGB stem) runs the whole reduction r = (i*KW + j)*C + c as one tap of R = KH*KW*C
// elements, zero-padded to whole slices only at its end (R = 147 takes 160 in slices of 16 or
// 32 channels, where one tap per slice took 7*32 or 7*64): each element's tap is decoded from
// r, with C known at build time (CIN) so that the divisions are by constants.
// FLAT with CIN = UE (the stem's input padded to 4 or 8 channels by pad_channels below, its
// weights with zeros on the host; v8): each load unit is one tap's whole pixel, one 8- or
// 16-byte load (UW 2 or 4) with one bounds check, instead of word-by-word element gathers;
// cp.async copies it (UW * 4 bytes).
// GROUP_M (v8): the work-groups' linear order visits GROUP_M block rows (M) for each block
// column (N) before moving on, so that neighbouring work-groups share B's and A's tiles in L2.
// Split-K (splits > 1): group z sums its share of the slices into part[z][M][N]; splitk.cl
// adds them up and applies the epilogue.
// BATCHED: group z runs the z-th of a batch of GEMMs instead (a_batch, b_batch, y_batch:
// the elements between consecutive As, Bs and Ys; 0 and unused otherwise).
//
// Build options: MATH_TF32 | MATH_F16, DATA_F32 | DATA_F16 (storage; halves move as bits),
// BM BN WARPS_M WARPS_N SW STAGES ASYNC UW LDSM, KH KW SY SX DY DX, FLAT and CIN, ACT*, HAS_BIAS,
// WARPS_K, MMA_EMULATE (mma.sync, ldmatrix and cp.async done by plain local-memory code),
// and the specialisations NO_BOUNDS (a 1x1 kernel without padding: every row's pixel is in
// the image, so only rows past M are checked), C_WHOLE (C a multiple of a slice's channels:
// no channel check) and ISSUE_AT (cp.async: the k-step of the current slice after which the
// next slice's copies are issued; 0 before its first); ROLL_K (the k-steps of a slice not
// unrolled); TAP_MASK (cp.async: each A row's pixel bounds found once per tap, kept as bits).
// Local size (32*WARPS_M*WARPS_N*WARPS_K, 1, 1), fixed; global size
// (ceil(N/BN)*that, ceil(M/BM), splits).

#if !defined(WARPS_K)
#define WARPS_K 1
#endif
#define NWARPS (WARPS_M * WARPS_N * WARPS_K)
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
#if (SW / 8) % WARPS_K
#error "WARPS_K must divide a slice's k-steps"
#endif
// local memory: the stages, or (sliced K) the partial sums of warps wk > 0, if more
#define SUM_WORDS ((WARPS_K - 1) * BM * BN)
#define SMEM_WORDS (STAGES * STAGE_WORDS > SUM_WORDS ? STAGES * STAGE_WORDS : SUM_WORDS)

// STAGE_OUT: the output tile leaves through local memory, in 16-byte runs of OUT_VEC values
// (rows padded by 16 bytes), where it fits in the local memory the stages already take.
#if !defined(STAGE_OUT)
#define STAGE_OUT 1
#endif
#if defined(DATA_F16)
#define OUT_VEC 8
#define OUT_ROW (BN + 8)
#define OUT_WORDS (BM * OUT_ROW / 2)
#else
#define OUT_VEC 4
#define OUT_ROW (BN + 4)
#define OUT_WORDS (BM * OUT_ROW)
#endif
#if STAGE_OUT && OUT_WORDS <= SMEM_WORDS
#define OUT_STAGED 1
#else
#define OUT_STAGED 0
#endif
#if defined(FLAT) && !defined(CIN)
#error "FLAT needs C at build time (CIN)"
#endif
// FLAT_UNIT: the padded stem, a load unit holds exactly one tap's channels
#if defined(FLAT) && UW * ELEMS_PER_WORD == CIN
#define FLAT_UNIT 1
#elif defined(FLAT) && UW != 1
#error "FLAT gathers one word at a time (UW 1), or one tap's whole pixel (UW * elements = CIN)"
#endif
#if ASYNC && UW != 4 && !(defined(FLAT_UNIT) && UW == 2)
#error "cp.async copies 16 bytes (UW 4), or a padded stem's 8-byte pixels (UW 2)"
#endif
#if ASYNC && (STAGES < 2 || STAGES > 4)
#error "ASYNC keeps 2 to 4 stages"
#endif
#if !ASYNC && STAGES > 2
#error "the register path has 1 or 2 stages"
#endif

#if !defined(LDSM)
#define LDSM 1
#endif
#if !defined(CP_L1)
#define CP_L1 1                       // cp.async.ca (through L1) rather than .cg (L2 only)
#endif
#if !defined(CP_L1_B)
#define CP_L1_B CP_L1                 // the same for B (the weights), unless named apart
#endif
#if !defined(FRAG2)
#define FRAG2 0
#endif
#if !defined(ISSUE_AT)
#define ISSUE_AT 0
#endif
#if defined(NO_BOUNDS) && (KH != 1 || KW != 1 || defined(FLAT))
#error "NO_BOUNDS: a 1x1 kernel without padding"
#endif
// the channel check of a unit: none where C is whole slices
#if defined(C_WHOLE)
#define CHANNEL_IN(c, limit) true
#else
#define CHANNEL_IN(c, limit) ((c) < (limit))
#endif
// whether row l of this work-item's A units reads its pixel at the cursor's tap
#if defined(NO_BOUNDS)
#define A_PIXEL_IN(l) (a_base[l] >= 0)
#else
#define A_PIXEL_IN(l) ((uint)(A_IY(l) + cti * DY) < (uint)H && (uint)(A_IX(l) + ctj * DX) < (uint)W)
#endif
#if defined(B_ROUNDED) && !defined(MATH_TF32)
#error "B_ROUNDED: TF32 weights rounded on the host"
#endif

// The swizzle (no padding: rows are SW words). LDSM 1, fragments by ldmatrix: 16-byte chunk
// c of row r sits at chunk c ^ SWZ(r). One ldmatrix matrix reads the same chunk of 8
// consecutive rows (from a multiple of 8), and a quarter-warp's 16-byte stores fill 128
// bytes of consecutive rows: XOR-ing by the row puts either in 8 different 16-byte bank groups.
// LDSM 0, fragments by 64-bit loads of word pairs 2t, 2t+1 (see mma.cl): 8-byte chunk c of
// row r at c ^ SWZ(r), whole groups of 4 chunks XOR-ed, so that half a warp's loads (chunks
// t + 4 ks of rows g < 4) hit 16 different 8-byte bank pairs. Either way SWZ(r + 8) = SWZ(r).
#if LDSM
#if SW == 16
#define SWZ(r) (((r) >> 1) & 3)              // 64-byte rows: two rows per 128-byte bank line
#elif SW == 32 || SW == 64
#define SWZ(r) ((r) & 7)                     // 128-byte rows (256: each half as one)
#else
#error "SW must be 16, 32 or 64 words"
#endif
#define WORD_AT(r, w) ((r) * SW + ((((w) >> 2) ^ SWZ(r)) << 2) + ((w) & 3))
#else
#if SW == 16
#define SWZ(r) ((((r) >> 1) & 1) << 2)
#elif SW == 32
#define SWZ(r) (((r) & 3) << 2)
#else
#error "SW must be 16 or 32 words (64: ldmatrix only)"
#endif
#define WORD_AT(r, w) ((r) * SW + (((((w) >> 1) ^ SWZ(r))) << 1) + ((w) & 1))
#endif

// Staging: a work-item loads the unit at word u_col of rows u_row, u_row + RSTEP, ... of A
// (and of B): the same column every slice and row, so the unit's place in a stage is its
// first row's plus a constant where RSTEP is a multiple of 8 (the swizzle repeats).
#define RSTEP (NT / UPR)
#if NT % UPR
#error "a work-group's work-items must cover whole rows of load units"
#endif
#if RSTEP % 8 == 0
#define UNIT_WORD(row0, l) (WORD_AT((row0), u_col) + (l) * RSTEP * SW)
#else
#define UNIT_WORD(row0, l) WORD_AT((row0) + (l) * RSTEP, u_col)
#endif
#define A_UNIT_OK(l) (BM % RSTEP == 0 || u_row + (l) * RSTEP < BM)
#define B_UNIT_OK(l) (BN % RSTEP == 0 || u_row + (l) * RSTEP < BN)

#if defined(MATH_TF32)
#define ELEM_T float
#else
#define ELEM_T ushort
#endif
#define Y_T DATA_T

#if UW == 4
#define UNIT_T uint4
#define UNIT_ZERO ((uint4)(0u))
#elif UW == 2
#define UNIT_T uint2
#define UNIT_ZERO ((uint2)(0u))
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

// A staged word as the mma wants it: TF32 words copied raw by cp.async are rounded here;
// B_ROUNDED: the weights were rounded to TF32 once, on the host, so B's words are not.
#if ASYNC && defined(MATH_TF32)
#define FRAG(u) to_tf32(as_float(u))
#else
#define FRAG(u) (u)
#endif
#if ASYNC && defined(MATH_TF32) && !defined(B_ROUNDED)
#define FRAG_B(u) to_tf32(as_float(u))
#else
#define FRAG_B(u) (u)
#endif

#if ASYNC && defined(MMA_EMULATE)
// cp.async emulated: the copy done at once (0 bytes: zeros), nothing left to wait for; the
// barrier after CP_WAIT() still orders it before any warp reads the stage.
static inline void cp_async16(__local uint* dst, __global const uint* src, int bytes,
                              const int l1) {
    *(__local UNIT_T*)dst = bytes ? *(__global const UNIT_T*)src : UNIT_ZERO;
}
static inline void cp_commit(void) {}
#define CP_WAIT() ((void)0)
#elif ASYNC
static inline void cp_async16(__local uint* dst, __global const uint* src, int bytes,
                              const int l1) {
    // bytes < 16: the rest of the 16 bytes is zero-filled (0: padding, past M, N or C);
    // l1 (a build-time constant): through L1 (.ca) or L2 only (.cg)
#if defined(DIAG_NO_LOADS)
    // diagnosis only (benchmarks/gpu.py --diagnose; wrong results): no copies at all
#else
#if UW == 2
    // the padded stem's 8-byte pixels: .cg takes only 16-byte copies
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;"
                 :: "r"((uint)(size_t)dst), "l"((ulong)src), "r"(bytes) : "memory");
#else
    if (l1)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;"
                     :: "r"((uint)(size_t)dst), "l"((ulong)src), "r"(bytes) : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"((uint)(size_t)dst), "l"((ulong)src), "r"(bytes) : "memory");
#endif
#endif
}
static inline void cp_commit(void) {
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

#if LDSM
// The row lane L names for ldmatrix at k-step ks (16-byte chunks 2 ks and 2 ks + 1 hold its
// 8 words), as a word offset in the stage. A fragment i (LDSM_X4 -> a0..a3): rows 0-7 words
// 0-3, rows 8-15 words 0-3, rows 0-7 words 4-7, rows 8-15 words 4-7 (mma.cl's a0..a3).
// B fragments j, j+1 (LDSM_X4 -> b[j][0], b[j][1], b[j+1][0], b[j+1][1]): columns 0-7 words
// 0-3, 0-7 words 4-7, 8-15 words 0-3, 8-15 words 4-7. Fragment i (j) is 16 i (8 j) rows on,
// which keeps the swizzle: its offsets are the first one's plus 16 i SW (8 j SW) words.
#define FRAG_WORD(row, chunk) ((row) * SW + (((chunk) ^ SWZ(row)) << 2))
#define A_LANE_WORD(L, ks) FRAG_WORD(a_row + ((L) & 7) + ((((L) >> 3) & 1) << 3),              \
                                     2 * (ks) + ((L) >> 4))
#define B_LANE_WORD(L, ks) FRAG_WORD(b_row + ((L) & 7) + (((L) >> 4) << 3),                    \
                                     2 * (ks) + (((L) >> 3) & 1))
#endif

#if defined(MMA_EMULATE)
#define UNROLL _Pragma("unroll 1")
#else
#define UNROLL _Pragma("unroll")
#endif
// ROLL_K: a slice's k-steps as a loop rather than unrolled, so that ptxas cannot hoist the
// fragment loads of later k-steps (fewer registers per work-item, more work-groups per SM)
#if defined(ROLL_K) || defined(MMA_EMULATE)
#define KSTEP_UNROLL _Pragma("unroll 1")
#else
#define KSTEP_UNROLL _Pragma("unroll")
#endif

// The fragments of k-step ks of a staged slice: FM A fragments and FN B fragments of the
// warp. `a_row`, `b_row`: the first rows of the warp's A and B fragments in the stage
// (LDSM 1), or this lane's first rows (LDSM 0, with `t4` its word pair).
static inline void load_fragments(__local const uint* src, int a_row, int b_row, int t4, int ks,
                           uint a[FM][4], uint b[FN][2], int lane) {
#if LDSM
    UNROLL
    for (int i = 0; i < FM; ++i) {
#define A_ROW_WORD(L) (A_LANE_WORD(L, ks) + i * 16 * SW)
        LDSM_X4(a[i][0], a[i][1], a[i][2], a[i][3], src, A_ROW_WORD);
#undef A_ROW_WORD
    }
    UNROLL
    for (int j = 0; j + 1 < FN; j += 2) {
#define B_ROW_WORD(L) (B_LANE_WORD(L, ks) + j * 8 * SW)
        LDSM_X4(b[j][0], b[j][1], b[j + 1][0], b[j + 1][1], src, B_ROW_WORD);
#undef B_ROW_WORD
    }
#if FN % 2
#define B_ROW_WORD(L) (B_LANE_WORD(L, ks) + (FN - 1) * 8 * SW)
    LDSM_X2(b[FN - 1][0], b[FN - 1][1], src, B_ROW_WORD);
#undef B_ROW_WORD
#endif
#if ASYNC && defined(MATH_TF32)
    UNROLL
    for (int i = 0; i < FM; ++i)
        for (int r = 0; r < 4; ++r) a[i][r] = FRAG(a[i][r]);
    UNROLL
    for (int j = 0; j < FN; ++j) {
        b[j][0] = FRAG_B(b[j][0]);
        b[j][1] = FRAG_B(b[j][1]);
    }
#endif
#else
    const int swz = SWZ(a_row);        // rows g, g+8, g+16... share it (multiples of 16 apart)
    const int pair = ((((4 * ks) ^ swz) + t4) << 1);   // word 2t of k-step ks, swizzled
    UNROLL
    for (int i = 0; i < FM; ++i) {
        const uint2 lo = *(__local const uint2*)(src + (a_row + i * 16) * SW + pair);
        const uint2 hi = *(__local const uint2*)(src + (a_row + i * 16 + 8) * SW + pair);
        a[i][0] = FRAG(lo.x); a[i][1] = FRAG(hi.x); a[i][2] = FRAG(lo.y);
        a[i][3] = FRAG(hi.y);
    }
    UNROLL
    for (int j = 0; j < FN; ++j) {
        const uint2 v = *(__local const uint2*)(src + (b_row + j * 8) * SW + pair);
        b[j][0] = FRAG_B(v.x); b[j][1] = FRAG_B(v.y);
    }
#endif
}

static inline void multiply_fragments(float acc[FM][FN][4], uint a[FM][4], uint b[FN][2],
                               __local uint* mma_scr, int lane) {
    UNROLL
    for (int i = 0; i < FM; ++i)
        UNROLL
        for (int j = 0; j < FN; ++j)
            MMA(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j][0], b[j][1]);
}

// One staged slice: SW/8 k-steps of FM x FN mma fragments into the warp's accumulators.
// FRAG2: the fragments of k-step ks + 1 are loaded before k-step ks is multiplied (two
// sets of fragment registers), so that local-memory latency overlaps the mma of the step
// before instead of stalling it.
// Sliced K: this warp's k-steps are wk, wk + WARPS_K, ... (KSTEPS of them). Only those
// from kk0 up to kk1 (ISSUE_AT: the slice runs in two parts with the next copies between).
#define KSTEPS (SW / 8 / WARPS_K)
#if ISSUE_AT && (FRAG2 || !ASYNC || ISSUE_AT >= KSTEPS)
#error "ISSUE_AT: cp.async without FRAG2, a k-step inside the slice"
#endif
static inline void multiply_slice(__local const uint* src, int a_row, int b_row, int t4, int wk,
                           float acc[FM][FN][4], __local uint* mma_scr, int lane,
                           const int kk0, const int kk1) {
#if FRAG2
    uint a[2][FM][4], b[2][FN][2];
    load_fragments(src, a_row, b_row, t4, wk, a[0], b[0], lane);
    UNROLL
    for (int kk = 0; kk < KSTEPS; ++kk) {
        if (kk + 1 < KSTEPS)
            load_fragments(src, a_row, b_row, t4, (kk + 1) * WARPS_K + wk, a[(kk + 1) & 1],
                           b[(kk + 1) & 1], lane);
        multiply_fragments(acc, a[kk & 1], b[kk & 1], mma_scr, lane);
    }
#else
    KSTEP_UNROLL
    for (int kk = kk0; kk < kk1; ++kk) {
        uint a[FM][4], b[FN][2];
        load_fragments(src, a_row, b_row, t4, kk * WARPS_K + wk, a, b, lane);
        multiply_fragments(acc, a, b, mma_scr, lane);
    }
#endif
}

// finish_store (common.cl) of two adjacent outputs, `index` even: one aligned store.
static inline void finish_store_pair(float v0, float v1, __global const DATA_T* bias, int channel,
                              __global DATA_T* out, int index) {
#if defined(HAS_BIAS)
    v0 += (float)LOAD(bias, channel);
    v1 += (float)LOAD(bias, channel + 1);
#endif
    const float2 v = (float2)(activate(v0), activate(v1));
#if defined(DATA_F16)
    vstorea_half2(v, index >> 1, out);
#else
    *(__global float2*)(out + index) = v;
#endif
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void implicit_gemm_mma(__global const ELEM_T* x, __global const ELEM_T* w,
                       __global const DATA_T* bias, __global DATA_T* y,
                       __global float* part, int M, int N, int C, int H, int W, int OH,
                       int OW, int PT, int PL, int splits, int a_batch, int b_batch,
                       int y_batch) {
    __local uint4 smem4[SMEM_WORDS / 4];               // uint4: 16-byte aligned rows
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
    const int wm = warp % WARPS_M, wn = (warp / WARPS_M) % WARPS_N;
    const int wk = warp / (WARPS_M * WARPS_N);          // its share of each slice's k-steps
#if defined(GROUP_M)
    // GROUP_M block rows per block column, in the work-groups' linear order (x fastest)
    int n0, m0;
    {
        const int nn = get_num_groups(0), nm = get_num_groups(1);
        const int pid = get_group_id(1) * nn + get_group_id(0);
        const int group = pid / (GROUP_M * nn);
        const int first = group * GROUP_M;
        const int rows = min(nm - first, GROUP_M);
        const int in = pid - group * (GROUP_M * nn);
        m0 = (first + in % rows) * BM;
        n0 = (in / rows) * BN;
    }
#else
    const int n0 = get_group_id(0) * BN;
    const int m0 = get_group_id(1) * BM;
#endif
#if defined(BATCHED)
    // A batch of GEMMs of one shape (Winograd's, one per point of the transformed tile):
    // group z multiplies the z-th A (rows of C words), B and Y, a_batch, b_batch and y_batch
    // elements apart. No split-K here (the host refuses it): the batch fills the device.
    {
        const size_t z = get_group_id(2);
        x += z * (size_t)a_batch;
        w += z * (size_t)b_batch;
        y += z * (size_t)y_batch;
    }
    const int split = 0;
#else
    const int split = get_group_id(2);
#endif

#if defined(FLAT)
    const int TAPS = 1;
    const int TAP_COLS = 1;
    const int CR = KH * KW * CIN;     // the one tap: the whole reduction
#else
    const int TAPS = KH * KW;
    const int TAP_COLS = KW;
    const int CR = C;
#endif
    const int R = KH * KW * C;
    const int CS = (CR + BKE - 1) / BKE;                // slices per tap
    const int slices = TAPS * CS;
    const int t_begin = (int)(((long)slices * split) / splits);
    const int t_end = (int)(((long)slices * (split + 1)) / splits);

    // This work-item's load units (see RSTEP): rows u_row + l RSTEP, word u_col, element
    // u_k of the slice. A: each row's pixel decoded once, as the element offset of its input
    // pixel (tap 0, channel 0; negative where it lies in the padding) and its input row and
    // column packed as two 16-bit halves of a_yx (one register per row instead of two: the
    // host refuses maps of 2^14 rows or columns); row -2^14 marks a row past M (or no unit),
    // out of bounds at every tap. B: output channel n0 + row, its weights from w + b_base
    // (-1: past N).
    const int u_row = tid / UPR;
    const int u_col = (tid - u_row * UPR) * UW;
    const int u_k = u_col * ELEMS_PER_WORD;
    int a_base[LA], a_yx[LA];
#define A_IY(l) (a_yx[l] >> 16)
#define A_IX(l) ((int)(short)(a_yx[l] & 0xffff))
    for (int l = 0; l < LA; ++l) {
        const int m = m0 + u_row + l * RSTEP;
#if defined(NO_BOUNDS)
        a_base[l] = -1;                                 // past M (the only check left)
#else
        a_base[l] = 0;
#endif
        a_yx[l] = (int)(0xc000u << 16);
        if (A_UNIT_OK(l) && m < M) {
            const int img = m / (OH * OW);
            const int rest = m - img * (OH * OW);
            const int oy = rest / OW;
            const int ox = rest - oy * OW;
            const int iy0 = oy * SY - PT, ix0 = ox * SX - PL;
            a_yx[l] = (int)(((uint)iy0 << 16) | ((uint)ix0 & 0xffffu));
            a_base[l] = ((img * H + iy0) * W + ix0) * C;
        }
    }
    int b_base[LB];
    for (int l = 0; l < LB; ++l) {
        const int n = n0 + u_row + l * RSTEP;
        b_base[l] = (B_UNIT_OK(l) && n < N) ? n * R : -1;
    }

    float acc[FM][FN][4];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

#if LDSM
    const int a_row = wm * WTM;
    const int b_row = BM + wn * WTN;
#else
    const int a_row = wm * WTM + g;
    const int b_row = BM + wn * WTN + g;
#endif
#define COMPUTE_STEPS(s, kk0, kk1)                                                         \
    multiply_slice(smem + (s) * STAGE_WORDS, a_row, b_row, t4, wk, acc, mma_scr, lane, kk0, kk1)
#define COMPUTE(s) COMPUTE_STEPS(s, 0, KSTEPS)

    // The next slice to load, as a cursor (no division per slice): its tap's kernel row cti
    // and column ctj (merged taps: the row alone), and its first channel cc0 in the tap.
    int cti, ctj, cc0;
    {
        const int tap = t_begin / CS;
        cc0 = (t_begin - tap * CS) * BKE;
        cti = tap / TAP_COLS;
        ctj = tap - cti * TAP_COLS;
    }
    // TAP_MASK (cp.async, pixel bounds kept, at most 32 A rows per work-item): which of this
    // work-item's A rows read a pixel inside the image at the cursor's tap, one bit per row,
    // found once per tap (when its first slice is issued) instead of on every slice's copies.
#if ASYNC && defined(TAP_MASK) && !defined(NO_BOUNDS) && LA <= 32
#define MASKED 1
    uint tap_mask = 0u;
#define FIND_TAP_MASK()                                                                    \
    {                                                                                      \
        tap_mask = 0u;                                                                     \
        for (int l = 0; l < LA; ++l)                                                       \
            if (A_PIXEL_IN(l)) tap_mask |= 1u << l;                                        \
    }
    FIND_TAP_MASK()
#define A_ROW_IN(l) ((tap_mask >> (l)) & 1u)
#define FIND_TAP_MASK_IF_MASKED() FIND_TAP_MASK()
#else
#define FIND_TAP_MASK_IF_MASKED() {}
#define MASKED 0
#define A_ROW_IN(l) A_PIXEL_IN(l)
#endif
#define ADVANCE()                                                                          \
    {                                                                                      \
        cc0 += BKE;                                                                        \
        if (cc0 >= CR) {                                                                   \
            cc0 = 0;                                                                       \
            if (++ctj == TAP_COLS) {                                                       \
                ctj = 0;                                                                   \
                ++cti;                                                                     \
            }                                                                              \
        }                                                                                  \
    }
    // the cursor's slice: A's element offset from a_base (tap and channel), and B's from
    // b_base (the flat reduction index r of the unit's first element)
#define A_SLICE_OFF() ((cti * DY * W + ctj * DX) * C + cc0 + u_k)
#define B_SLICE_OFF() ((cti * TAP_COLS + ctj) * CR + cc0 + u_k)

#if defined(FLAT_UNIT)
    // The padded stem: this work-item's unit is reduction index r = cc0 + u_k .. + UE - 1,
    // one tap's whole pixel: its input row and column offsets and element offset, decoded
    // once per slice (CIN, KW constants); past R its row offset lies below every image row.
#define FLAT_TAP()                                                                         \
        const int f_r = cc0 + u_k;                                                         \
        const int f_tap = f_r / CIN;                                                       \
        const int f_ti = f_tap / KW;                                                       \
        const int f_dx = (f_tap - f_ti * KW) * DX;                                         \
        const int f_dy = f_r < CR ? f_ti * DY : 1 << 15;                                   \
        const int f_off = (f_ti * DY * W + f_dx) * CIN;
#define FLAT_ROW_IN(l) ((uint)(A_IY(l) + f_dy) < (uint)H && (uint)(A_IX(l) + f_dx) < (uint)W)
#endif

#if ASYNC
#if defined(FLAT_UNIT)
    // -- cp.async, the padded stem: each unit's pixel straight to its place in stage s -------
#define ISSUE(s)                                                                           \
    {                                                                                      \
        __local uint* dst = smem + (s) * STAGE_WORDS;                                      \
        FLAT_TAP()                                                                         \
        for (int l = 0; l < LA; ++l) {                                                     \
            if (!A_UNIT_OK(l)) continue;                                                   \
            const bool in = FLAT_ROW_IN(l);                                                \
            const __global ELEM_T* src = in ? x + a_base[l] + f_off : x;                   \
            cp_async16(dst + UNIT_WORD(u_row, l), (__global const uint*)src,               \
                       in ? 4 * UW : 0, CP_L1);                                            \
        }                                                                                  \
        const bool r_in = f_r < CR;                                                        \
        for (int l = 0; l < LB; ++l) {                                                     \
            if (!B_UNIT_OK(l)) continue;                                                   \
            const bool in = b_base[l] >= 0 && r_in;                                        \
            const __global ELEM_T* src = in ? w + b_base[l] + f_r : w;                     \
            cp_async16(dst + BM * SW + UNIT_WORD(u_row, l), (__global const uint*)src,     \
                       in ? 4 * UW : 0, CP_L1_B);                                          \
        }                                                                                  \
        ADVANCE()                                                                          \
    }
#else
    // -- cp.async: each unit's 16 bytes go straight to its place in stage s ------------------
#define ISSUE(s)                                                                           \
    {                                                                                      \
        __local uint* dst = smem + (s) * STAGE_WORDS;                                      \
        const int a_off = A_SLICE_OFF();                                                   \
        const bool c_in = CHANNEL_IN(cc0 + u_k, C);                                        \
        if (MASKED && cc0 == 0) FIND_TAP_MASK_IF_MASKED()                                  \
        for (int l = 0; l < LA; ++l) {                                                     \
            if (!A_UNIT_OK(l)) continue;                                                   \
            const bool in = A_ROW_IN(l) && c_in;                                           \
            const __global ELEM_T* src = in ? x + a_base[l] + a_off : x;                   \
            cp_async16(dst + UNIT_WORD(u_row, l), (__global const uint*)src, in ? 16 : 0,  \
                       CP_L1);                                                             \
        }                                                                                  \
        const int b_off = B_SLICE_OFF();                                                   \
        for (int l = 0; l < LB; ++l) {                                                     \
            if (!B_UNIT_OK(l)) continue;                                                   \
            const bool in = b_base[l] >= 0 && c_in;                                        \
            const __global ELEM_T* src = in ? w + b_base[l] + b_off : w;                   \
            cp_async16(dst + BM * SW + UNIT_WORD(u_row, l), (__global const uint*)src,     \
                       in ? 16 : 0, CP_L1_B);                                              \
        }                                                                                  \
        ADVANCE()                                                                          \
    }
#endif
    for (int s = 0; s < STAGES - 1; ++s) {
        if (t_begin + s < t_end) ISSUE(s)
        cp_commit();
    }
    for (int t = t_begin; t < t_end; ++t) {
        CP_WAIT();                               // this work-item's copies of slice t landed
        barrier(CLK_LOCAL_MEM_FENCE);            // everyone's; and slice t-1 is done with
        const int ahead = t + STAGES - 1;
        const int cur = (t - t_begin) % STAGES;
#if ISSUE_AT
        // the first k-steps' mma before the copies' address arithmetic: right after the
        // barrier every warp would otherwise issue copies while the tensor cores wait
        COMPUTE_STEPS(cur, 0, ISSUE_AT);
#endif
        if (ahead < t_end) ISSUE((ahead - t_begin) % STAGES)
        cp_commit();                             // empty groups too: the count stays exact
        COMPUTE_STEPS(cur, ISSUE_AT, KSTEPS);
    }
#else
    // -- registers: fetch the next slice while the current one is multiplied ----------------
    UNIT_T pa[LA], pb[LB];

#if defined(FLAT_UNIT)
#define FETCH_A()                                                                          \
    {                                                                                      \
        FLAT_TAP()                                                                         \
        for (int l = 0; l < LA; ++l) {                                                     \
            pa[l] = UNIT_ZERO;                                                             \
            if (FLAT_ROW_IN(l))                                                            \
                pa[l] = *(__global const UNIT_T*)(x + a_base[l] + f_off);                  \
        }                                                                                  \
    }
#elif defined(FLAT)
    // Element e of this work-item's word is reduction index r = cc0 + u_k + e (the same for
    // all its rows): decoded once per slice into the tap's input row and column offsets and
    // its element offset; each row then checks its own pixel's bounds.
#define FETCH_A()                                                                          \
    {                                                                                      \
        int e_dy[ELEMS_PER_WORD], e_dx[ELEMS_PER_WORD], e_off[ELEMS_PER_WORD];            \
        for (int e = 0; e < ELEMS_PER_WORD; ++e) {                                         \
            const int r = cc0 + u_k + e;                                                   \
            const int tap = r / CIN;                                                       \
            const int ti = tap / KW;                                                       \
            e_dx[e] = (tap - ti * KW) * DX;                                                \
            e_off[e] = (ti * DY * W + e_dx[e]) * CIN + (r - tap * CIN);                    \
            e_dy[e] = r < CR ? ti * DY : 1 << 15;         /* past R: below every row */    \
        }                                                                                  \
        for (int l = 0; l < LA; ++l) {                                                     \
            uint bits = 0u;                                                                \
            for (int e = 0; e < ELEMS_PER_WORD; ++e) {                                     \
                const int iy = A_IY(l) + e_dy[e];                                          \
                const int ix = A_IX(l) + e_dx[e];                                          \
                if ((uint)iy < (uint)H && (uint)ix < (uint)W)                              \
                    bits |= ELEM_BITS(x, a_base[l] + e_off[e]) << (16 * e);                \
            }                                                                              \
            pa[l] = bits;                                                                  \
        }                                                                                  \
    }
#elif UW == 4
#define FETCH_A()                                                                          \
    {                                                                                      \
        const int a_off = A_SLICE_OFF();                                                   \
        const bool c_in = CHANNEL_IN(cc0 + u_k, C);                                        \
        for (int l = 0; l < LA; ++l) {                                                     \
            pa[l] = UNIT_ZERO;                                                             \
            if (A_PIXEL_IN(l) && c_in)                                                     \
                pa[l] = *(__global const uint4*)(x + a_base[l] + a_off);                   \
        }                                                                                  \
    }
#else
#define FETCH_A()                                                                          \
    {                                                                                      \
        const int a_off = A_SLICE_OFF();                                                   \
        const int c = cc0 + u_k;                                                           \
        for (int l = 0; l < LA; ++l) {                                                     \
            const int iy = A_IY(l) + cti * DY;                                             \
            const int ix = A_IX(l) + ctj * DX;                                             \
            uint bits = 0u;                                                                \
            if ((uint)iy < (uint)H && (uint)ix < (uint)W) {                                \
                const int base = a_base[l] + a_off;                                        \
                for (int e = 0; e < ELEMS_PER_WORD; ++e)                                   \
                    if (c + e < C) bits |= ELEM_BITS(x, base + e) << (16 * e);             \
            }                                                                              \
            pa[l] = bits;                                                                  \
        }                                                                                  \
    }
#endif

#if UW == 4 || UW == 2
#define FETCH_B()                                                                          \
    {                                                                                      \
        const int b_off = B_SLICE_OFF();                                                   \
        const bool c_in = CHANNEL_IN(cc0 + u_k, CR);                                       \
        for (int l = 0; l < LB; ++l) {                                                     \
            pb[l] = UNIT_ZERO;                                                             \
            if (b_base[l] >= 0 && c_in)                                                    \
                pb[l] = *(__global const UNIT_T*)(w + b_base[l] + b_off);                  \
        }                                                                                  \
    }
#else
#define FETCH_B()                                                                          \
    {                                                                                      \
        const int b_off = B_SLICE_OFF();                                                   \
        const int c = cc0 + u_k;                                                           \
        for (int l = 0; l < LB; ++l) {                                                     \
            uint bits = 0u;                                                                \
            if (b_base[l] >= 0)                                                            \
                for (int e = 0; e < ELEMS_PER_WORD; ++e)                                   \
                    if (c + e < CR)                                                        \
                        bits |= ELEM_BITS(w, b_base[l] + b_off + e) << (16 * e);           \
            pb[l] = bits;                                                                  \
        }                                                                                  \
    }
#endif

#define FETCH()                                                                            \
    {                                                                                      \
        FETCH_A()                                                                          \
        FETCH_B()                                                                          \
        ADVANCE()                                                                          \
    }

#if defined(MATH_TF32) && UW == 2
#define TO_WORDS(u) ((uint2)(to_tf32(as_float((u).x)), to_tf32(as_float((u).y))))
#elif defined(MATH_TF32) && UW == 4
#define TO_WORDS(u) ((uint4)(to_tf32(as_float((u).x)), to_tf32(as_float((u).y)),           \
                             to_tf32(as_float((u).z)), to_tf32(as_float((u).w))))
#elif defined(MATH_TF32)
#define TO_WORDS(u) to_tf32(as_float(u))
#else
#define TO_WORDS(u) (u)
#endif

#if defined(B_ROUNDED)
#define TO_WORDS_B(u) (u)
#else
#define TO_WORDS_B(u) TO_WORDS(u)
#endif

#if UW == 4 || UW == 2
#define PUT(buf, word, u) (*(__local UNIT_T*)((buf) + (word)) = TO_WORDS(u))
#define PUT_B(buf, word, u) (*(__local UNIT_T*)((buf) + (word)) = TO_WORDS_B(u))
#else
#define PUT(buf, word, u) ((buf)[(word)] = TO_WORDS(u))
#define PUT_B(buf, word, u) ((buf)[(word)] = TO_WORDS_B(u))
#endif

#define STORE_STAGE(s)                                                                     \
    {                                                                                      \
        __local uint* dst = smem + (s) * STAGE_WORDS;                                      \
        for (int l = 0; l < LA; ++l)                                                       \
            if (A_UNIT_OK(l)) PUT(dst, UNIT_WORD(u_row, l), pa[l]);                        \
        for (int l = 0; l < LB; ++l)                                                       \
            if (B_UNIT_OK(l)) PUT_B(dst + BM * SW, UNIT_WORD(u_row, l), pb[l]);              \
    }

    if (t_begin < t_end) {
        FETCH()
        STORE_STAGE(0)
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = t_begin; t < t_end; ++t) {
        const int cur = STAGES == 2 ? ((t - t_begin) & 1) : 0;
        const bool more = t + 1 < t_end;
        if (more) FETCH()
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

#if WARPS_K > 1
    // Sliced K: warps wk > 0 leave their partial sums in local memory, lane-major (each
    // warp's 32 lanes side by side: no bank conflicts), and the warp wk = 0 of the same warp
    // tile adds them up and stores; the others are done.
    {
        __local float* sums = (__local float*)smem;
        const int wmn = warp - wk * (WARPS_M * WARPS_N);
#define SUM_AT(q) (sums + (((q) - 1) * (WARPS_M * WARPS_N) + wmn) * (FM * FN * 4 * 32) + lane)
        barrier(CLK_LOCAL_MEM_FENCE);                     // every warp done with the stages
        if (wk > 0) {
            __local float* mine = SUM_AT(wk);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
#pragma unroll
                    for (int r = 0; r < 4; ++r) mine[((i * FN + j) * 4 + r) * 32] = acc[i][j][r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int q = 1; q < WARPS_K && wk == 0; ++q) {
            __local const float* theirs = SUM_AT(q);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
#pragma unroll
                    for (int r = 0; r < 4; ++r) acc[i][j][r] += theirs[((i * FN + j) * 4 + r) * 32];
        }
#undef SUM_AT
    }
#endif

#if OUT_STAGED
    // The output tile through local memory (no split-K): the warps (wk = 0) leave their
    // finished values (bias, activation, rounding to the data type) in a BM x BN tile, then
    // every work-item stores 16-byte runs of its rows, whole 32-byte sectors per pair of
    // work-items, where the fragments' own stores write 16 bytes (halves) or 32 (floats) of
    // a row at a time.
    if (splits == 1) {
        __local DATA_T* tile = (__local DATA_T*)smem;
        barrier(CLK_LOCAL_MEM_FENCE);            // the stages (and sliced K's sums) are free
        if (wk == 0) {
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int r = wm * WTM + i * 16 + g + 8 * h;
                            const int c = wn * WTN + j * 8 + 2 * t4 + e;
                            float v = acc[i][j][2 * h + e];
#if defined(HAS_BIAS)
                            if (n0 + c < N) v += (float)LOAD(bias, n0 + c);
#endif
                            STORE(activate(v), tile, r * OUT_ROW + c);
                        }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const bool whole = N % OUT_VEC == 0;     // then every run is whole and aligned
        for (int q = tid; q < BM * (BN / OUT_VEC); q += NT) {
            const int r = q / (BN / OUT_VEC);
            const int c = (q - r * (BN / OUT_VEC)) * OUT_VEC;
            const int m = m0 + r, col = n0 + c;
            if (m >= M || col >= N) continue;
            __local const COPY_T* src = (__local const COPY_T*)tile + r * OUT_ROW + c;
            __global COPY_T* dst = (__global COPY_T*)y + m * N + col;
            if (whole) {
                *(__global uint4*)dst = *(__local const uint4*)src;
            } else {
                for (int e = 0; e < OUT_VEC; ++e)
                    if (col + e < N) dst[e] = src[e];
            }
        }
        return;
    }
#endif
#if WARPS_K > 1
    if (wk > 0) return;                          // warp wk = 0 stores the tile's sums
#endif

    // The epilogue: d0, d1 (and d2, d3) are columns 2t, 2t+1 of one row, so where N is even
    // (the pair's index even, in bounds together) they leave as one 8-byte (float) or 4-byte
    // (two halves) store; else one by one.
    if (splits > 1) part += (long)split * M * N;
    const bool pairs = (N & 1) == 0;
#pragma unroll
    for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m0 + wm * WTM + i * 16 + g + 8 * h;
                const int col = n0 + wn * WTN + j * 8 + 2 * t4;
                const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
                if (m >= M || col >= N) continue;
                const int at = m * N + col;
                if (pairs && splits > 1) {
                    *(__global float2*)(part + at) = (float2)(v0, v1);
                } else if (pairs) {
                    finish_store_pair(v0, v1, bias, col, y, at);
                } else {
                    if (splits > 1)
                        part[at] = v0;
                    else
                        finish_store(v0, bias, col, y, at);
                    if (col + 1 < N) {
                        if (splits > 1)
                            part[at + 1] = v1;
                        else
                            finish_store(v1, bias, col + 1, y, at + 1);
                    }
                }
            }
        }
    }
}


// The padded stem's input (v8): NHWC with CSRC channels -> NHWC with CIN, the channels past
// CSRC zero (the weights' padded channels are zero too, so they add exact zeros). One
// work-item per pixel; elements moved as bits.
#if defined(FLAT_UNIT)
#define PAD_BITS(c) ((c) < CSRC ? ELEM_BITS(src, (long)p * CSRC + (c)) : 0u)
#if ELEMS_PER_WORD == 2
#define PAD_WORD(i) (PAD_BITS(2 * (i)) | (PAD_BITS(2 * (i) + 1) << 16))
#else
#define PAD_WORD(i) PAD_BITS(i)
#endif
__kernel void pad_channels(__global const ELEM_T* src, __global ELEM_T* dst, int pixels) {
    const int p = get_global_id(0);
    if (p >= pixels) return;
#if UW == 4
    const uint4 v = (uint4)(PAD_WORD(0), PAD_WORD(1), PAD_WORD(2), PAD_WORD(3));
#else
    const uint2 v = (uint2)(PAD_WORD(0), PAD_WORD(1));
#endif
    *(__global UNIT_T*)(dst + (long)p * CIN) = v;
}
#endif
