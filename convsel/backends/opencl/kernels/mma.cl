// Tensor cores through inline PTX (NVIDIA's OpenCL compiler accepts asm volatile with "r" and
// "f" operands): one warp-wide mma.sync per MMA(), on 32-bit words.
//
// MATH_TF32: mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, one float (TF32) per word,
//   words made by to_tf32() (cvt.rna: round to nearest, ties away, 10 fraction bits).
// MATH_F16:  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32, two halves per word (the
//   lower 16 bits hold the smaller k), taken as bits: OpenCL needs no half type for them.
// Either way a k-step multiplies a 16x8-word A by an 8-word x 8 B, accumulating in float.
//
// Fragments (PTX ISA; lane = 32*warp + l, g = l / 4, t = l % 4), in words:
//   A: a0 (row g, word t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
//   B: b0 (word t, column g), b1 (word t+4, column g)
//   D: d0 (row g, column 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1)
// A word slot s of A meets word slot s of B, so any permutation of the 8 word slots applied
// to both leaves the product unchanged: the GEMM uses that to fetch a0/a2 (and b0/b1) with
// one 64-bit load of words 2t, 2t+1.
//
// MMA_EMULATE (tests on devices without tensor cores, never chosen by a policy): the same
// fragments are exchanged through local memory (`mma_scr`: MMA_SCRATCH_WORDS per warp, in
// scope with `lane` wherever MMA() is used) and multiplied in float, so the fragment bookkeeping of every kernel that uses
// MMA() can be checked on any OpenCL device. All work-items of the work-group must reach
// every MMA() (it holds barriers).

#if !defined(MATH_TF32) && !defined(MATH_F16)
#error "mma.cl needs MATH_TF32 or MATH_F16"
#endif

#if defined(MATH_TF32)
#define MMA_K_ELEMS 8                 // k per mma: 8 words of one TF32 each
#define ELEMS_PER_WORD 1
#define MMA_OP "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
#else
#define MMA_K_ELEMS 16                // 8 words of two halves each
#define ELEMS_PER_WORD 2
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#endif

// ldmatrix (sm_75+, covered by the probe's >= 8.0): LDSM_X4 loads four 8x8 matrices of b16
// from local memory, each 8 rows of 16 bytes = 4 words; lane l receives word l % 4 of row l / 4
// of each, which is one mma fragment register (row g, word t) for TF32 words and for pairs of
// halves alike (a 32-bit word moves whole: two b16 side by side). Lanes 8q..8q+7 name the rows
// of matrix q: ROW_WORD(L), a function-like macro of the lane, is the word offset in `src` of
// the row that lane L names (16-byte aligned). LDSM_X2: matrices 0 and 1 only (lanes 0..15).
// Emulated, each lane reads its word from the row that the naming lane would have given.

#if defined(MMA_EMULATE)

#define LDSM_X4(d0, d1, d2, d3, src, ROW_WORD)                                              \
    {                                                                                       \
        const int lt_ = lane & 3, lg_ = lane >> 2;                                          \
        (d0) = (src)[ROW_WORD(lg_) + lt_];                                                  \
        (d1) = (src)[ROW_WORD(8 + lg_) + lt_];                                              \
        (d2) = (src)[ROW_WORD(16 + lg_) + lt_];                                             \
        (d3) = (src)[ROW_WORD(24 + lg_) + lt_];                                             \
    }
#define LDSM_X2(d0, d1, src, ROW_WORD)                                                      \
    {                                                                                       \
        const int lt_ = lane & 3, lg_ = lane >> 2;                                          \
        (d0) = (src)[ROW_WORD(lg_) + lt_];                                                  \
        (d1) = (src)[ROW_WORD(8 + lg_) + lt_];                                              \
    }

#else

#define LDSM_X4(d0, d1, d2, d3, src, ROW_WORD)                                              \
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"            \
                 : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)                                   \
                 : "r"((uint)(size_t)((src) + ROW_WORD(lane))))
#define LDSM_X2(d0, d1, src, ROW_WORD)                                                      \
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"                  \
                 : "=r"(d0), "=r"(d1)                                                       \
                 : "r"((uint)(size_t)((src) + ROW_WORD(lane))))

#endif

#if defined(MMA_EMULATE)

static inline uint to_tf32(float f) {
    // round to nearest, ties away from zero, on the magnitude: as cvt.rna for finite f
    return (as_uint(f) + 0x1000u) & 0xffffe000u;
}

static inline float half_bits(ushort bits) {
    return vload_half(0, (const __private half*)&bits);
}

static inline float word_dot(uint a, uint b) {
#if defined(MATH_TF32)
    return as_float(a) * as_float(b);
#else
    const ushort2 ah = as_ushort2(a), bh = as_ushort2(b);
    return half_bits(ah.s0) * half_bits(bh.s0) + half_bits(ah.s1) * half_bits(bh.s1);
#endif
}

static inline void emulated_mma(float* d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1,
                         __local uint* s, int l) {
    const int g = l >> 2, t = l & 3;
    __local uint* As = s;             // [16 rows][8 word slots]
    __local uint* Bs = s + 128;       // [8 word slots][8 columns]
    As[g * 8 + t] = a0;
    As[(g + 8) * 8 + t] = a1;
    As[g * 8 + t + 4] = a2;
    As[(g + 8) * 8 + t + 4] = a3;
    Bs[t * 8 + g] = b0;
    Bs[(t + 4) * 8 + g] = b1;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < 4; ++r) {
        const int row = g + 8 * (r >> 1);
        const int col = 2 * t + (r & 1);
        float sum = 0.0f;
        for (int k = 0; k < 8; ++k) sum += word_dot(As[row * 8 + k], Bs[k * 8 + col]);
        d[r] += sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

#define MMA_SCRATCH_WORDS 192
#define MMA(d, a0, a1, a2, a3, b0, b1) \
    emulated_mma((d), (a0), (a1), (a2), (a3), (b0), (b1), mma_scr, lane)

#else

// MMA_FREE: the mma and the TF32 rounding as plain (not volatile) asm, pure functions of
// their registers, which the compiler may schedule among the fragment loads (volatile asm
// keeps its source order).
#if defined(MMA_FREE)
#define MMA_ASM asm
#else
#define MMA_ASM asm volatile
#endif

static inline uint to_tf32(float f) {
    uint r;
    MMA_ASM("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

#define MMA_SCRATCH_WORDS 1
#if defined(DIAG_NO_MMA)
// diagnosis only (benchmarks/gpu.py --diagnose; wrong results): the operands are consumed
// by an empty asm, so their loads stay, but no mma runs
#define MMA(d, a0, a1, a2, a3, b0, b1)                                                      \
    asm volatile("" :: "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))
#else
#define MMA(d, a0, a1, a2, a3, b0, b1)                                                      \
    MMA_ASM(MMA_OP " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"             \
                 : "=f"((d)[0]), "=f"((d)[1]), "=f"((d)[2]), "=f"((d)[3])                   \
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1),                    \
                   "f"((d)[0]), "f"((d)[1]), "f"((d)[2]), "f"((d)[3]))
#endif

#endif
