"""The C++ prelude every generated kernel starts with.

On the device: a 64-bit index type, exact +-inf and NaN, an exact integer power, and
warp-shuffle reductions over a warp or a whole block. With `EINSAT_HOST` defined (the tests'
host emulation), the CUDA built-ins become plain C++ and a "block" is one thread, so the same
kernel source runs on the CPU. With `EINSAT_HOST_THREADS` as well, a block is `blockDim.x` real
threads (the launcher runs them): `threadIdx` is per thread, `__syncthreads` is a barrier of the
block, and `__shfl_xor_sync` exchanges values between the lanes of a warp of 32 through memory
between two barriers of that warp, so the device's own warp and block reductions run. A barrier
that waits more than 10 s (threads that diverge around it) sets `einsat_deadlock` and lets go.
The prelude is include-guarded: kernels concatenated into one translation unit share it.
"""

PRELUDE = r"""
#ifndef EINSAT_PRELUDE
#define EINSAT_PRELUDE
typedef long long idx_t;
#ifdef EINSAT_HOST
/* Host emulation (tests): a kernel runs one block of one thread at a time. */
#include <cmath>
#include <cstring>
struct einsat_dim3 { unsigned int x, y, z; };
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
using std::sqrt; using std::exp; using std::tanh; using std::erf; using std::fabs; using std::fmax; using std::fmin;
static inline float einsat_inf_f() { return HUGE_VALF; }
static inline double einsat_inf_d() { return HUGE_VAL; }
static inline float einsat_nan_f() { return NAN; }
static inline double einsat_nan_d() { return NAN; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
#ifdef EINSAT_HOST_THREADS
#include <chrono>
#include <condition_variable>
#include <mutex>
static thread_local einsat_dim3 threadIdx = {0, 0, 0};
static einsat_dim3 blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
static int einsat_deadlock = 0;
struct einsat_barrier {
    std::mutex m; std::condition_variable cv; int n = 1, count = 0; long long phase = 0;
    void wait() {
        std::unique_lock<std::mutex> lock(m);
        const long long ph = phase;
        if (++count == n) { count = 0; ++phase; cv.notify_all(); return; }
        if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return phase != ph; })) {
            einsat_deadlock = 1; count = 0; ++phase; cv.notify_all();
        }
    }
};
static einsat_barrier einsat_block_barrier, einsat_warp_barrier[32];
static unsigned long long einsat_lanes[1024];
#define __syncthreads() einsat_block_barrier.wait()
template <typename T> static inline T __shfl_xor_sync(unsigned int, T v, int lane_mask) {
    const unsigned int t = threadIdx.x;
    std::memcpy(&einsat_lanes[t], &v, sizeof(T));
    einsat_warp_barrier[t >> 5].wait();
    T r;
    std::memcpy(&r, &einsat_lanes[t ^ (unsigned int)lane_mask], sizeof(T));
    einsat_warp_barrier[t >> 5].wait();
    return r;
}
#define EINSAT_WARP 32
#else
static einsat_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
#define __syncthreads() ((void)0)
#define EINSAT_WARP 1
template <typename T> static inline T einsat_warp_sum(T v) { return v; }
template <typename T> static inline T einsat_warp_max(T v) { return v; }
template <typename T> static inline T einsat_block_sum(T v, T* smem) { (void)smem; return v; }
template <typename T> static inline T einsat_block_max(T v, T* smem) { (void)smem; return v; }
#endif
#else
__device__ __forceinline__ float einsat_inf_f() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ double einsat_inf_d() { return __longlong_as_double(0x7ff0000000000000LL); }
__device__ __forceinline__ float einsat_nan_f() { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ double einsat_nan_d() { return __longlong_as_double(0x7ff8000000000000LL); }
#define EINSAT_WARP 32
#endif
#if !defined(EINSAT_HOST) || defined(EINSAT_HOST_THREADS)
/* Reductions over a warp, or a whole block (blockDim.x a multiple of 32); every thread gets
   the result. smem needs 32 elements. */
template <typename T> __device__ __forceinline__ T einsat_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T einsat_warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) { T w = __shfl_xor_sync(0xffffffffu, v, o); v = (w > v || w != w) ? w : v; }
    return v;
}
template <typename T> __device__ __forceinline__ T einsat_block_sum(T v, T* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = einsat_warp_sum(v);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = (lane < nw) ? smem[lane] : (T)0;
    return einsat_warp_sum(v);
}
template <typename T> __device__ __forceinline__ T einsat_block_max(T v, T* smem) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = einsat_warp_max(v);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    v = (lane < nw) ? smem[lane] : smem[0];
    return einsat_warp_max(v);
}
#endif
#ifdef EINSAT_HOST
#define EINSAT_FN static inline
#else
#define EINSAT_FN __device__ __forceinline__
#endif
EINSAT_FN long long einsat_ipow(long long b, long long e) {
    long long r = 1;
    if (e < 0) return b == 1 ? 1 : (b == -1 ? ((e & 1) ? -1 : 1) : 0);
    while (e) { if (e & 1) r *= b; b *= b; e >>= 1; }
    return r;
}
#endif
"""

