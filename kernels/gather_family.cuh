// cugather device code: GatherElements (take_along_axis, torch.gather) and
// GatherND.  Each function is the body of one extern "C" entry point rendered
// from templates/gather.cu.j2; common.cuh must come first.
//
// U is the unit moved per load/store (1, 2, 4, 8 or 16 bytes), Idx the index
// element type (int or long long), M the index math (Math32, Math64), MODE the
// out-of-range policy.  Shapes are split on the host into as few dimensions
// as the strides allow, so a thread does one fast_divmod per dimension but
// the outermost.
#ifndef CUGATHER_GATHER_FAMILY_CUH
#define CUGATHER_GATHER_FAMILY_CUH

// Independent elements in flight per thread in the elements kernel (2 with 8
// resident blocks beat 4 and 8 with fewer, measured on H200).
#ifndef CG_ELEMENTS_ILP
#define CG_ELEMENTS_ILP 2
#endif
// Rows per thread in the nd kernel for short rows (cugather/_family_plan.py
// ND_SHORT_ROWS sizes the grid with it).
#ifndef CG_ND_SHORT_RU
#define CG_ND_SHORT_RU 2
#endif

namespace cg {

// ---------------------------------------------------------------------------
// Argument blocks, passed by value (cugather/_layout.py mirrors them).
// ---------------------------------------------------------------------------

// elements: out (contiguous, `total` units) is split, innermost first, into
// ndim dimensions.  A coordinate c of dimension d moves c * strides[d] bytes
// in data and c * index_strides[d] elements in indices (0 where broadcast);
// the gathered axis has data stride 0 and adds index * s_axis instead.
struct ElementsArgs {
    const char* data;
    const void* indices;
    char* out;
    u64 total;
    i64 axis_len;
    i64 s_axis;   // bytes per step of an index value
    u32 ndim;       // >= 1; the outermost dimension takes the quotient, no division
    u32 col_tiles;  // 0: slots in flat order; else column tiles (see gather_elements)
    u64 cols;       // column-tile order: units per row
    u64 row_tiles;  // column-tile order: tiles of CG_ELEMENTS_ILP * blockDim.x / 32 rows
    Divisor dims[CG_MAX_DIMS];
    i64 strides[CG_MAX_DIMS];        // bytes
    u64 index_strides[CG_MAX_DIMS];  // index elements
    u64 fill[2];
};

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
    u64 rows;
    u64 units;
    u32 ndim;
    u32 tuple_dim;
    u32 m;
    u32 tile_cu;  // units per thread along a row: 1 (short rows) or 4 (long rows)
    u32 tile_ru;  // rows per thread: 4 or 1 (informative; follows tile_cu)
    u32 pad;
    Divisor dims[CG_MAX_DIMS];
    i64 strides[CG_MAX_DIMS];       // bytes
    i64 bounds[CG_MAX_DIMS];
    i64 comp_strides[CG_MAX_DIMS];  // bytes
    u64 fill[2];
};

// raise-mode bounds check of GatherND indices: value p is component p mod m.
struct NDCheckArgs {
    const void* indices;
    u64 n;
    u64* first_bad;  // atomicMin of the positions of out-of-range values
    Divisor m_div;
    i64 bounds[CG_MAX_DIMS];
};

// ---------------------------------------------------------------------------
// elements: one output unit per element slot, CG_ELEMENTS_ILP independent
// slots per thread.  Each slot costs ndim - 1 fast_divmods, one index load
// and one data load.  Units wider than an element occur when indices are
// broadcast over a contiguous run of data (take_along_axis with a size-1
// index dimension).
//
// Slots are visited in one of two orders, uniform over the grid:
//   flat         a block takes CG_ELEMENTS_ILP * blockDim.x consecutive
//                slots, strided by the block (coalesced indices and output);
//   column tiles the output as (rows, cols), cols the dimensions inside the
//                gathered one: a warp takes 32 consecutive columns of one row,
//                and consecutive blocks walk down the rows of one 32-column
//                tile.  The blocks resident at a time then read a narrow band
//                of columns from every table row they pick, so rows picked
//                again hit L2 instead of DRAM (random picks along a leading
//                axis of a table larger than L2).
// ---------------------------------------------------------------------------
template <class M>
__device__ __forceinline__ void elements_offsets(const ElementsArgs& a, typename M::Ix t,
                                                 i64& off, typename M::Ix& ipos)
{
    typedef typename M::Ix Ix;
    const int last = (int)a.ndim - 1;
    Ix rest = t;
    off = 0;
    ipos = 0;
#pragma unroll
    for (int d = 0; d < CG_MAX_DIMS; ++d) {
        if (d <= last) {
            Ix c;
            if (d < last) {
                Ix q;
                divmod<M>(a.dims[d], rest, q, c);
                rest = q;
            } else {
                c = rest;
            }
            off += (i64)c * a.strides[d];
            ipos += c * (Ix)a.index_strides[d];
        }
    }
}

