// cugather device code shared by every kernel: integer types, divisors, index
// modes, cache policies, the fill value, and the two loops several kernels
// share (the row tile and the flat-position split).  Self-contained (no system
// headers) so NVRTC needs no include path.
#ifndef CUGATHER_COMMON_CUH
#define CUGATHER_COMMON_CUH

// The CG_* tuning constants have one home, cugather/plan/tuning.py, which the
// renderer writes at the top of every source; there are no defaults here.
#if !defined(CG_MAX_THREADS) || !defined(CG_MAX_DIMS) || !defined(CG_STREAM_STORES) || \
    !defined(CG_STREAM_INDICES)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

#ifndef CG_DYNAMIC_SMEM
#define CG_DYNAMIC_SMEM(type, name) extern __shared__ __align__(16) type name[]
#endif

// Layout checks of the argument blocks (see cugather/_layout.py).  NVRTC has
// no offsetof, so there only the sizes are checked; host compilers and nvcc
// check every offset.
#if defined(__CUDACC_RTC__)
#define CG_CHECK_OFFSET(T, field, offset)
#else
#define CG_CHECK_OFFSET(T, field, offset) \
    static_assert(__builtin_offsetof(T, field) == offset, #T "." #field " moved")
#endif

// Blocks of CG_MAX_THREADS an SM can hold: a __launch_bounds__ minimum above
// that is ignored with a warning (Turing holds 1024 threads, Ampere consumer
// parts and Ada 1536, A100 and Hopper 2048).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
#define CG_BLOCKS_PER_SM (1024 / CG_MAX_THREADS)
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890)
#define CG_BLOCKS_PER_SM (1536 / CG_MAX_THREADS)
#else
#define CG_BLOCKS_PER_SM (2048 / CG_MAX_THREADS)
#endif

