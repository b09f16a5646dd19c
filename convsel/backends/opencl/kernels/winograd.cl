// Winograd F(MH x MW, KH x KW), NHWC, stride 1: input transform and output transform.
// The batched GEMM between them is gemm.cl; the filter transform is done once on the host.
// The generated preamble defines MH MW AH AW (AH = MH + KH - 1) and the transforms as
// constant arrays BT_Y (AH x AH), BT_X (AW x AW), AT_Y (MH x AH), AT_X (MW x AW), from
// convsel/winograd_transforms.py. Intermediates are float: V[a][b][p][c] and
// Mt[a][b][p][k], p = (n*TH + ty)*TW + tx the tile index.

// Global size: (C, P, 1). One tile of one channel: V = BT_Y d BT_X^T.
__kernel void winograd_input(__global const DATA_T* x, __global float* v,
                             int H, int W, int C, int TH, int TW, int P, int PT, int PL) {
    const int c = get_global_id(0);
    const int p = get_global_id(1);
    if (c >= C || p >= P) return;
    const int n = p / (TH * TW);
    const int rest = p - n * TH * TW;
    const int ty = rest / TW;
    const int tx = rest - ty * TW;
    const int y0 = ty * MH - PT;
    const int x0 = tx * MW - PL;

    float d[AH][AW];
    for (int a = 0; a < AH; ++a) {
        const int iy = y0 + a;
        for (int b = 0; b < AW; ++b) {
            const int ix = x0 + b;
            d[a][b] = (iy >= 0 && iy < H && ix >= 0 && ix < W)
                ? (float)LOAD(x, ((n * H + iy) * W + ix) * C + c) : 0.0f;
        }
    }
    float t[AH][AW];
    for (int a = 0; a < AH; ++a)
        for (int b = 0; b < AW; ++b) {
            float s = 0.0f;
            for (int l = 0; l < AH; ++l) s += BT_Y[a * AH + l] * d[l][b];
            t[a][b] = s;
        }
    for (int a = 0; a < AH; ++a)
        for (int b = 0; b < AW; ++b) {
            float s = 0.0f;
            for (int l = 0; l < AW; ++l) s += t[a][l] * BT_X[b * AW + l];
            v[((a * AW + b) * P + p) * C + c] = s;
        }
}

// Global size: (K, P, 1). One tile of one output channel: Y = AT_Y m AT_X^T, + bias, act.
__kernel void winograd_output(__global const float* mt, __global const DATA_T* bias,
                              __global DATA_T* y, int K, int OH, int OW, int TH, int TW,
                              int P) {
    const int k = get_global_id(0);
    const int p = get_global_id(1);
    if (k >= K || p >= P) return;
    const int n = p / (TH * TW);
    const int rest = p - n * TH * TW;
    const int ty = rest / TW;
    const int tx = rest - ty * TW;

    float m[AH][AW];
    for (int a = 0; a < AH; ++a)
        for (int b = 0; b < AW; ++b) m[a][b] = mt[((a * AW + b) * P + p) * K + k];
    float t[MH][AW];
    for (int i = 0; i < MH; ++i)
        for (int b = 0; b < AW; ++b) {
            float s = 0.0f;
            for (int l = 0; l < AH; ++l) s += AT_Y[i * AH + l] * m[l][b];
            t[i][b] = s;
        }
    for (int i = 0; i < MH; ++i) {
        const int oy = ty * MH + i;
        if (oy >= OH) break;
        for (int j = 0; j < MW; ++j) {
            const int ox = tx * MW + j;
            if (ox >= OW) break;
            float s = 0.0f;
            for (int l = 0; l < AW; ++l) s += t[i][l] * AT_X[j * AW + l];
            finish_store(s, bias, k, y, ((n * OH + oy) * OW + ox) * K + k);
        }
    }
}
