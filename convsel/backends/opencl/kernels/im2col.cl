// im2col for NHWC: col[g][m][(i*KW + j)*CG + c] = x[n, oy*SY-PT+i*DY, ox*SX-PL+j*DX, g*CG+c]
// (0 in the padding), m = (n*OH + oy)*OW + ox. A pure copy, so F16 moves as raw 16-bit words.
// Build options: KH KW SY SX DY DX, DATA_*.
// Global size: (KD = KH*KW*CG, M = N*OH*OW, G).

__kernel void im2col(__global const COPY_T* x, __global COPY_T* col,
                     int H, int W, int C, int OH, int OW, int PT, int PL, int CG, int M) {
    const int kd = get_global_id(0);
    const int m = get_global_id(1);
    const int g = get_global_id(2);
    const int KD = KH * KW * CG;
    if (kd >= KD || m >= M) return;
    const int tap = kd / CG;
    const int c = kd - tap * CG;
    const int i = tap / KW;
    const int j = tap - i * KW;
    const int n = m / (OH * OW);
    const int rest = m - n * OH * OW;
    const int oy = rest / OW;
    const int ox = rest - oy * OW;
    const int iy = oy * SY - PT + i * DY;
    const int ix = ox * SX - PL + j * DX;
    const bool inside = iy >= 0 && iy < H && ix >= 0 && ix < W;
    col[(g * M + m) * KD + kd] = inside ? x[((n * H + iy) * W + ix) * C + g * CG + c]
                                        : (COPY_T)0;
}
