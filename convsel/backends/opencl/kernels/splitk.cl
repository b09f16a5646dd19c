// Split-K's second step, shared by the tiled GEMMs (implicit_gemm.cl, implicit_gemm_mma.cl):
// y = epilogue(sum over the splits of part), part[batch*splits + s][M][N] float. Needs the
// including kernel's Y_T (and GEMM_FLOAT_IO for raw float output). Global size: (N, M,
// batches); any local size.
__kernel void splitk_reduce(__global const float* part, __global const DATA_T* bias,
                            __global Y_T* y, int M, int N, int ldy, int y_batch,
                            int bias_batch, int splits) {
    const int col = get_global_id(0);
    const int m = get_global_id(1);
    const int batch = get_global_id(2);
    if (col >= N || m >= M) return;
    float sum = 0.0f;
    for (int s = 0; s < splits; ++s)
        sum += part[((long)(batch * splits + s) * M + m) * N + col];
    y += batch * y_batch;
#if defined(GEMM_FLOAT_IO)
    y[m * ldy + col] = sum;
#else
    finish_store(sum, bias, batch * bias_batch + col, y, m * ldy + col);
#endif
}