# The half types of a kernel with an fp16 or bf16 parameter. On the device, CUDA's own headers
# (`__half`, `__nv_bfloat16` and their round-to-nearest-even conversions). In the host emulation,
# 16-bit structs of the same names and bit-exact conversions: a half widens to float exactly, and
# float rounds to half to nearest even, overflow to infinity, subnormals and NaN included (fp16 after
# F. Giesen's float_to_half_fast3_rtne; bf16 keeps the top 16 bits, rounded). The tests compare them
# with NumPy's float16 and ml_dtypes' bfloat16 on every bit pattern.
HALF_HEADER = r"""
#ifndef EINSAT_HALF
#define EINSAT_HALF
#ifndef EINSAT_HOST
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#else
#include <cstring>
struct __half { unsigned short x; };
struct __nv_bfloat16 { unsigned short x; };
static inline unsigned int einsat_f2u(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float einsat_u2f(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline float __half2float(__half h) {
    unsigned int o = (unsigned int)(h.x & 0x7fffu) << 13;
    const unsigned int e = o & (0x7c00u << 13);
    o += (127u - 15u) << 23;
    if (e == (0x7c00u << 13)) o += (128u - 16u) << 23;                              /* inf, NaN */
    else if (e == 0) { o += 1u << 23; o = einsat_f2u(einsat_u2f(o) - einsat_u2f(113u << 23)); }  /* 0, subnormal */
    return einsat_u2f(o | ((unsigned int)(h.x & 0x8000u) << 16));
}
static inline __half __float2half_rn(float f) {
    unsigned int u = einsat_f2u(f);
    const unsigned int sign = u & 0x80000000u;
    u ^= sign;
    unsigned short o;
    if (u >= (143u << 23)) o = (u > 0x7f800000u) ? 0x7e00 : 0x7c00;               /* NaN, overflow */
    else if (u < (113u << 23)) {                                                    /* subnormal, 0 */
        const float magic = einsat_u2f(((127u - 15u) + (23u - 10u) + 1u) << 23);
        o = (unsigned short)(einsat_f2u(einsat_u2f(u) + magic) - einsat_f2u(magic));
    } else {
        const unsigned int odd = (u >> 13) & 1u;
        u += ((unsigned int)(15 - 127) << 23) + 0xfffu + odd;
        o = (unsigned short)(u >> 13);
    }
    __half h; h.x = (unsigned short)(o | (sign >> 16));
    return h;
}
static inline float __bfloat162float(__nv_bfloat16 b) { return einsat_u2f((unsigned int)b.x << 16); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    unsigned int u = einsat_f2u(f);
    __nv_bfloat16 b;
    if ((u & 0x7fffffffu) > 0x7f800000u) { b.x = (unsigned short)((u >> 16) | 0x40u); return b; }  /* NaN stays quiet */
    u += 0x7fffu + ((u >> 16) & 1u);
    b.x = (unsigned short)(u >> 16);
    return b;
}
#endif
#endif
"""
