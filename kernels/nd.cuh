// cugather device code: GatherND, its raise-mode bounds check and their
// argument structs.  The bodies of the extern "C" entry points rendered from
// templates/gather.cu.j2; common.cuh comes first.
//
// U is the unit moved per load/store (1, 2, 4, 8 or 16 bytes), Idx the index
// element type (int or long long), M the index math (Math32, Math64), MODE the
// out-of-range policy.
#ifndef CUGATHER_ND_CUH
#define CUGATHER_ND_CUH

#if !defined(CG_ND_SHORT_RU) || !defined(CG_ND_LONG_CU) || !defined(CG_ND_SLICE_NO_L1)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

namespace cg {

// Argument structs, passed by value (cugather/plan/layout.py mirrors them).
// nd: out is (rows, units); a row is a run of `units` units contiguous in
// data and in out.  The row number is split, innermost first, into ndim
// dimensions with data strides; after the first tuple_dim of them the
// quotient is the position of the row's index tuple (its m components are
// contiguous in indices).  Component k must lie in [-bounds[k], bounds[k])
// and moves comp_strides[k] bytes per step.
struct NDArgs {
    const char* data;
    const void* indices;
    char* out;
    u64* first_bad;  // raise mode: the first bad value's position (see resolve_checked)
    u64 rows;
    u64 units;
    u32 ndim;
    u32 tuple_dim;
    u32 m;
    u32 tile_cu;  // units per thread along a row: 1 (short rows, CG_ND_SHORT_RU rows
                  // per thread) or CG_ND_LONG_CU (long rows, one row per thread)
    Divisor dims[CG_MAX_DIMS];
    i64 strides[CG_MAX_DIMS];       // bytes
    i64 bounds[CG_MAX_DIMS];
    i64 comp_strides[CG_MAX_DIMS];  // bytes
    u64 fill[2];
};

// raise-mode bounds check of GatherND indices: value p is component p mod m.
struct NDCheckArgs {
    const void* indices;
    u64* first_bad;  // atomicMin of the positions of out-of-range values
    u64 n;
    Divisor m_div;
    i64 bounds[CG_MAX_DIMS];
};

// Loads of GatherND slices.  With CG_ND_SLICE_NO_L1 slices of
// two units or more skip L1 allocation (ld.global.nc.L1::no_allocate):
// measured on H200, +4% on 1 KB slices, +14% on 128 B slices.  (The rows
// kernels of gather.cuh measured the opposite, 0% to -26%, and keep
// __ldg; so do single-unit picks, where L1 serves repeated sectors.)
#if CG_ND_SLICE_NO_L1 && defined(__CUDA_ARCH__)
__device__ __forceinline__ unsigned char load_slice(const unsigned char* p)
{
    unsigned short v;
    asm("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=h"(v) : "l"(p));
    return (unsigned char)v;
}
__device__ __forceinline__ unsigned short load_slice(const unsigned short* p)
{
    unsigned short v;
    asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ unsigned int load_slice(const unsigned int* p)
{
    unsigned int v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 load_slice(const uint2* p)
{
    uint2 v;
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 load_slice(const uint4* p)
{
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
#else
template <class U>
__device__ __forceinline__ U load_slice(const U* p) { return __ldg(p); }
#endif

// ---------------------------------------------------------------------------
// nd: GatherND as a row copy through copy_rows (common.cuh), tiled like the
// rows and chunks kernels of gather.cuh.  A block is a (TX, TY) grid of threads; each thread moves CU
// units of RU rows: short rows (up to 256 units) take CU = 1,
// RU = CG_ND_SHORT_RU (2; with 8 resident blocks it beat 1, 4 and 8 on H200)
// and several rows per block; long rows take CU = 4, RU = 1 and a (row x chunk)
// grid over blockIdx.y.  A row's source is resolved once per thread: ndim - 1
// fast_divmods for its coordinates (slice dimensions outside the contiguous
// run, then the batch dimensions) and m index loads, all issued before any
// data load.
// ---------------------------------------------------------------------------
template <class Idx, class M, int MODE>
__device__ __forceinline__ const char* nd_row_source(const NDArgs& a, typename M::Ix row)
{
    typedef typename M::Ix Ix;
    Ix tuple = 0;  // stays 0 when no dimension lies outside the slice (one tuple)
    i64 off = 0;
    split_position<M>(a.dims, (int)a.ndim, row, [&](int d, Ix c, Ix rest) {
        if (d == (int)a.tuple_dim) tuple = rest;
        off += (i64)c * a.strides[d];
    });
    const Idx* t = (const Idx*)a.indices + (u64)tuple * a.m;
    bool keep = true;
#pragma unroll
    for (int k = 0; k < CG_MAX_DIMS; ++k) {
        if (k < (int)a.m) {
            i64 i = load_index(t + k);
            const bool ok = resolve_checked<MODE>(i, a.bounds[k], a.first_bad,
                                                      (u64)tuple * a.m + (u64)k);
            keep = ok && keep;
            if (ok) off += i * a.comp_strides[k];  // discarded indices may be near 2^63
        }
    }
    return keep ? a.data + off : (const char*)0;  // null: the row takes the fill value
}

template <class U, class Idx, class M, int MODE, int CU, int RU>
__device__ __forceinline__ void nd_tile(const NDArgs& a)
{
    typedef typename M::Ix Ix;
    const bool picks = a.units == 1;  // rows of one unit are random picks: keep L1
    copy_rows<U, M, MODE, CU, RU>(
        (Ix)a.rows, (Ix)a.units, a.out, a.fill, RU,
        [&](Ix row) { return (const U*)nd_row_source<Idx, M, MODE>(a, row); },
        [&](const U* p) { return picks ? __ldg(p) : load_slice(p); });
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_nd(const NDArgs& a)
{
    // Uniform across the grid, so the branch never diverges.
    if (a.tile_cu == CG_ND_LONG_CU) nd_tile<U, Idx, M, MODE, CG_ND_LONG_CU, 1>(a);
    else nd_tile<U, Idx, M, MODE, 1, CG_ND_SHORT_RU>(a);
}

// ---------------------------------------------------------------------------
// check_nd: raise mode runs this before gather_nd; it records the first
// position whose value lies outside [-bounds[k], bounds[k]) for its
// component k.  The bound is picked by selects, not by a dynamic index into
// the parameter block (which would copy it to local memory).
// ---------------------------------------------------------------------------
template <class Idx>
__device__ __forceinline__ void check_nd(const NDCheckArgs& a)
{
    const Idx* idx = (const Idx*)a.indices;
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x; p < a.n; p += step) {
        u64 q, k;
        divmod<Math64>(a.m_div, p, q, k);
        i64 s = a.bounds[0];
#pragma unroll
        for (int j = 1; j < CG_MAX_DIMS; ++j)
            if (k == (u64)j) s = a.bounds[j];
        const i64 i = load_index(idx + p);
        if (i < -s || i >= s) atomicMin(a.first_bad, (unsigned long long)p);
    }
}

}  // namespace cg

#endif  // CUGATHER_ND_CUH