// Gather the slots t[k] with live[k]: every index and data load is issued
// before the first store.
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void elements_slots(const ElementsArgs& a,
                                               const typename M::Ix (&t)[CG_ELEMENTS_ILP],
                                               const bool (&live)[CG_ELEMENTS_ILP])
{
    typedef typename M::Ix Ix;
    const Idx* idx = (const Idx*)a.indices;
    U* out = (U*)a.out;
    i64 off[CG_ELEMENTS_ILP];
    bool keep[CG_ELEMENTS_ILP];
#pragma unroll
    for (int k = 0; k < CG_ELEMENTS_ILP; ++k) {
        off[k] = 0;
        keep[k] = false;
        if (live[k]) {
            Ix ipos;
            elements_offsets<M>(a, t[k], off[k], ipos);
            i64 i = load_index(idx + ipos);
            keep[k] = resolve<MODE>(i, a.axis_len);
            if (keep[k]) off[k] += i * a.s_axis;  // discarded indices may be near 2^63
        }
    }
    U v[CG_ELEMENTS_ILP];
#pragma unroll
    for (int k = 0; k < CG_ELEMENTS_ILP; ++k)
        if (live[k]) v[k] = keep[k] ? __ldg((const U*)(a.data + off[k])) : fill_at<U>(a.fill, t[k]);
#pragma unroll
    for (int k = 0; k < CG_ELEMENTS_ILP; ++k)
        if (live[k]) store_stream(out + t[k], v[k]);
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_elements(const ElementsArgs& a)
{
    typedef typename M::Ix Ix;
    const Ix total = (Ix)a.total;
    const Ix bs = (Ix)blockDim.x;
    Ix t[CG_ELEMENTS_ILP];
    bool live[CG_ELEMENTS_ILP];

    if (a.col_tiles == 0) {
        const Ix tile = bs * CG_ELEMENTS_ILP;
        for (Ix base = (Ix)blockIdx.x * tile + (Ix)threadIdx.x; base < total;
             base += (Ix)gridDim.x * tile) {
#pragma unroll
            for (int k = 0; k < CG_ELEMENTS_ILP; ++k) {
                t[k] = base + (Ix)k * bs;
                live[k] = t[k] < total;
            }
            elements_slots<U, Idx, M, MODE>(a, t, live);
        }
        return;
    }
    // Column tiles (the last tile of rows and of columns may overhang).
    const Ix cols = (Ix)a.cols;
    const Ix rows = total / cols;  // once per thread
    const Ix row_tiles = (Ix)a.row_tiles;
    const Ix n_tiles = row_tiles * (Ix)a.col_tiles;
    const Ix warps = bs >> 5;
    const Ix lane = (Ix)threadIdx.x & 31;
    const Ix warp = (Ix)threadIdx.x >> 5;
    for (Ix b = blockIdx.x; b < n_tiles; b += gridDim.x) {
        const Ix ct = b / row_tiles;  // once per tile of CG_ELEMENTS_ILP * bs slots
        const Ix col = ct * 32 + lane;
        const Ix row = (b - ct * row_tiles) * warps * CG_ELEMENTS_ILP + warp;
#pragma unroll
        for (int k = 0; k < CG_ELEMENTS_ILP; ++k) {
            const Ix r = row + (Ix)k * warps;
            live[k] = col < cols && r < rows;
            t[k] = live[k] ? r * cols + col : 0;
        }
        elements_slots<U, Idx, M, MODE>(a, t, live);
    }
}

// Loads of GatherND slices.  With CG_ND_SLICE_NO_L1 (the default) slices of
// two units or more skip L1 allocation (ld.global.nc.L1::no_allocate):
// measured on H200, +4% on 1 KB slices, +14% on 128 B slices.  (The rows
// kernels of gather.cuh measured the opposite, 0% to -26%, and keep
// __ldg; so do single-unit picks, where L1 serves repeated sectors.)
#ifndef CG_ND_SLICE_NO_L1
#define CG_ND_SLICE_NO_L1 1
#endif
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
// nd: GatherND as a row copy, tiled like the rows and chunks kernels of
// gather.cuh.  A block is a (TX, TY) grid of threads; each thread moves CU
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
    const int last = (int)a.ndim - 1;
    Ix rest = row;
    Ix tuple = 0;
    i64 off = 0;
#pragma unroll
    for (int d = 0; d < CG_MAX_DIMS; ++d) {
        if (d == (int)a.tuple_dim) tuple = rest;
        if (d <= last) {
            Ix c;
            if (d < last) {
                Ix q;
                divmod<M>(a.dims[d], rest, q, c);
                rest = q;
            } else {
                c = rest;
                rest = 0;
            }
            off += (i64)c * a.strides[d];
        }
    }
    const Idx* t = (const Idx*)a.indices + (u64)tuple * a.m;
    bool keep = true;
#pragma unroll
    for (int k = 0; k < CG_MAX_DIMS; ++k) {
        if (k < (int)a.m) {
            i64 i = load_index(t + k);
            const bool ok = resolve<MODE>(i, a.bounds[k]);
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
    const Ix rows = (Ix)a.rows;
    const Ix units = (Ix)a.units;
    const Ix tx = (Ix)blockDim.x;
    const Ix ty = (Ix)blockDim.y;
    const Ix row_tile = ty * RU;
    const Ix unit_tile = tx * CU;
    const bool picks = units == 1;  // rows of one unit are random picks: keep L1

    for (Ix rt = (Ix)blockIdx.x * row_tile + (Ix)threadIdx.y; rt < rows;
         rt += (Ix)gridDim.x * row_tile) {
        const U* src[RU];
#pragma unroll
        for (int kr = 0; kr < RU; ++kr) {
            const Ix row = rt + (Ix)kr * ty;
            src[kr] = row < rows ? (const U*)nd_row_source<Idx, M, MODE>(a, row) : 0;
        }
        for (Ix ut = (Ix)blockIdx.y * unit_tile + (Ix)threadIdx.x; ut < units;
             ut += (Ix)gridDim.y * unit_tile) {
            U v[RU][CU];
#pragma unroll
            for (int kr = 0; kr < RU; ++kr) {
#pragma unroll
                for (int kc = 0; kc < CU; ++kc) {
                    const Ix u = ut + (Ix)kc * tx;
                    const Ix row = rt + (Ix)kr * ty;
                    if (row < rows && u < units)
                        v[kr][kc] = (MODE != MODE_FILL || src[kr])
                                        ? (picks ? __ldg(src[kr] + u) : load_slice(src[kr] + u))
                                        : fill_at<U>(a.fill, (u64)row * (u64)units + (u64)u);
                }
            }
#pragma unroll
            for (int kr = 0; kr < RU; ++kr) {
                const Ix row = rt + (Ix)kr * ty;
                U* dst = (U*)a.out + (u64)row * (u64)units;
#pragma unroll
                for (int kc = 0; kc < CU; ++kc) {
                    const Ix u = ut + (Ix)kc * tx;
                    if (row < rows && u < units) store_stream(dst + u, v[kr][kc]);
                }
            }
        }
    }
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_nd(const NDArgs& a)
{
    // Uniform across the grid, so the branch never diverges.
    if (a.tile_cu == 4) nd_tile<U, Idx, M, MODE, 4, 1>(a);
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

#endif  // CUGATHER_GATHER_FAMILY_CUH