namespace cg {

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;

// ---------------------------------------------------------------------------
// Division by a run-time constant d.
//
// fast_divmod (Granlund & Montgomery, as in onnxruntime's fast_divmod.h): the
// host computes l = ceil(log2 d) and m = floor(2^N (2^l - d) / d) + 1, then
// q = (umulhi(m, n) + n) >> l.  This is exact for every 0 <= n < 2^N and
// 1 <= d < 2^N as long as umulhi(m, n) + n does not overflow, which holds for
// n < 2^(N-1): N = 32 covers n, d < 2^31 (Math32), N = 64 covers n < 2^63
// (Math64).  The plan picks the width from the largest numerator.
// ---------------------------------------------------------------------------
struct Divisor {
    u64 d;  // divisor, >= 1
    u64 m;  // magic multiplier (fits in 32 bits for Math32)
    u32 l;  // shift
    u32 pad;
};

struct Math32 {
    typedef u32 Ix;
    static __device__ __forceinline__ u32 div(const Divisor& v, u32 n)
    {
        return (__umulhi((u32)v.m, n) + n) >> v.l;
    }
};

struct Math64 {
    typedef u64 Ix;
    static __device__ __forceinline__ u64 div(const Divisor& v, u64 n)
    {
        return (__umul64hi(v.m, n) + n) >> v.l;
    }
};

// Plain 64-bit division: the reference the fast paths are measured against.
struct MathDiv64 {
    typedef u64 Ix;
    static __device__ __forceinline__ u64 div(const Divisor& v, u64 n) { return n / v.d; }
};

template <class M>
__device__ __forceinline__ void divmod(const Divisor& v, typename M::Ix n,
                                       typename M::Ix& q, typename M::Ix& r)
{
    q = M::div(v, n);
    r = n - q * (typename M::Ix)v.d;
}

// ---------------------------------------------------------------------------
// Out-of-range index policies, a compile-time choice.  resolve() maps a raw
// index to [0, s) and returns false when the element takes the fill value.
// ---------------------------------------------------------------------------
enum {
    MODE_RAISE = 0,       // indices were checked on the device first; only normalise negatives
    MODE_WRAP = 1,        // i mod s (numpy/cupy "wrap")
    MODE_CLIP = 2,        // negatives count from the end, then clamp to [0, s-1]
    MODE_CLIP_NUMPY = 3,  // numpy.take "clip": clamp to [0, s-1], negatives become 0
    MODE_FILL = 4         // in [-s, s) as usual, anything else takes the fill value
};

template <int MODE>
__device__ __forceinline__ bool resolve(i64& i, i64 s)
{
    if (MODE == MODE_RAISE) {
        if (i < 0) i += s;
        return true;
    } else if (MODE == MODE_WRAP) {
        if ((u64)i >= (u64)s) {  // rare path: one division only for out-of-range values
            if (i < 0 && i >= -s) {
                i += s;
            } else {
                i %= s;
                if (i < 0) i += s;
            }
        }
        return true;
    } else if (MODE == MODE_CLIP) {
        if (i < 0) i += s;
        if (i < 0) i = 0;
        else if (i >= s) i = s - 1;
        return true;
    } else if (MODE == MODE_CLIP_NUMPY) {
        if (i < 0) i = 0;
        else if (i >= s) i = s - 1;
        return true;
    } else {
        if (i < 0) i += s;
        return (u64)i < (u64)s;
    }
}

// Raise mode checks in the gather kernel itself: an index outside [-s, s)
// records its flat position in `first_bad` (atomicMin into an 8-byte word the
// host set to ~0 before the launch and reads after one synchronisation) and
// takes the fill path, so nothing outside the table is read; the host then
// discards the output and raises.  Every other mode is resolve()'s.
template <int MODE>
__device__ __forceinline__ bool resolve_checked(i64& i, i64 s, u64* first_bad, u64 pos)
{
    if (MODE == MODE_RAISE) {
        if (i < 0) i += s;
        if ((u64)i < (u64)s) return true;
        atomicMin((unsigned long long*)first_bad, (unsigned long long)pos);
        return false;
    }
    return resolve<MODE>(i, s);
}

// Whether resolve_checked() can return false, so that a row may take the fill path.
template <int MODE>
__device__ __forceinline__ constexpr bool may_skip()
{
    return MODE == MODE_FILL || MODE == MODE_RAISE;
}

// A gather writes each output unit once but may reread any part of the
// table.  With CG_STREAM_STORES output stores are evict-first (st.global.cs),
// which leaves L2 to the table.  Index loads stay on the read-only path unless
// CG_STREAM_INDICES: several kernels reread indices (one pass per outer
// slice), and the components of an index tuple share sectors.
template <class T>
__device__ __forceinline__ void store_stream(T* p, const T v)
{
#if CG_STREAM_STORES
    __stcs(p, v);
#else
    *p = v;
#endif
}

// int32 and int64 indices have their own instantiations (no upcast in memory).
#if CG_STREAM_INDICES
__device__ __forceinline__ i64 load_index(const int* p) { return (i64)__ldcs(p); }
__device__ __forceinline__ i64 load_index(const long long* p) { return (i64)__ldcs(p); }
#else
__device__ __forceinline__ i64 load_index(const int* p) { return (i64)__ldg(p); }
__device__ __forceinline__ i64 load_index(const long long* p) { return (i64)__ldg(p); }
#endif

// The fill value travels as 16 bytes holding the element pattern repeated to
// the unit width; a unit reads its first sizeof(U) bytes.
template <class U>
__device__ __forceinline__ U fill_unit(const u64 (&fill)[2])
{
    U v;
    memcpy(&v, fill, sizeof(U));
    return v;
}

// The fill value of the unit at output unit position ``pos``: units narrower
// than an element (misaligned data or out) take the bytes of the element at
// (pos * sizeof(U)) mod 16 of the repeated pattern, so every element is whole.
template <class U>
__device__ __forceinline__ U fill_at(const u64 (&fill)[2], u64 pos)
{
    if (sizeof(U) == 16) return fill_unit<U>(fill);
    const u32 o = (u32)(pos * sizeof(U)) & 15u;
    const u64 bits = ((o & 8u) ? fill[1] : fill[0]) >> ((o & 7u) * 8u);
    U v;
    memcpy(&v, &bits, sizeof(U));
    return v;
}

// ---------------------------------------------------------------------------
// The flat-position split.  A flat output position t is split over ndim
// dimensions, innermost first: the coordinate of dimension d is
// (t / (dims[0] * ... * dims[d-1])) mod dims[d].  Every dimension but the
// outermost costs one fast_divmod; the outermost takes the quotient (t is
// below the product of all sizes).  visit(d, c, rest) sees each coordinate c
// with rest, the part of t still to be split at dimension d.
// ---------------------------------------------------------------------------
template <class M, class Visit>
__device__ __forceinline__ void split_position(const Divisor (&dims)[CG_MAX_DIMS], int ndim,
                                               typename M::Ix t, Visit visit)
{
    typedef typename M::Ix Ix;
    const int last = ndim - 1;
    Ix rest = t;
#pragma unroll
    for (int d = 0; d < CG_MAX_DIMS; ++d) {
        if (d <= last) {
            Ix c, q = 0;
            if (d < last) divmod<M>(dims[d], rest, q, c);
            else c = rest;
            visit(d, c, rest);
            rest = q;
        }
    }
}

// ---------------------------------------------------------------------------
// The row tile: `rows` rows of `units` units each, moved by a (TX, TY) thread
// block in which each thread moves CU units of up to RU rows (ru <= RU at run
// time), RU * CU loads in flight.  Rows tile blockIdx.x, units blockIdx.y;
// both loop when the grid is smaller.  source(row) resolves a row's first unit
// once per thread (null: the row takes the fill value); load(p) reads one unit.
// Destinations are recomputed from the row number: fewer live registers.
// ---------------------------------------------------------------------------
template <class U, class M, int MODE, int CU, int RU, class Source, class Load>
__device__ __forceinline__ void copy_rows(typename M::Ix rows, typename M::Ix units, char* out,
                                          const u64 (&fill)[2], int ru, Source source, Load load)
{
    typedef typename M::Ix Ix;
    const Ix tx = (Ix)blockDim.x;
    const Ix ty = (Ix)blockDim.y;
    const Ix row_tile = ty * (Ix)ru;
    const Ix unit_tile = tx * CU;

    for (Ix rt = (Ix)blockIdx.x * row_tile + (Ix)threadIdx.y; rt < rows;
         rt += (Ix)gridDim.x * row_tile) {
        const U* src[RU];
        bool live[RU];
#pragma unroll
        for (int kr = 0; kr < RU; ++kr) {
            const Ix row = rt + (Ix)kr * ty;
            live[kr] = kr < ru && row < rows;
            src[kr] = live[kr] ? source(row) : (const U*)0;
        }
        for (Ix ut = (Ix)blockIdx.y * unit_tile + (Ix)threadIdx.x; ut < units;
             ut += (Ix)gridDim.y * unit_tile) {
            U v[RU][CU];
#pragma unroll
            for (int kr = 0; kr < RU; ++kr) {
#pragma unroll
                for (int kc = 0; kc < CU; ++kc) {
                    const Ix u = ut + (Ix)kc * tx;
                    if (live[kr] && u < units)
                        v[kr][kc] = (!may_skip<MODE>() || src[kr])
                            ? load(src[kr] + u)
                            : fill_at<U>(fill, (u64)(rt + (Ix)kr * ty) * (u64)units + (u64)u);
                }
            }
#pragma unroll
            for (int kr = 0; kr < RU; ++kr) {
                U* dst = (U*)out + (u64)(rt + (Ix)kr * ty) * (u64)units;
#pragma unroll
                for (int kc = 0; kc < CU; ++kc) {
                    const Ix u = ut + (Ix)kc * tx;
                    if (live[kr] && u < units) store_stream(dst + u, v[kr][kc]);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Staging: a row of data copied into shared memory with wide loads (the
// inner and slab Gather kernels, GatherElements' elements_row).
// ---------------------------------------------------------------------------
#if !defined(CG_STAGE_ILP)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

// Copy a row into shared memory with up to CG_STAGE_ILP loads in flight per
// thread before the first store (a plain strided loop waits on each load in
// turn), the last round included.
template <class S>
__device__ __forceinline__ void stage_row(const char* row, unsigned char* stage, u64 bytes)
{
    const S* s = (const S*)row;
    S* d = (S*)stage;
    const u64 n = bytes / sizeof(S);
    const u64 bs = blockDim.x;
    u64 j = threadIdx.x;
    for (; j + (CG_STAGE_ILP - 1) * bs < n; j += CG_STAGE_ILP * bs) {
        S v[CG_STAGE_ILP];
#pragma unroll
        for (int k = 0; k < CG_STAGE_ILP; ++k) v[k] = __ldg(s + j + k * bs);
#pragma unroll
        for (int k = 0; k < CG_STAGE_ILP; ++k) d[j + k * bs] = v[k];
    }
    // The rest (fewer than CG_STAGE_ILP loads per thread), four loads in flight.
    for (; j < n; j += 4 * bs) {
        S v[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = j + k * bs < n ? __ldg(s + j + k * bs) : S();
#pragma unroll
        for (int k = 0; k < 4; ++k)
            if (j + k * bs < n) d[j + k * bs] = v[k];
    }
}

// stage_row with the unit S given at run time (1, 2, 4, 8 or 16 bytes: the
// widest that divides the row's address and length).
__device__ __forceinline__ void stage_row_by(u32 unit, const char* row, unsigned char* stage,
                                             u64 bytes)
{
    switch (unit) {
        case 16: stage_row<uint4>(row, stage, bytes); break;
        case 8: stage_row<uint2>(row, stage, bytes); break;
        case 4: stage_row<unsigned int>(row, stage, bytes); break;
        case 2: stage_row<unsigned short>(row, stage, bytes); break;
        default: stage_row<unsigned char>(row, stage, bytes); break;
    }
}

}  // namespace cg

#endif  // CUGATHER_COMMON_CUH
