// Shared by every convsel kernel: storage type, loads/stores, the fused activation.
//
// DATA_F32: float storage and arithmetic.
// DATA_F16: half storage. Without HALF_NATIVE, values move through vload_half/vstore_half
//   (core OpenCL, no extension) and all arithmetic is float. With HALF_NATIVE (only when the
//   device has cl_khr_fp16), loads are native half and products are half; sums stay float.
// Winograd intermediates are float whatever DATA_*: use LOADF/STOREF on float buffers.

#if defined(HALF_NATIVE)
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
#endif

#if defined(DATA_F16)
#define DATA_T half
#define COPY_T ushort
#if defined(HALF_NATIVE)
#define COMPUTE_T half
#define LOAD(p, i) ((p)[(i)])
#define STORE(v, p, i) ((p)[(i)] = convert_half(v))
#else
#define COMPUTE_T float
#define LOAD(p, i) vload_half((i), (p))
#define STORE(v, p, i) vstore_half((v), (i), (p))
#endif
#else
#define DATA_T float
#define COPY_T float
#define COMPUTE_T float
#define LOAD(p, i) ((p)[(i)])
#define STORE(v, p, i) ((p)[(i)] = (v))
#endif

#define ZERO ((COMPUTE_T)0)

#ifndef ACT
#define ACT 0
#endif
#ifndef ACT_A
#define ACT_A 0.0f
#endif
#ifndef ACT_B
#define ACT_B 0.0f
#endif

inline float sigmoid_(float x) {
    // Clamping keeps exp() finite in float, as the numpy definition does.
    return 1.0f / (1.0f + exp(-clamp(x, -88.0f, 88.0f)));
}

// ACL's activations (convsel/activation.py is the definition; ids in program.py).
inline float activate(float x) {
#if ACT == 0
    return x;
#elif ACT == 1
    return fmax(x, 0.0f);
#elif ACT == 2
    return fmin(fmax(x, 0.0f), (ACT_A));
#elif ACT == 3
    return fmin(fmax(x, (ACT_B)), (ACT_A));
#elif ACT == 4
    return x > 0.0f ? x : (ACT_A) * x;
#elif ACT == 5
    return (ACT_A) * x + (ACT_B);
#elif ACT == 6
    return sigmoid_(x);
#elif ACT == 7
    return (ACT_A) * tanh((ACT_B) * x);
#elif ACT == 8
    return x > 0.0f ? x : (ACT_A) * expm1(fmin(x, 0.0f));
#elif ACT == 9
    return x * sigmoid_((ACT_A) * x);
#elif ACT == 10
    return x * clamp(x + 3.0f, 0.0f, 6.0f) / 6.0f;
#elif ACT == 11
    return fabs(x);
#else
#error "unknown ACT"
#endif
}

// Bias (HAS_BIAS) and activation on a float accumulator, then store in the data type.
inline void finish_store(float acc, __global const DATA_T* bias, int channel,
                         __global DATA_T* out, int index) {
#if defined(HAS_BIAS)
    acc += (float)LOAD(bias, channel);
#endif
    STORE(activate(acc), out, index);
}
