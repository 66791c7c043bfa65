// cugather device code: the Gather / take kernels and their argument structs.
// Each function is the body of one extern "C" entry point rendered from
// templates/gather.cu.j2; common.cuh comes first.
//
// U is the unit moved per load/store (1, 2, 4, 8 or 16 bytes), Idx the index
// element type (int or long long), M the index math (Math32, Math64,
// MathDiv64), MODE the out-of-range policy.
#ifndef CUGATHER_GATHER_CUH
#define CUGATHER_GATHER_CUH

#if !defined(CG_SCALAR_ILP) || !defined(CG_ROWS_NARROW_CU) || !defined(CG_ROWS_MAX_RU) || \
    !defined(CG_CHUNKS_CU) || !defined(CG_CHUNKS16_CU) || !defined(CG_STAGE_ILP)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

namespace cg {

// ---------------------------------------------------------------------------
// Argument structs, passed by value (cugather/plan/layout.py mirrors them;
// every rendered source asserts the offsets).
// ---------------------------------------------------------------------------

// rows, chunks, scalar and inner: data viewed as (outer, axis_len, row) with a
// contiguous row of `units` units, output as (outer * n_indices, row).
struct GatherArgs {
    const char* data;
    const void* indices;
    char* out;
    u64* first_bad;  // raise mode: the first bad index position (see resolve_checked)
    i64 s_outer;     // bytes between outer slices of data (signed)
    i64 s_axis;      // bytes between consecutive positions on the gather axis (signed)
    i64 axis_len;
    u64 rows;        // outer * n_indices: rows of the output
    u64 units;       // units per row
    u64 n_indices;
    u64 outer;
    Divisor n_div;   // n_indices, splits an output row into (outer, index position)
    u32 chunk;       // inner kernel: indices per block
    u32 stage_unit;  // inner kernel: bytes per staging load
    u32 row_unroll;  // rows kernel: rows per thread, 1 .. CG_ROWS_MAX_RU
    u32 pad;
    u64 fill[2];
};

// strided: any strides.  The output (contiguous) is split, innermost first,
// into ndim dimensions; dimension index_dim is the indices dimension.
struct StridedArgs {
    const char* data;
    const void* indices;
    char* out;
    u64* first_bad;
    u64 total;       // units in the output
    i64 axis_len;
    i64 s_axis;      // bytes
    u32 ndim;
    u32 index_dim;
    Divisor dims[CG_MAX_DIMS];
    i64 strides[CG_MAX_DIMS];  // bytes, per output dimension (unused for index_dim)
    u64 fill[2];
};

// window: contiguous rows of `row_bytes` (not a multiple of 16) at any
// alignment, output as 16-byte chunks.  lo and hi bound the bytes of data
// that may be read, relative to data.
struct WindowArgs {
    const char* data;
    const void* indices;
    char* out;
    u64* first_bad;
    i64 s_outer;
    i64 s_axis;
    i64 axis_len;
    u64 rows;
    u64 row_bytes;
    u64 out_bytes;   // rows * row_bytes
    u64 chunks;      // ceil(out_bytes / 16)
    i64 lo;
    i64 hi;
    Divisor n_div;   // n_indices, splits a row into (outer, index position)
    Divisor row_div; // row_bytes, splits an output byte offset into (row, offset)
    u64 fill[2];
};

// flat: contiguous rows of `units` units (U narrower than 16 bytes) written
// to the contiguous output as chunks of flat_units<U>() units each (16 bytes;
// 8 for 1-byte units).
struct FlatArgs {
    const char* data;
    const void* indices;
    char* out;
    u64* first_bad;
    i64 s_outer;
    i64 s_axis;
    i64 axis_len;
    u64 total;       // units in the output: outer * n_indices * units
    u64 chunks;      // ceil(total / flat_units<U>())
    Divisor n_div;   // n_indices, splits a row into (outer, index position)
    Divisor unit_div; // units per row, splits a flat unit position into (row, unit)
    u32 group;       // slabf, slabr: outer rows staged per block (0 for the other kinds)
    u32 stage_unit;  // slabf: bytes per staging load; slabr: its order (0 or 1)
    u64 fill[2];
};

// span: contiguous rows of `row_bytes` (any length, at least 16) at any
// alignment, output as aligned 16-byte chunks; a warp takes an item, a segment
// of 32 * CG_SPAN_V chunks of a row.  lo and hi as in window.
struct SpanArgs {
    const char* data;
    const void* indices;
    char* out;
    u64* first_bad;
    i64 s_outer;
    i64 s_axis;
    i64 axis_len;
    u64 rows;        // outer * n_indices
    u64 row_bytes;
    i64 lo;
    i64 hi;
    Divisor n_div;   // n_indices, splits a row into (outer, index position)
    Divisor seg_div; // segments per row (32 * CG_SPAN_V output chunks each), splits an item
    u64 items;       // rows * segments per row: one warp at a time each
    u64 fill[2];
};

// raise-mode bounds check over the indices (Gather, take, GatherElements), run
// before the gather where out= is given, and to name the exact first bad position.
struct CheckArgs {
    const void* indices;
    u64* first_bad;  // atomicMin of the positions of out-of-range indices
    u64 n;
    i64 axis_len;
};


// ---------------------------------------------------------------------------
// rows and chunks: rows of two units or more through copy_rows (common.cuh).
//   rows   (short rows): CU = 16 / sizeof(U) units per thread per row for
//          8- and 16-byte units, CG_ROWS_NARROW_CU for narrower ones (those
//          gain more from extra resident threads than from extra registers),
//          and up to CG_ROWS_MAX_RU rows per thread (fewer on small problems,
//          to even out the waves); TX = ceil(units / CU) threads per row, a
//          block holds 256 / TX rows.
//   chunks (long rows): one row per block row, CG_CHUNKS_CU units per thread,
//          the row split into chunks over blockIdx.y: a 2-D (row x chunk) grid.
//   chunks16: chunks with CG_CHUNKS16_CU units per thread (2- and 4-byte
//          units): more bytes in flight per thread where a row comes from DRAM.
// A row's index and source address are resolved once per thread.
// ---------------------------------------------------------------------------
template <class U, class Idx, class M, int MODE, int CU, int RU>
__device__ __forceinline__ void gather_row_tiles(const GatherArgs& a, const int ru)
{
    typedef typename M::Ix Ix;
    const Idx* idx = (const Idx*)a.indices;
    copy_rows<U, M, MODE, CU, RU>(
        (Ix)a.rows, (Ix)a.units, a.out, a.fill, ru,
        [&](Ix row) -> const U* {
            Ix o, n;
            divmod<M>(a.n_div, row, o, n);
            i64 i = load_index(idx + n);
            if (!resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)n)) return (const U*)0;
            return (const U*)(a.data + (i64)o * a.s_outer + i * a.s_axis);
        },
        [](const U* p) { return __ldg(p); });
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_rows(const GatherArgs& a)
{
    gather_row_tiles<U, Idx, M, MODE, (sizeof(U) >= 8 ? 16 / sizeof(U) : CG_ROWS_NARROW_CU),
                     CG_ROWS_MAX_RU>(a, (int)a.row_unroll);
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_chunks(const GatherArgs& a)
{
    gather_row_tiles<U, Idx, M, MODE, CG_CHUNKS_CU, 1>(a, 1);
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_chunks16(const GatherArgs& a)
{
    gather_row_tiles<U, Idx, M, MODE, CG_CHUNKS16_CU, 1>(a, 1);
}

// ---------------------------------------------------------------------------
// scalar: rows of one unit (a single element, or a tiny inner block moved as
// one unit).  Each thread keeps CG_SCALAR_ILP independent random loads in
// flight; index loads and output stores stay coalesced across the warp.
// ---------------------------------------------------------------------------
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_scalar(const GatherArgs& a)
{
    typedef typename M::Ix Ix;
    const Ix rows = (Ix)a.rows;
    const Ix bs = (Ix)blockDim.x;
    const Ix tile = bs * CG_SCALAR_ILP;
    const Idx* idx = (const Idx*)a.indices;
    U* out = (U*)a.out;
    const U fillv = fill_unit<U>(a.fill);

    for (Ix base = (Ix)blockIdx.x * tile + (Ix)threadIdx.x; base < rows;
         base += (Ix)gridDim.x * tile) {
        i64 off[CG_SCALAR_ILP];
        bool keep[CG_SCALAR_ILP];
#pragma unroll
        for (int k = 0; k < CG_SCALAR_ILP; ++k) {
            const Ix r = base + (Ix)k * bs;
            off[k] = 0;
            keep[k] = false;
            if (r < rows) {
                Ix o, n;
                divmod<M>(a.n_div, r, o, n);
                i64 i = load_index(idx + n);
                keep[k] = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)n);
                // Only resolved indices are scaled: a discarded one may be near 2^63.
                off[k] = keep[k] ? (i64)o * a.s_outer + i * a.s_axis : 0;
            }
        }
        U v[CG_SCALAR_ILP];
#pragma unroll
        for (int k = 0; k < CG_SCALAR_ILP; ++k) {
            const Ix r = base + (Ix)k * bs;
            if (r < rows) v[k] = keep[k] ? __ldg((const U*)(a.data + off[k])) : fillv;
        }
#pragma unroll
        for (int k = 0; k < CG_SCALAR_ILP; ++k) {
            const Ix r = base + (Ix)k * bs;
            if (r < rows) store_stream(out + r, v[k]);
        }
    }
}

// ---------------------------------------------------------------------------
// inner: rows of one unit whose whole axis fits in shared memory (the gather
// axis is the last one, or the inner block is one tiny unit).  A block stages
// an outer row once with wide coalesced loads, then picks its chunk of the
// indices from shared memory and writes them coalesced.  blockIdx.x walks
// chunks of the indices (adjacent blocks share a row, which stays in L2),
// blockIdx.y walks outer rows; both loop when the grid is smaller.
// ---------------------------------------------------------------------------
// (stage_row, the staging loop, is in common.cuh.)
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_inner(const GatherArgs& a)
{
    typedef typename M::Ix Ix;
    CG_DYNAMIC_SMEM(unsigned char, stage);
    const U* staged = (const U*)stage;
    const Ix n_idx = (Ix)a.n_indices;
    const Ix outer = (Ix)a.outer;
    const Idx* idx = (const Idx*)a.indices;
    const U fillv = fill_unit<U>(a.fill);
    const u64 row_bytes = (u64)a.axis_len * sizeof(U);
    const Ix chunk = (Ix)a.chunk;

    for (Ix o = blockIdx.y; o < outer; o += gridDim.y) {
        const char* row = a.data + (i64)o * a.s_outer;
        stage_row_by(a.stage_unit, row, stage, row_bytes);
        __syncthreads();
        U* dst = (U*)a.out + (u64)o * (u64)n_idx;
        for (Ix first = (Ix)blockIdx.x * chunk; first < n_idx; first += (Ix)gridDim.x * chunk) {
            const Ix last = (n_idx - first < chunk) ? n_idx : first + chunk;
#pragma unroll 4
            for (Ix n = first + (Ix)threadIdx.x; n < last; n += blockDim.x) {
                i64 i = load_index(idx + n);
                store_stream(dst + n, resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)n)
                                           ? staged[i] : fillv);
            }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------
// slab: rows of one unit from a table small enough to stage several outer rows
// (often all of them) in shared memory.  blockIdx.y takes a group of `chunk`
// outer rows and stages it once; each thread then loads its indices once and
// writes those picks for every outer row of the group (coalesced across the
// warp for each row), where the inner kernel reloads every index once per
// outer row.  blockIdx.x and blockIdx.y loop when the grid is smaller.
// gather_slab writes one pick at a time; gather_slabw (1-, 2- and 4-byte units)
// slab_word(unit) bytes at a time, several consecutive picks.
// ---------------------------------------------------------------------------
#if !defined(CG_SLAB_ILP) || !defined(CG_SLAB_WORD_U1) || !defined(CG_SLAB_WORD_U2) || \
    !defined(CG_SLAB_WORD_U4) || !defined(CG_SLAB_ALIGN)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

// Output bytes per store of slabw for a unit of `unit` bytes (a word no wider
// than the unit: no slabw for that unit).
__host__ __device__ constexpr int slab_word(int unit)
{
    return unit == 1 ? CG_SLAB_WORD_U1 : unit == 2 ? CG_SLAB_WORD_U2
         : unit == 4 ? CG_SLAB_WORD_U4 : unit;
}
static_assert((slab_word(1) == 1 || slab_word(1) == 4 || slab_word(1) == 8) &&
              (slab_word(2) == 2 || slab_word(2) == 4 || slab_word(2) == 8) &&
              (slab_word(4) == 4 || slab_word(4) == 8), "slabw stores words of 4 or 8 bytes");

// Stage outer rows o0 .. o0 + rows - 1 of the axis (row_bytes each, s_outer
// apart in data) back to back, in loads of stage_unit bytes.
__device__ __forceinline__ void slab_stage(const char* data, i64 s_outer, u32 stage_unit, u64 o0,
                                           u64 rows, u64 row_bytes, unsigned char* stage)
{
    // One contiguous run when the outer rows are back to back, else row by row.
    const bool packed = s_outer == (i64)row_bytes;
    for (u64 r = 0; r < (packed ? 1 : rows); ++r) {
        const char* src = data + (i64)(o0 + r) * s_outer;
        const u64 bytes = packed ? rows * row_bytes : row_bytes;
        stage_row_by(stage_unit, src, stage + r * row_bytes, bytes);
    }
}

#if CG_SLAB_ALIGN
// slab with each warp's stores on whole 32-unit stretches of the output: output
// row r starts h_r = (row start in units) mod 32 units past such a stretch, so
// slot k of every row takes pick k - h_r, whose staged offset the warp holds in
// lane (lane - h_r) mod 32, among its own picks (k - lane ..) or the 32 before
// (k - lane - 32 ..), each lane having resolved one of each.  A row that starts
// misaligned otherwise splits a sector between two warps, which store it at
// different times.
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void slab_aligned(const GatherArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int NONE = -2, FILL = -1;  // no pick here; a pick that takes the fill value
    CG_DYNAMIC_SMEM(unsigned char, stage);
    const U* staged = (const U*)stage;
    const u64 n_idx = a.n_indices;
    const Ix outer = (Ix)a.outer;
    const Ix group = (Ix)a.chunk;
    const Idx* idx = (const Idx*)a.indices;
    const U fillv = fill_unit<U>(a.fill);
    const u64 row_bytes = (u64)a.axis_len * sizeof(U);
    const u64 slots = n_idx + 31;  // slots of a row at any phase
    const u32 lane = threadIdx.x & 31;
    const u64 step = (u64)gridDim.x * blockDim.x;

    for (Ix o0 = (Ix)blockIdx.y * group; o0 < outer; o0 += (Ix)gridDim.y * group) {
        const Ix rows = (outer - o0 < group) ? outer - o0 : group;
        slab_stage(a.data, a.s_outer, a.stage_unit, o0, rows, row_bytes, stage);
        __syncthreads();
        // whole warps loop (the shuffles below); lanes past the last slot write nothing
        for (u64 k0 = (u64)blockIdx.x * blockDim.x + threadIdx.x; k0 - lane < slots;
             k0 += step * CG_SLAB_ILP) {
            int cur[CG_SLAB_ILP], prev[CG_SLAB_ILP];
            i64 ic[CG_SLAB_ILP], ip[CG_SLAB_ILP];
#pragma unroll
            for (int j = 0; j < CG_SLAB_ILP; ++j) {  // every load in flight before any is used
                const u64 n = k0 + j * step;
                ic[j] = n < n_idx ? load_index(idx + n) : 0;
                ip[j] = (n >= 32 && n - 32 < n_idx) ? load_index(idx + (n - 32)) : 0;
            }
#pragma unroll
            for (int j = 0; j < CG_SLAB_ILP; ++j) {
                const u64 n = k0 + j * step;
                cur[j] = n < n_idx ? (resolve_checked<MODE>(ic[j], a.axis_len, a.first_bad, n)
                                      ? (int)ic[j] : FILL) : NONE;
                prev[j] = (n >= 32 && n - 32 < n_idx)
                              ? (resolve_checked<MODE>(ip[j], a.axis_len, a.first_bad, n - 32)
                                 ? (int)ip[j] : FILL) : NONE;
            }
            u64 start = (u64)o0 * n_idx;  // the row's first output unit
#pragma unroll 2
            for (Ix r = 0; r < rows; ++r) {
                const u32 h = (u32)start & 31u;
                const u32 src = (lane - h) & 31u;
                const U* row = staged + (u64)r * (u64)a.axis_len;
                U* dst = (U*)a.out + (start - h);
#pragma unroll
                for (int j = 0; j < CG_SLAB_ILP; ++j) {
                    const int c = __shfl_sync(0xffffffffu, cur[j], src);
                    const int p = __shfl_sync(0xffffffffu, prev[j], src);
                    const int o = lane >= h ? c : p;
                    if (o != NONE) store_stream(dst + (k0 + j * step), o >= 0 ? row[o] : fillv);
                }
                start += n_idx;
            }
        }
        __syncthreads();
    }
}
#endif

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_slab(const GatherArgs& a)
{
#if CG_SLAB_ALIGN
    slab_aligned<U, Idx, M, MODE>(a);
#else
    typedef typename M::Ix Ix;
    CG_DYNAMIC_SMEM(unsigned char, stage);
    const U* staged = (const U*)stage;
    const Ix n_idx = (Ix)a.n_indices;
    const Ix outer = (Ix)a.outer;
    const Ix group = (Ix)a.chunk;
    const Ix axis_len = (Ix)a.axis_len;
    const Idx* idx = (const Idx*)a.indices;
    const U fillv = fill_unit<U>(a.fill);
    const u64 row_bytes = (u64)a.axis_len * sizeof(U);

    for (Ix o0 = (Ix)blockIdx.y * group; o0 < outer; o0 += (Ix)gridDim.y * group) {
        const Ix rows = (outer - o0 < group) ? outer - o0 : group;
        slab_stage(a.data, a.s_outer, a.stage_unit, o0, rows, row_bytes, stage);
        __syncthreads();
        U* out = (U*)a.out + (u64)o0 * (u64)n_idx;
        const u64 step = (u64)gridDim.x * blockDim.x;
        for (u64 n0 = (u64)blockIdx.x * blockDim.x + threadIdx.x; n0 < (u64)n_idx;
             n0 += step * CG_SLAB_ILP) {
            // CG_SLAB_ILP index loads in flight before the first is used (one at a
            // time: 61% of copy on 3 outer rows of 1-byte picks; 4: 91%)
            i64 ii[CG_SLAB_ILP];
#pragma unroll
            for (int k = 0; k < CG_SLAB_ILP; ++k) {
                const u64 n = n0 + k * step;
                ii[k] = n < (u64)n_idx ? load_index(idx + n) : 0;
            }
#pragma unroll
            for (int k = 0; k < CG_SLAB_ILP; ++k) {
                const u64 n = n0 + k * step;
                if (n >= (u64)n_idx) break;
                i64 i = ii[k];
                const bool keep = resolve_checked<MODE>(i, a.axis_len, a.first_bad, n);
                const U* src = staged + (keep ? (Ix)i : (Ix)0);
                U* dst = out + n;
#pragma unroll 4
                for (Ix r = 0; r < rows; ++r) {
                    store_stream(dst, keep ? *src : fillv);
                    src += axis_len;
                    dst += n_idx;
                }
            }
        }
        __syncthreads();
    }
#endif
}

template <int BYTES> struct SlabWord;
template <> struct SlabWord<4> { typedef u32 T; };
template <> struct SlabWord<8> { typedef u64 T; };

// slabw: P = slab_word(unit) / unit consecutive picks per aligned output
// word (one 1-byte pick per store measured 41% of copy, 4-byte picks 92%).
// Output row r starts P-misaligned by h_r = (row start in units) mod P, the
// same for every thread, so a thread's word slot k covers picks k*P - h_r ..
// k*P - h_r + P - 1 of each row: of the 2P - 1 picks from k*P - (P - 1) it
// loads its own P (from k*P) once, takes the P - 1 before them from the lane
// before (lane 0 loads them too), and each row takes the P its phase selects.
// A word partly outside its row (the row's first and last) is written unit by
// unit.  The output's base is word-aligned (plan/gather.py checks).
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_slabw(const GatherArgs& a)
{
    static_assert(sizeof(U) < slab_word(sizeof(U)), "slabw: a unit narrower than its word");
    typedef typename M::Ix Ix;
    typedef typename SlabWord<slab_word(sizeof(U))>::T W;
    constexpr int P = slab_word(sizeof(U)) / sizeof(U);
    constexpr int NI = 2 * P - 1;
    constexpr int NONE = -2, FILL = -1;  // no pick here; a pick that takes the fill value
    CG_DYNAMIC_SMEM(unsigned char, stage);
    const U* staged = (const U*)stage;
    const u64 n_idx = a.n_indices;
    const Ix outer = (Ix)a.outer;
    const Ix group = (Ix)a.chunk;
    const Idx* idx = (const Idx*)a.indices;
    const U fillv = fill_unit<U>(a.fill);
    const u64 row_bytes = (u64)a.axis_len * sizeof(U);
    const u64 slots = (n_idx + 2 * P - 2) / P;  // word slots of a row of any phase
    const u32 lane = threadIdx.x & 31;

    for (Ix o0 = (Ix)blockIdx.y * group; o0 < outer; o0 += (Ix)gridDim.y * group) {
        const Ix rows = (outer - o0 < group) ? outer - o0 : group;
        slab_stage(a.data, a.s_outer, a.stage_unit, o0, rows, row_bytes, stage);
        __syncthreads();
        // whole warps loop (the shuffle below); lanes past the last slot write nothing
        for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k - lane < slots;
             k += (u64)gridDim.x * blockDim.x) {
            const i64 first = (i64)(k * P) - (P - 1);  // pick of off[0]
            i64 ii[NI];
#pragma unroll
            for (int t = 0; t < NI; ++t) {  // every load in flight before any is used
                const i64 n = first + t;
                ii[t] = ((t >= P - 1 || lane == 0) && n >= 0 && (u64)n < n_idx)
                            ? load_index(idx + n) : 0;
            }
            // staged offsets fit in int: a group is at most tuning.SLAB_MAX_STAGE bytes
            int off[NI];
#pragma unroll
            for (int t = 0; t < NI; ++t) {
                const i64 n = first + t;
                off[t] = NONE;
                if ((t >= P - 1 || lane == 0) && n >= 0 && (u64)n < n_idx)
                    off[t] = resolve_checked<MODE>(ii[t], a.axis_len, a.first_bad, (u64)n)
                                 ? (int)ii[t] : FILL;
            }
#pragma unroll
            for (int t = 0; t < P - 1; ++t) {
                const int prev = __shfl_up_sync(0xffffffffu, off[t + P], 1);
                if (lane != 0) off[t] = prev;
            }
#pragma unroll 2
            for (Ix r = 0; r < rows; ++r) {
                const u64 start = (u64)(o0 + r) * n_idx;  // the row's first unit
                const int h = (int)(start & (P - 1));
                const U* row = staged + (u64)r * (u64)a.axis_len;
                U v[P];
                bool whole = true;
                W w = 0;
#pragma unroll
                for (int j = 0; j < P; ++j) {
                    int o = off[j + P - 1];
#pragma unroll
                    for (int s = 1; s < P; ++s)
                        if (h == s) o = off[j + P - 1 - s];
                    whole = whole && o != NONE;
                    v[j] = o >= 0 ? row[o] : fillv;
                    w |= (W)v[j] << (8 * sizeof(U) * j);
                }
                U* dst = (U*)a.out + (start - h + k * P);
                if (whole) {
                    store_stream((W*)dst, w);
                } else {
#pragma unroll
                    for (int j = 0; j < P; ++j) {
                        const u64 n = k * P + j;  // pick n - h of the row
                        if (n >= (u64)h && n - h < n_idx) store_stream(dst + j, v[j]);
                    }
                }
            }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------
// strided: the general fallback, one output unit per thread.  The flat output
// position is split into up to CG_MAX_DIMS coordinates (split_position), which
// address data through arbitrary (even negative) strides.
// ---------------------------------------------------------------------------
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_strided(const StridedArgs& a)
{
    typedef typename M::Ix Ix;
    const Ix total = (Ix)a.total;
    const Idx* idx = (const Idx*)a.indices;
    U* out = (U*)a.out;
    const Ix step = (Ix)gridDim.x * (Ix)blockDim.x;

    for (Ix t = (Ix)blockIdx.x * (Ix)blockDim.x + (Ix)threadIdx.x; t < total; t += step) {
        i64 off = 0;
        bool keep = true;
        split_position<M>(a.dims, (int)a.ndim, t, [&](int d, Ix c, Ix) {
            if (d == (int)a.index_dim) {
                i64 i = load_index(idx + c);
                keep = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)c);
                if (keep) off += i * a.s_axis;  // discarded indices may be near 2^63
            } else {
                off += (i64)c * a.strides[d];
            }
        });
        store_stream(out + t, keep ? __ldg((const U*)(a.data + off)) : fill_at<U>(a.fill, (u64)t));
    }
}

// ---------------------------------------------------------------------------
// window: rows whose length is not a multiple of 16 bytes (at least 16), from
// rows at any alignment, written to the contiguous output as 16-byte chunks.
// Chunk c covers output bytes [16c, 16c + 16): row R = 16c / row_bytes from
// offset 16c mod row_bytes and, where the chunk runs past that row's end,
// the first bytes of row R + 1 (row_bytes >= 16: never more than two rows).
// Each part is read as the 16 source bytes starting where the part starts,
// two aligned 16-byte loads funnel-shifted into place; neighbouring chunks
// read the same aligned blocks, which L1 serves.  The chunk is one 16-byte
// evict-first store (the last one may be partial).  A 100-byte row thus
// moves as 6.25 16-byte stores instead of 25 4-byte ones.
// ---------------------------------------------------------------------------
#if !defined(CG_WINDOW_ILP)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

// The aligned 16 bytes at address q.  Blocks reaching outside [lo, hi) -- the
// first and last bytes of data -- are read word by word where a whole word
// exists and byte by byte in the word that holds an end, so no load leaves the
// array.  (On a table of one 41-byte row, one block in three is such a block:
// read byte by byte, the window kernel ran at 42% of its speed on larger tables.)
__device__ __forceinline__ uint4 load_block(u64 q, u64 lo, u64 hi)
{
    if (q >= lo && q + 16 <= hi) return __ldg((const uint4*)q);
    u32 w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const u64 p = q + 4 * k;  // 4-byte aligned: q is 16-byte aligned
        if (p >= lo && p + 4 <= hi) {
            w[k] = __ldg((const u32*)p);
        } else if (p + 4 > lo && p < hi) {
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (p + j >= lo && p + j < hi)
                    w[k] |= (u32)__ldg((const unsigned char*)(p + j)) << (j * 8);
        }
    }
    uint4 v;
    v.x = w[0];
    v.y = w[1];
    v.z = w[2];
    v.w = w[3];
    return v;
}

// Bytes [s, s + 16) of the 32 bytes a, b (0 <= s < 16): words a.x .. b.w hold
// them; take the words from q = s / 4 on, shifted right by r = 8 (s mod 4) bits.
__device__ __forceinline__ uint4 window16(const uint4& a, const uint4& b, u32 s)
{
    const u32 q = s >> 2, r = (s & 3) * 8;
    const u32 w0 = q == 0 ? a.x : q == 1 ? a.y : q == 2 ? a.z : a.w;
    const u32 w1 = q == 0 ? a.y : q == 1 ? a.z : q == 2 ? a.w : b.x;
    const u32 w2 = q == 0 ? a.z : q == 1 ? a.w : q == 2 ? b.x : b.y;
    const u32 w3 = q == 0 ? a.w : q == 1 ? b.x : q == 2 ? b.y : b.z;
    const u32 w4 = q == 0 ? b.x : q == 1 ? b.y : q == 2 ? b.z : b.w;
    uint4 v;
    v.x = __funnelshift_r(w0, w1, r);
    v.y = __funnelshift_r(w1, w2, r);
    v.z = __funnelshift_r(w2, w3, r);
    v.w = __funnelshift_r(w3, w4, r);
    return v;
}

// load_block for kernels that read many blocks per thread: the edge case
// (bytes of the first or last block of data) out of line, which keeps the
// unrolled code small.
__device__ __noinline__ uint4 load_edge_block(u64 q, u64 lo, u64 hi)
{
    return load_block(q, lo, hi);
}

__device__ __forceinline__ uint4 load_block_lean(u64 q, u64 lo, u64 hi)
{
    if (q >= lo && q + 16 <= hi) return __ldg((const uint4*)q);
    return load_edge_block(q, lo, hi);
}

// The two blocks of data that hold its first and its last byte (the same block
// on a table of 16 bytes or less).  A block that holds a byte of [lo, hi) and
// reaches outside it is one of them, so a kernel whose every block holds a byte
// of data can read its edges from these registers.  On a table of a few dozen
// bytes most rows touch an edge, and load_edge_block's word and byte loads, one
// lane at a time, held weave at 0.78x slabf there.  A warp reads the two blocks
// together: lane j < 16 loads byte j of the first block, lane 16 + j byte j of
// the last (where it lies in [lo, hi)), and the words go round by shuffles.
// Every lane of the warp must call it.  weave's probe setting CG_WEAVE_EDGES
// (BENCHMARKS.md, "weave's edges"): 1.75x on a 77-byte table, but 0.94x over
// the weave probe's 24 larger ones (H100, one process); off.
struct EdgeBlocks {
    u64 first_q;
    uint4 first, last;
};

__device__ __forceinline__ EdgeBlocks warp_edge_blocks(u64 lo, u64 hi, u32 lane)
{
    EdgeBlocks e;
    e.first_q = lo & ~(u64)15;
    const u64 p = (lane < 16 ? e.first_q : (hi - 1) & ~(u64)15) + (lane & 15);
    const u32 b = p >= lo && p < hi ? (u32)__ldg((const unsigned char*)p) : 0u;
    // Lane 4w ends with word w of its half's block: the bytes of lanes 4w .. 4w + 3.
    u32 w = b;
    w |= __shfl_sync(0xFFFFFFFFu, b, (lane + 1) & 31) << 8;
    w |= __shfl_sync(0xFFFFFFFFu, b, (lane + 2) & 31) << 16;
    w |= __shfl_sync(0xFFFFFFFFu, b, (lane + 3) & 31) << 24;
    e.first.x = __shfl_sync(0xFFFFFFFFu, w, 0);
    e.first.y = __shfl_sync(0xFFFFFFFFu, w, 4);
    e.first.z = __shfl_sync(0xFFFFFFFFu, w, 8);
    e.first.w = __shfl_sync(0xFFFFFFFFu, w, 12);
    e.last.x = __shfl_sync(0xFFFFFFFFu, w, 16);
    e.last.y = __shfl_sync(0xFFFFFFFFu, w, 20);
    e.last.z = __shfl_sync(0xFFFFFFFFu, w, 24);
    e.last.w = __shfl_sync(0xFFFFFFFFu, w, 28);
    return e;
}

__device__ __forceinline__ bool block_inside(u64 q, u64 lo, u64 hi)
{
    return q >= lo && q + 16 <= hi;
}

__device__ __forceinline__ uint4 load_block_edges(u64 q, u64 lo, u64 hi, const EdgeBlocks& e)
{
    if (block_inside(q, lo, hi)) return __ldg((const uint4*)q);
    return q == e.first_q ? e.first : e.last;
}

// The 16 bytes at address p (any alignment): two aligned blocks, shifted.
__device__ __forceinline__ uint4 load_window(u64 p, u64 lo, u64 hi)
{
    const u64 base = p & ~(u64)15;
    const u32 s = (u32)(p & 15);
    const uint4 a = load_block(base, lo, hi);
    if (s == 0) return a;
    return window16(a, load_block(base + 16, lo, hi), s);
}

// Bytes [0, n) of x, then bytes [n, 16) of y (0 < n < 16).
__device__ __forceinline__ u32 merge_word(u32 x, u32 y, u32 n, u32 first)
{
    const u32 m = n >= first + 4 ? 0xFFFFFFFFu : n <= first ? 0u : 0xFFFFFFFFu >> (32 - 8 * (n - first));
    return (x & m) | (y & ~m);
}

// Address of row R's first byte, 0 when the row takes the fill value.  BCAST
// (bcastw): the axis has length 1 and every index resolves to 0, unread.
template <class Idx, class M, int MODE, bool BCAST = false>
__device__ __forceinline__ u64 window_row(const WindowArgs& a, typename M::Ix row)
{
    typedef typename M::Ix Ix;
    Ix o, n;
    divmod<M>(a.n_div, row, o, n);
    if (BCAST) return (u64)(a.data + (i64)o * a.s_outer);
    i64 i = load_index((const Idx*)a.indices + n);
    if (!resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)n)) return 0;
    return (u64)(a.data + (i64)o * a.s_outer + i * a.s_axis);
}

template <class Idx, class M, int MODE, bool BCAST = false>
__device__ __forceinline__ uint4 window_chunk(const WindowArgs& a, typename M::Ix c, u64 lo,
                                              u64 hi, const uint4 fillv)
{
    typedef typename M::Ix Ix;
    Ix row, off;
    divmod<M>(a.row_div, c * 16, row, off);
    const u64 src = window_row<Idx, M, MODE, BCAST>(a, row);
    uint4 v = (!may_skip<MODE>() || src) ? load_window(src + off, lo, hi) : fillv;
    const u64 left = a.row_bytes - (u64)off;  // bytes of this row in the chunk, if < 16
    if (left < 16 && (u64)row + 1 < a.rows) {
        // the next row's window starts `left` bytes early, so its bytes line up
        const u64 next = window_row<Idx, M, MODE, BCAST>(a, row + 1);
        const uint4 w = (!may_skip<MODE>() || next) ? load_window(next - left, lo, hi) : fillv;
        const u32 n = (u32)left;
        v.x = merge_word(v.x, w.x, n, 0);
        v.y = merge_word(v.y, w.y, n, 4);
        v.z = merge_word(v.z, w.z, n, 8);
        v.w = merge_word(v.w, w.w, n, 12);
    }
    return v;
}

// ---------------------------------------------------------------------------
// pack: rows of 3 to 15 bytes at any alignment, written to the contiguous
// output as 16-byte chunks through the window kernel's loop.  Chunk c covers
// output bytes [16c, 16c + 16): the end of row R = 16c / row_bytes and the
// rows after it, CG_PACK_ROWS at most (6 for 3-byte rows: 1 + 5 x 3 bytes).
// Each row's part lies in one aligned 16-byte block of data, or two where it
// crosses a block boundary (the second is read only then); it is shifted to
// its place in the chunk and merged under a byte mask.
// The rows kernel moves a 3-byte row as three 1-byte loads and three 1-byte
// stores, each a separate L1 wavefront per row; here one 16-byte load brings
// the row and a 16-byte store writes five rows and a part.
// ---------------------------------------------------------------------------
#if !defined(CG_PACK_ROWS) || !defined(CG_PACK_ILP)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

// Word w of a 16-byte mask given as 16 bits, one per byte.
__device__ __forceinline__ u32 byte_mask(u32 bits, int w)
{
    const u32 m4 = (bits >> (4 * w)) & 15u;
    // bits 0..3 to bytes 0..3: the four shifted copies of m4 do not overlap
    return ((m4 * 0x204081u) & 0x01010101u) * 0xFFu;
}

template <class Idx, class M, int MODE>
__device__ __forceinline__ uint4 pack_chunk(const WindowArgs& a, typename M::Ix c, u64 lo,
                                            u64 hi, const uint4 fillv)
{
    typedef typename M::Ix Ix;
    Ix row, off, o, n;
    divmod<M>(a.row_div, c * 16, row, off);
    divmod<M>(a.n_div, row, o, n);
    const Ix n_idx = (Ix)a.n_div.d, rows = (Ix)a.rows;
    const u32 rb = (u32)a.row_bytes;
    const Idx* idx = (const Idx*)a.indices;
    uint4 v = fillv;
    u32 d = 0;              // where this row's part starts in the chunk
    u32 start = (u32)off;   // and in the row
#pragma unroll
    for (int k = 0; k < CG_PACK_ROWS; ++k) {
        if (d < 16 && row < rows) {
            const u32 len = rb - start < 16u - d ? rb - start : 16u - d;
            i64 i = load_index(idx + n);
            if (resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)n)) {
                const u64 p = (u64)(a.data + (i64)o * a.s_outer + i * a.s_axis) + start;
                const u32 s = (u32)p & 15u;
                const uint4 b0 = load_block_lean(p - s, lo, hi);
                const uint4 b1 = s + len > 16 ? load_block_lean(p - s + 16, lo, hi) : b0;
                // Chunk byte j takes data byte p + j - d: a window of (b0, b1) from
                // s - d, or of (b0, b0) from 16 + s - d when the part moves right
                // (then it cannot cross into b1, and b0's first copy stays masked).
                const uint4 w = window16(b0, b1, (s - d) & 15u);
                const u32 bits = ((1u << len) - 1u) << d;
                u32 m = byte_mask(bits, 0);
                v.x = (w.x & m) | (v.x & ~m);
                m = byte_mask(bits, 1);
                v.y = (w.y & m) | (v.y & ~m);
                m = byte_mask(bits, 2);
                v.z = (w.z & m) | (v.z & ~m);
                m = byte_mask(bits, 3);
                v.w = (w.w & m) | (v.w & ~m);
            }
            d += len;
            start = 0;
            ++row;
            if (++n == n_idx) {
                n = 0;
                ++o;
            }
        }
    }
    return v;
}

template <class U, class Idx, class M, int MODE, bool PACK = false, bool BCAST = false>
__device__ __forceinline__ void gather_window(const WindowArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int ILP = PACK ? CG_PACK_ILP : CG_WINDOW_ILP;
    const Ix chunks = (Ix)a.chunks;
    const Ix bs = (Ix)blockDim.x;
    const Ix tile = bs * ILP;
    const u64 lo = (u64)(a.data + a.lo), hi = (u64)(a.data + a.hi);
    const uint4 fillv = fill_unit<uint4>(a.fill);

    for (Ix base = (Ix)blockIdx.x * tile + (Ix)threadIdx.x; base < chunks;
         base += (Ix)gridDim.x * tile) {
        uint4 v[ILP];
#pragma unroll
        for (int k = 0; k < ILP; ++k) {
            const Ix c = base + (Ix)k * bs;
            v[k] = c >= chunks ? fillv
                   : PACK  ? pack_chunk<Idx, M, MODE>(a, c, lo, hi, fillv)
                           : window_chunk<Idx, M, MODE, BCAST>(a, c, lo, hi, fillv);
        }
#pragma unroll
        for (int k = 0; k < ILP; ++k) {
            const Ix c = base + (Ix)k * bs;
            if (c >= chunks) continue;
            const u64 b0 = (u64)c * 16;
            if (b0 + 16 <= a.out_bytes) {
                store_stream((uint4*)(a.out + b0), v[k]);
            } else {  // the last chunk: only the bytes that exist
                const u32 w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
                for (int j = 0; j < 16; ++j)
                    if (b0 + j < a.out_bytes)
                        store_stream((unsigned char*)(a.out + b0 + j),
                                     (unsigned char)(w[j >> 2] >> ((j & 3) * 8)));
            }
        }
    }
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_pack(const WindowArgs& a)
{
    gather_window<U, Idx, M, MODE, true>(a);
}

// ---------------------------------------------------------------------------
// weave: rows of two units or more and fewer than 16 bytes, from a table at
// any alignment.  A warp takes tiles of 32 x CG_WEAVE_RU consecutive rows
// (`chunks` tiles in all): each lane loads the indices of CG_WEAVE_RU
// consecutive rows, all of them before any row, then each row as one aligned
// 16-byte block (a second where the row crosses into the next), shifted to
// byte 0, and writes the row's units into the warp's tile in shared memory at
// the place they take in the output.  The warp then stores the tile as
// aligned 16-byte chunks (a tile is 2 x CG_WEAVE_RU x row_bytes of them).
// pack and flat read a row (or a unit) per output chunk it touches, each
// chunk's index loads one after another; here every index of a lane is in
// flight at once and each row is read once.
// ---------------------------------------------------------------------------
#if !defined(CG_WEAVE_RU) || !defined(CG_WEAVE_LANES) || !defined(CG_WEAVE_EDGES)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_weave(const WindowArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int RU = CG_WEAVE_RU;
    constexpr int T = 32 * RU;            // rows per tile
    constexpr int NU = 16 / sizeof(U);    // more units than a row has
    CG_DYNAMIC_SMEM(uint4, tiles);        // blockDim.x / 32 tiles of T * row_bytes bytes
    const u32 lane = threadIdx.x & 31;
    const u32 rb = (u32)a.row_bytes;
    const u32 units = rb / sizeof(U);
    const u32 tile_chunks = 2 * RU * rb;  // T * rb / 16
    uint4* tile = tiles + (threadIdx.x >> 5) * tile_chunks;
    const Ix rows = (Ix)a.rows, n_idx = (Ix)a.n_div.d, n_tiles = (Ix)a.chunks;
    const Idx* idx = (const Idx*)a.indices;
    const u64 lo = (u64)(a.data + a.lo), hi = (u64)(a.data + a.hi);
#if CG_WEAVE_EDGES
    EdgeBlocks edges = {};  // read once a tile first needs them
    bool have_edges = false;
#endif
    const uint4 fillv = fill_unit<uint4>(a.fill);
    const Ix warps = (Ix)(blockDim.x >> 5);

    for (Ix t = (Ix)blockIdx.x * warps + (Ix)(threadIdx.x >> 5); t < n_tiles;
         t += (Ix)gridDim.x * warps) {
        // Row k of the lane: tile row lane * RU + k (CG_WEAVE_LANES 0, one split and
        // steps) or k * 32 + lane (1: each index load coalesced, a split per row).
        const Ix r0 = t * (Ix)T + (Ix)(CG_WEAVE_LANES ? lane : lane * RU);
        Ix o = 0, n = 0;
        if (!CG_WEAVE_LANES && r0 < rows) divmod<M>(a.n_div, r0, o, n);
        // Rows past the output's end read index 0 of outer slice 0 (never stored).
        i64 ii[RU];
        Ix oo[RU], nn[RU];
#pragma unroll
        for (int k = 0; k < RU; ++k) {
            const Ix r = CG_WEAVE_LANES ? r0 + (Ix)(32 * k) : r0 + (Ix)k;
            if (CG_WEAVE_LANES && r < rows) divmod<M>(a.n_div, r, o, n);
            if (r >= rows) {
                o = 0;
                n = 0;
            }
            oo[k] = o;
            nn[k] = n;
            ii[k] = load_index(idx + n);
            if (!CG_WEAVE_LANES && ++n == n_idx) {
                n = 0;
                ++o;
            }
        }
        uint4 b0[RU], b1[RU];
        u64 qq[RU];  // the aligned block under each row's start
        u32 ss[RU];
        bool keep[RU];
#if CG_WEAVE_EDGES
        bool edge = false;
#endif
#pragma unroll
        for (int k = 0; k < RU; ++k) {
            i64 i = ii[k];
            keep[k] = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)nn[k]);
            const u64 p = (u64)(a.data + (i64)oo[k] * a.s_outer + (keep[k] ? i : 0) * a.s_axis);
            ss[k] = (u32)p & 15u;
            qq[k] = p - ss[k];
#if CG_WEAVE_EDGES
            // A rejected row may have no row 0 to read: it reads nothing.
            if (!may_skip<MODE>() || keep[k])
                edge |= !block_inside(qq[k], lo, hi) ||
                        (ss[k] + rb > 16 && !block_inside(qq[k] + 16, lo, hi));
#endif
        }
#if CG_WEAVE_EDGES
        if (!have_edges && __any_sync(0xFFFFFFFFu, edge)) {  // warp-uniform
            edges = warp_edge_blocks(lo, hi, lane);
            have_edges = true;
        }
#endif
        auto load = [&](u64 q) {
#if CG_WEAVE_EDGES
            return load_block_edges(q, lo, hi, edges);
#else
            return load_block_lean(q, lo, hi);
#endif
        };
#pragma unroll
        for (int k = 0; k < RU; ++k) {
            b0[k] = b1[k] = fillv;
            if (!may_skip<MODE>() || keep[k]) {  // a rejected row may have no row 0 to read
                b0[k] = load(qq[k]);
                // A row within one block leaves b1 at the fill value (window16
                // takes no byte of it).  b1 = b0 there is a register move that
                // waits for b0's load, and a lane's rows were read one after
                // another: 3% slower over the weave probe's cases (H100).
                if (ss[k] + rb > 16) b1[k] = load(qq[k] + 16);
            }
        }
#pragma unroll
        for (int k = 0; k < RU; ++k) {
            const uint4 w = (may_skip<MODE>() && !keep[k]) ? fillv
                            : window16(b0[k], b1[k], ss[k]);
            U u[NU];
            memcpy(u, &w, sizeof(u));
            const u32 at = CG_WEAVE_LANES ? 32 * k + lane : lane * RU + k;  // row in the tile
            U* dst = (U*)((unsigned char*)tile + at * rb);
#pragma unroll
            for (int j = 0; j < NU; ++j)
                if ((u32)j < units) dst[j] = u[j];
        }
        __syncwarp();
        const u64 base = (u64)t * (u64)(T * rb);  // the tile's first output byte
#pragma unroll 1
        for (u32 c = lane; c < tile_chunks; c += 32) {
            const u64 b = base + 16 * (u64)c;
            if (b + 16 <= a.out_bytes) {
                store_stream((uint4*)(a.out + b), tile[c]);
            } else if (b < a.out_bytes) {  // the output's last chunk: the bytes that exist
                const unsigned char* v = (const unsigned char*)(tile + c);
                for (u32 j = 0; b + j < a.out_bytes; ++j)
                    store_stream((unsigned char*)(a.out + b + j), v[j]);
            }
        }
        __syncwarp();
    }
}

// ---------------------------------------------------------------------------
// flat: rows of units narrower than 16 bytes, from a table that caches well,
// written as chunks of the contiguous output.  Chunk c holds output units
// [cV, cV + V), V = flat_units<U>() (16 bytes of units; 8 of 1-byte units: 16
// would hold 16 loads of each kind at once and spill): one split of cV into
// (row, unit) and of the row into (outer, index position), then the chunk's
// units in order, stepping to the next row where one ends.  Units go in
// groups of up to 4: the index of every unit of a group is loaded first
// (units of one row reload it from L1), then every unit; the chunk leaves as
// one vector store.  Where the rows kernel writes one 4-byte unit per thread
// and store, this writes four, and a chunk may take the ends of several rows.
// No load sits under a branch, so that the loads of a group issue back to
// back: units past the output's end read unit 0 of index 0, and an index the
// mode rejects reads row 0, its unit then taking the fill value (the values
// are never stored, or replaced).  Wrap mode's rare 64-bit remainder stays
// out of the unrolled loop: an index outside [-s, s) marks the chunk, which
// flat_far() writes again unit by unit.  Measured against groups of 8 under
// branches: 1.1-2.1x on rows of 5-75 bytes of 1- and 2-byte units, -4% to
// +21% on 4- and 8-byte units (BENCHMARKS.md).
// ---------------------------------------------------------------------------
template <class U>
__device__ __forceinline__ constexpr int flat_units()
{
    return sizeof(U) == 1 ? 8 : 16 / sizeof(U);
}

// The chunk as one store: 16 bytes, or 8 for 1-byte units.
template <int BYTES> struct FlatChunk { typedef uint4 T; };
template <> struct FlatChunk<8> { typedef uint2 T; };

// i mod s in [0, s) for any i and s >= 1, by shift and subtract: no call to
// the 64-bit remainder routine, whose saved registers spill slabf's tiles
// (wrap mode's rare path, an index outside [-s, s)).
__device__ __forceinline__ i64 wrap_far(i64 i, i64 s)
{
    const u64 d = (u64)s;
    const u64 m = i < 0 ? (u64)0 - (u64)i : (u64)i;
    u64 r = 0;
#pragma unroll 1
    for (int b = 63; b >= 0; --b) {
        r = (r << 1) | ((m >> b) & 1u);  // r < 2d <= 2^64: s <= 2^63 - 1
        if (r >= d) r -= d;
    }
    return (i64)(i < 0 && r ? d - r : r);
}

template <class U, class Idx, class M>
__device__ __forceinline__ void flat_far(const FlatArgs& a, typename M::Ix c)
{
    typedef typename M::Ix Ix;
    constexpr int V = flat_units<U>();
    const Idx* idx = (const Idx*)a.indices;
#pragma unroll 1
    for (int k = 0; k < V; ++k) {
        const Ix g = c * (Ix)V + (Ix)k;
        if (g >= (Ix)a.total) break;
        Ix row, u, o, n;
        divmod<M>(a.unit_div, g, row, u);
        divmod<M>(a.n_div, row, o, n);
        i64 i = load_index(idx + n);
        i = wrap_far(i, a.axis_len);
        store_stream((U*)a.out + g,
                     __ldg((const U*)(a.data + (i64)o * a.s_outer + i * a.s_axis) + u));
    }
}

// lean (below): one unit per thread, its load only where the index resolves.
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_lean(const FlatArgs& a);

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_flat(const FlatArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int V = flat_units<U>();
    constexpr int G = V < 4 ? V : 4;
    const Ix total = (Ix)a.total, chunks = (Ix)a.chunks;
    const Ix units = (Ix)a.unit_div.d, n_idx = (Ix)a.n_div.d;
    const Idx* idx = (const Idx*)a.indices;
    if (may_skip<MODE>() && a.axis_len == 0) {
        // Fill and raise mode on an axis of size 0 (the other modes refuse it
        // before a launch): below, a rejected index reads row 0, which an empty
        // table lacks; lean reads no table byte for a rejected index.
        gather_lean<U, Idx, M, MODE>(a);
        return;
    }

    for (Ix c = (Ix)blockIdx.x * (Ix)blockDim.x + (Ix)threadIdx.x; c < chunks;
         c += (Ix)gridDim.x * (Ix)blockDim.x) {
        const Ix g0 = c * (Ix)V;
        Ix row, u, o, n;
        divmod<M>(a.unit_div, g0, row, u);
        divmod<M>(a.n_div, row, o, n);
        U v[V];
        bool far = false;  // wrap mode: an index outside [-s, s) in this chunk
#pragma unroll
        for (int k0 = 0; k0 < V; k0 += G) {
            i64 ii[G];
            Ix uu[G], oo[G], nn[G];
#pragma unroll
            for (int k = 0; k < G; ++k) {
                if (g0 + (Ix)(k0 + k) >= total) {
                    u = 0;
                    n = 0;
                    o = 0;
                }
                uu[k] = u;
                oo[k] = o;
                nn[k] = n;
                ii[k] = load_index(idx + n);
                if (++u == units) {
                    u = 0;
                    if (++n == n_idx) {
                        n = 0;
                        ++o;
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < G; ++k) {
                i64 i = ii[k];
                bool keep;
                if (MODE == MODE_WRAP) {
                    if (i < 0) i += a.axis_len;
                    keep = (u64)i < (u64)a.axis_len;
                    far |= !keep;
                } else {
                    keep = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)nn[k]);
                }
                i = keep ? i : 0;
                U w = __ldg((const U*)(a.data + (i64)oo[k] * a.s_outer + i * a.s_axis) + uu[k]);
                if (may_skip<MODE>() && !keep) w = fill_at<U>(a.fill, (u64)(g0 + (Ix)(k0 + k)));
                v[k0 + k] = w;
            }
        }
        if (MODE == MODE_WRAP && far) {
            flat_far<U, Idx, M>(a, c);
        } else if (g0 + (Ix)V <= total) {
            typedef typename FlatChunk<V * sizeof(U)>::T Chunk;
            Chunk w;
            memcpy(&w, v, sizeof(Chunk));
            store_stream((Chunk*)a.out + c, w);
        } else {  // the last chunk: only the units that exist
#pragma unroll
            for (int k = 0; k < V; ++k)
                if (g0 + (Ix)k < total) store_stream((U*)a.out + g0 + k, v[k]);
        }
    }
}

// Where flat reads unit u of the row of index i in outer slice o: the table in
// global memory, through the read-only path.
struct FlatFromData {
    template <class U, class Ix>
    __device__ __forceinline__ U load(const FlatArgs& a, Ix o, i64 i, Ix u) const
    {
        return __ldg((const U*)(a.data + (i64)o * a.s_outer + i * a.s_axis) + u);
    }
};

// Chunk c of flat's loop, its units read through src, the loop's invariants
// read once by the caller.  gather_flat keeps the loop body inline: through
// this function NVRTC builds it differently (1-byte keys: 46-93 registers
// become 40-90), and its timings are those of the inline body.  An index load
// per unit, though a row's units share one: loaded once per row under a
// branch, slabf ran rows of several 1-byte units at 1.10-1.14x flat's speed
// against 1.20-1.30x (BENCHMARKS.md).
template <class U, class Idx, class M, int MODE, class Src>
__device__ __forceinline__ void flat_chunk(const FlatArgs& a, typename M::Ix c,
                                           typename M::Ix total, typename M::Ix units,
                                           typename M::Ix n_idx, const Idx* idx, const Src& src)
{
    typedef typename M::Ix Ix;
    constexpr int V = flat_units<U>();
    constexpr int G = V < 4 ? V : 4;
    const Ix g0 = c * (Ix)V;
    Ix row, u, o, n;
    divmod<M>(a.unit_div, g0, row, u);
    divmod<M>(a.n_div, row, o, n);
    U v[V];
    bool far = false;  // wrap mode: an index outside [-s, s) in this chunk
#pragma unroll
    for (int k0 = 0; k0 < V; k0 += G) {
        i64 ii[G];
        Ix uu[G], oo[G], nn[G];
#pragma unroll
        for (int k = 0; k < G; ++k) {
            if (g0 + (Ix)(k0 + k) >= total) {
                u = 0;
                n = 0;
                o = 0;
            }
            uu[k] = u;
            oo[k] = o;
            nn[k] = n;
            ii[k] = load_index(idx + n);
            if (++u == units) {
                u = 0;
                if (++n == n_idx) {
                    n = 0;
                    ++o;
                }
            }
        }
#pragma unroll
        for (int k = 0; k < G; ++k) {
            i64 i = ii[k];
            bool keep;
            if (MODE == MODE_WRAP) {
                if (i < 0) i += a.axis_len;
                keep = (u64)i < (u64)a.axis_len;
                far |= !keep;
            } else {
                keep = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)nn[k]);
            }
            i = keep ? i : 0;
            U w = src.template load<U>(a, oo[k], i, uu[k]);
            if (may_skip<MODE>() && !keep) w = fill_at<U>(a.fill, (u64)(g0 + (Ix)(k0 + k)));
            v[k0 + k] = w;
        }
    }
    if (MODE == MODE_WRAP && far) {
        flat_far<U, Idx, M>(a, c);
    } else if (g0 + (Ix)V <= total) {
        typedef typename FlatChunk<V * sizeof(U)>::T Chunk;
        Chunk w;
        memcpy(&w, v, sizeof(Chunk));
        store_stream((Chunk*)a.out + c, w);
    } else {  // the last chunk: only the units that exist
#pragma unroll
        for (int k = 0; k < V; ++k)
            if (g0 + (Ix)k < total) store_stream((U*)a.out + g0 + k, v[k]);
    }
}

// ---------------------------------------------------------------------------
// slabf: flat's chunks over slab's staged groups, for rows of any number of
// units from a table whose contiguous axis rows (axis_len * units units each)
// fit several to a block in shared memory.  blockIdx.y takes a group of
// `group` outer rows and stages it once (slab_stage); blockIdx.x steps over
// the chunks that start in the group's output and reads their units from
// shared memory, where flat reads each from L2 (one sector request per unit:
// 3-byte int8 rows of a 1.7 MB table at 25% of copy).  A chunk that runs past
// the group's output, at most one per group, reads the table in global memory.
// ---------------------------------------------------------------------------
template <class Ix>
struct FlatFromStage {
    const unsigned char* stage;
    Ix o0;         // the group's first outer row
    u32 row_units; // staged units per outer row: axis_len * units
    u32 units;
    template <class U>
    __device__ __forceinline__ U load(const FlatArgs&, Ix o, i64 i, Ix u) const
    {
        // offsets fit in u32: a group is at most tuning.SLAB_MAX_STAGE bytes
        return ((const U*)stage)[(u32)(o - o0) * row_units + (u32)i * units + (u32)u];
    }
};

// slabf's chunks wholly inside a staged group, for rows of a chunk or more
// (units >= V) of 4- and 8-byte units, in 32-bit index math (1-byte units and
// 64-bit math spill here): a warp takes tiles of T = CG_SLABF_TILE x 32 consecutive
// chunks [c0, c0 + 32T) below ce.  A tile's units meet at most 32T + 2 output
// rows from r0, its first; lane l resolves rows r0 + 32s + l (s = 0..T), one
// coalesced index load each, to their staged offsets (REJECT: the fill value),
// and a chunk, which meets at most two rows, takes the offsets of its rows by
// shuffle.  Against an index load per unit (flat_chunk): 1.05-1.16x on 20- to
// 100-byte rows of 4- and 8-byte units from tables of a few KB (H100,
// benchmarks/probe-tinyrows).  Wrap mode: a tile with an index outside
// [-s, s) returns its first chunk, which the caller writes on as flat does
// (the remainder's call, inlined here, spilled the tiles).
#if !defined(CG_SLABF_TILE)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ u64 slabf_tiles(const FlatArgs& a,
                                            const FlatFromStage<typename M::Ix>& staged,
                                            typename M::Ix cb, typename M::Ix ce, u64 rend)
{
    typedef typename M::Ix Ix;
    constexpr int V = flat_units<U>();
    constexpr int T = CG_SLABF_TILE;
    constexpr u32 REJECT = 0xffffffffu;  // staged offsets fit in u32 (_group_grid)
    typedef typename FlatChunk<V * sizeof(U)>::T Chunk;
    const Ix units = (Ix)staged.units;
    const Idx* idx = (const Idx*)a.indices;
    const u32 lane = threadIdx.x & 31u;
    const u64 warps = (u64)gridDim.x * (blockDim.x >> 5);
    for (u64 c0 = (u64)cb + ((u64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * (32 * T);
         c0 < (u64)ce; c0 += warps * (32 * T)) {
        const Ix r0 = M::div(a.unit_div, (Ix)c0 * (Ix)V);
        u32 off[T + 1];
        bool far = false;  // wrap mode: an index outside [-s, s) in this tile
#pragma unroll
        for (int s = 0; s <= T; ++s) {
            const u64 r = (u64)r0 + (u64)(32 * s) + lane;
            off[s] = REJECT;
            if (r < rend) {
                Ix o, n;
                divmod<M>(a.n_div, (Ix)r, o, n);
                i64 i = load_index(idx + n);
                bool keep;
                if (MODE == MODE_WRAP) {  // no remainder here: see above
                    if (i < 0) i += a.axis_len;
                    keep = (u64)i < (u64)a.axis_len;
                    far |= !keep;
                } else {
                    keep = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)n);
                }
                if (keep) off[s] = (u32)(o - staged.o0) * staged.row_units + (u32)i * staged.units;
            }
        }
        if (MODE == MODE_WRAP && __any_sync(0xffffffffu, far)) return c0;  // rare
#pragma unroll
        for (int q = 0; q < T; ++q) {
            const u64 c = c0 + (u64)(32 * q) + lane;
            const bool live = c < (u64)ce;
            Ix r = r0, u = 0;
            if (live) divmod<M>(a.unit_div, (Ix)c * (Ix)V, r, u);
            const u32 rel = (u32)(r - r0);  // at most 32T + 1 where live
            u32 b0 = REJECT, b1 = REJECT;
#pragma unroll
            for (int s = 0; s <= T; ++s) {  // every lane shuffles, live or not
                const u32 x = __shfl_sync(0xffffffffu, off[s], rel & 31u);
                const u32 y = __shfl_sync(0xffffffffu, off[s], (rel + 1u) & 31u);
                if ((rel >> 5) == (u32)s) b0 = x;
                if (((rel + 1u) >> 5) == (u32)s) b1 = y;
            }
            if (!live) continue;
            U v[V];
#pragma unroll
            for (int k = 0; k < V; ++k) {
                const Ix uk = u + (Ix)k;
                const bool next = uk >= units;  // units >= V: at most the next row
                const u32 b = next ? b1 : b0;
                const u32 at = (u32)(next ? uk - units : uk);
                v[k] = (may_skip<MODE>() && b == REJECT)
                           ? fill_at<U>(a.fill, c * V + (u64)k)
                           : ((const U*)staged.stage)[b + at];
            }
            Chunk w;
            memcpy(&w, v, sizeof(Chunk));
            store_stream((Chunk*)a.out + c, w);
        }
    }
    return ~(u64)0;
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_slabf(const FlatArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int V = flat_units<U>();
    const Ix total = (Ix)a.total;
    const Ix units = (Ix)a.unit_div.d, n_idx = (Ix)a.n_div.d;
    const Idx* idx = (const Idx*)a.indices;
    if (may_skip<MODE>() && a.axis_len == 0) {
        if (blockIdx.y == 0) gather_lean<U, Idx, M, MODE>(a);  // as flat; lean's grid is 1-D
        return;
    }
    CG_DYNAMIC_SMEM(unsigned char, stage);
    const Ix per_outer = n_idx * units;  // output units of one outer slice
    const Ix outer = total / per_outer;
    const Ix group = (Ix)a.group;
    const u64 row_bytes = (u64)a.axis_len * (u64)units * sizeof(U);
    const FlatFromData data;
    for (Ix o0 = (Ix)blockIdx.y * group; o0 < outer; o0 += (Ix)gridDim.y * group) {
        const Ix rows = (outer - o0 < group) ? outer - o0 : group;
        slab_stage(a.data, a.s_outer, a.stage_unit, o0, rows, row_bytes, stage);
        __syncthreads();
        const FlatFromStage<Ix> staged{stage, o0, (u32)(a.axis_len * units), (u32)units};
        const Ix begin = o0 * per_outer, end = (o0 + rows) * per_outer;
        if (CG_SLABF_TILE > 0 && sizeof(U) >= 4 && sizeof(Ix) == 4 && units >= (Ix)V) {
            const Ix cb = (begin + V - 1) / V, full = end / V;
            if (cb < full) {
                const u64 far = slabf_tiles<U, Idx, M, MODE>(a, staged, cb, full,
                                                             (u64)(o0 + rows) * (u64)n_idx);
                // wrap mode, a tile with an index outside [-s, s): that tile and the
                // warp's later ones as flat's chunks
                const u64 tile = 32 * CG_SLABF_TILE;
                const u64 step = (u64)gridDim.x * (blockDim.x >> 5) * tile;
                for (u64 c0 = far; c0 < (u64)full; c0 += step)
                    for (u64 c = c0 + (threadIdx.x & 31u); c < c0 + tile && c < (u64)full; c += 32)
                        flat_chunk<U, Idx, M, MODE>(a, (Ix)c, total, units, n_idx, idx, staged);
            }
            // the chunk that runs past the group's output, if any, from global memory
            if (cb <= full && full * (Ix)V < end && blockIdx.x == 0 && threadIdx.x == 0)
                flat_chunk<U, Idx, M, MODE>(a, full, total, units, n_idx, idx, data);
        } else {
            for (Ix c = (begin + V - 1) / V + (Ix)blockIdx.x * (Ix)blockDim.x + (Ix)threadIdx.x;
                 c < (end + V - 1) / V; c += (Ix)gridDim.x * (Ix)blockDim.x) {
                if ((c + 1) * (Ix)V <= end)
                    flat_chunk<U, Idx, M, MODE>(a, c, total, units, n_idx, idx, staged);
                else
                    flat_chunk<U, Idx, M, MODE>(a, c, total, units, n_idx, idx, data);
            }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------
// slabr: rows of two units or more (of 1, 2 or 4 bytes) and fewer than 16
// bytes, from a table whose axis rows fit several to a block in shared memory.
// blockIdx.y takes a group of `group` outer rows and stages it once, each row
// of the axis padded to a pitch of 4, 8 or 16 bytes (the first power of two it
// fits), so that a pick is one aligned shared load.  A warp
// takes tiles of 32 x CG_SLABR_RU output rows: lane l loads the indices of tile
// rows k * 32 + l (each load coalesced), all before any row, picks the rows
// from the stage, writes their units into the warp's tile in shared memory at
// the place they take in the output and stores the tile as aligned 16-byte
// chunks, byte by byte where a chunk has bytes outside the tile's rows.  Two
// orders (`stage_unit`, which slabf alone uses otherwise):
// - 0: tile t is rows tT .. tT + T - 1 of the whole output (every tile starts
//   16-byte aligned), those that meet the group's rows; a group's outer rows
//   read each index again, one after the other;
// - 1: a tile is T index positions, its picks loaded and resolved once and
//   written to every outer row of the group in turn (at the row's alignment,
//   byte by byte at both ends).  The group's outer rows share the index loads:
//   16 outer rows of a 57 MB int32 index array read it from DRAM 16 times in
//   order 0.  The planner takes it where outer rows start 16-byte aligned or
//   the indices are that large (tuning.SLABR_ORDER_*): a row that starts
//   mid-chunk pays two bytewise chunks per tile.
// weave reads a row as one or two 16-byte blocks through L1, a request per
// row; a warp's 32 picks here are one shared load.  FlatArgs: total = outer *
// n_indices * units, chunks = the output's tiles (order 0), unit_div = units
// per row, group, stage_unit = the order.
// ---------------------------------------------------------------------------
#if !defined(CG_SLABR_RU)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

// The pitch of a staged row of `rb` bytes (2 to 15).
__host__ __device__ constexpr u32 slabr_pitch(u32 rb)
{
    return rb <= 4 ? 4u : rb <= 8 ? 8u : 16u;
}

// Stage outer rows o0 .. o0 + g - 1 (axis rows of `units` units, s_axis apart:
// the row's bytes or 0 for an axis of one) into stage at a row pitch of
// `pitch` bytes, CG_STAGE_ILP unit loads in flight per thread.
template <class U, class M>
__device__ __forceinline__ void slabr_stage(const FlatArgs& a, u64 o0, u32 g, u32 pitch,
                                            unsigned char* stage)
{
    typedef typename M::Ix Ix;
    const u32 units = (u32)a.unit_div.d;
    const u32 per = (u32)a.axis_len * units;  // units of one outer row
    // One run over the group when its outer rows are back to back, else row by row.
    const bool packed = a.s_outer == (i64)per * (i64)sizeof(U);
    const u32 runs = packed ? 1 : g, run = packed ? g * per : per;
    const u32 bs = blockDim.x;
    for (u32 r = 0; r < runs; ++r) {
        const U* src = (const U*)(a.data + (i64)(o0 + r) * a.s_outer);
        unsigned char* dst = stage + r * (u32)a.axis_len * pitch;
        for (u32 q0 = threadIdx.x; q0 < run; q0 += CG_STAGE_ILP * bs) {
            U v[CG_STAGE_ILP];
#pragma unroll
            for (int k = 0; k < CG_STAGE_ILP; ++k) {
                const u32 q = q0 + (u32)k * bs;
                v[k] = q < run ? __ldg(src + q) : U();
            }
#pragma unroll
            for (int k = 0; k < CG_STAGE_ILP; ++k) {
                const u32 q = q0 + (u32)k * bs;
                if (q >= run) break;
                Ix s, j;  // staged row, unit of it
                divmod<M>(a.unit_div, (Ix)q, s, j);
                ((U*)(dst + (u32)s * pitch))[j] = v[k];
            }
        }
    }
}

// The staged row at p (pitch bytes) in a uint4.
__device__ __forceinline__ uint4 slabr_pick(const unsigned char* p, u32 pitch)
{
    uint4 w;
    if (pitch == 4) {
        w.x = *(const u32*)p;
    } else if (pitch == 8) {
        const uint2 h = *(const uint2*)p;
        w.x = h.x;
        w.y = h.y;
    } else {
        w = *(const uint4*)p;
    }
    return w;
}

// Write a row's `units` units from w at dst.
template <class U>
__device__ __forceinline__ void slabr_put(unsigned char* dst, const uint4& w, u32 units)
{
    constexpr int NU = 16 / sizeof(U);  // more units than a row has
    U u[NU];
    memcpy(u, &w, sizeof(u));
    // A warp-uniform exit after the row's units.  Each store under a predicate
    // instead (weave's loop) issues all NU of them: 0.84x the speed over
    // benchmarks/probe-slabr's 29 cases, 0.60x-0.79x on rows of three 1-byte
    // units (H100).
#pragma unroll
    for (int j = 0; j < NU; ++j) {
        if ((u32)j >= units) break;
        ((U*)dst)[j] = u[j];
    }
}

// Store a warp's tile bytes [lo, hi) to out + base (16-byte aligned, tile byte
// 0 there) as aligned 16-byte chunks, byte by byte in a chunk that has bytes
// outside [lo, hi).
__device__ __forceinline__ void slabr_flush(char* out, u64 base, const unsigned char* tile,
                                            u32 lo, u32 hi, u32 lane)
{
    const uint4* chunk = (const uint4*)tile;
#pragma unroll 1
    for (u32 c = (lo >> 4) + lane; c < (hi + 15) >> 4; c += 32) {
        const u32 s = 16 * c;
        if (s >= lo && s + 16 <= hi) {
            store_stream((uint4*)(out + base + s), chunk[c]);
        } else {
            for (u32 j = s < lo ? lo : s; j < s + 16 && j < hi; ++j)
                store_stream((unsigned char*)(out + base + j), tile[j]);
        }
    }
}

// slabr in one order; the entry below branches once, so that neither order's
// loop keeps the other's values live (together they spilled at 64 registers).
template <class U, class Idx, class M, int MODE, int ORDER>
__device__ __forceinline__ void slabr_groups(const FlatArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int RU = CG_SLABR_RU;
    constexpr u32 T = 32 * RU;  // rows per tile
    CG_DYNAMIC_SMEM(uint4, smem);
    const u32 lane = threadIdx.x & 31;
    const u32 units = (u32)a.unit_div.d;
    const u32 rb = units * (u32)sizeof(U);
    const u32 pitch = slabr_pitch(rb);
    const u32 axis_len = (u32)a.axis_len;  // the planner stages at least one outer row
    const Ix n_idx = (Ix)a.n_div.d, group = (Ix)a.group;
    const Ix outer = (Ix)(a.total / ((u64)n_idx * units));
    const u32 tile_bytes = T * rb;  // a multiple of 16
    unsigned char* stage = (unsigned char*)smem;
    const u32 stage_bytes = ((u32)group * axis_len * pitch + 15u) & ~15u;
    // order 1 starts a tile at its first row's place in a 16-byte chunk
    unsigned char* tile = stage + stage_bytes + (threadIdx.x >> 5) * (tile_bytes + 16);
    const Idx* idx = (const Idx*)a.indices;
    const Ix warps = (Ix)(blockDim.x >> 5);
    const Ix first = (Ix)blockIdx.x * warps + (Ix)(threadIdx.x >> 5);
    const Ix step = (Ix)gridDim.x * warps;

    for (Ix o0 = (Ix)blockIdx.y * group; o0 < outer; o0 += (Ix)gridDim.y * group) {
        const Ix g = (outer - o0 < group) ? outer - o0 : group;
        slabr_stage<U, M>(a, (u64)o0, (u32)g, pitch, stage);
        __syncthreads();
        if (ORDER == 1) {
            for (Ix n0 = first * (Ix)T; n0 < n_idx; n0 += step * (Ix)T) {
                const u32 rows = (n_idx - n0 < (Ix)T) ? (u32)(n_idx - n0) : T;
                u32 at[RU];  // the pick's staged offset in outer row 0, ~0u for the fill
#pragma unroll
                for (int k = 0; k < RU; ++k) {
                    const u32 r = 32 * k + lane;
                    i64 i = r < rows ? load_index(idx + n0 + r) : 0;
                    at[k] = ~0u;
                    if (r < rows && resolve_checked<MODE>(i, a.axis_len, a.first_bad,
                                                          (u64)(n0 + r)))
                        at[k] = (u32)i * pitch;
                }
                for (u32 o = 0; o < (u32)g; ++o) {
                    const u64 b = ((u64)(o0 + o) * (u64)n_idx + (u64)n0) * rb;
                    const u32 sh = (u32)b & 15u;
                    const unsigned char* row0 = stage + o * axis_len * pitch;
#pragma unroll
                    for (int k = 0; k < RU; ++k) {
                        const u32 r = 32 * k + lane;
                        if (r >= rows) break;
                        const uint4 w = at[k] == ~0u ? fill_unit<uint4>(a.fill)
                                                     : slabr_pick(row0 + at[k], pitch);
                        slabr_put<U>(tile + sh + r * rb, w, units);
                    }
                    __syncwarp();
                    slabr_flush(a.out, b - sh, tile, sh, sh + rows * rb, lane);
                    __syncwarp();
                }
            }
        } else {
            const Ix r_lo = o0 * n_idx, r_hi = (o0 + g) * n_idx;  // the group's output rows
            const u64 b_lo = (u64)r_lo * rb, b_hi = (u64)r_hi * rb;
            const Ix t_hi = (r_hi + (Ix)T - 1) / (Ix)T;
            for (Ix t = r_lo / (Ix)T + first; t < t_hi; t += step) {
                // Rows outside the group read index 0 and are never stored.
                i64 ii[RU];
                u32 oo[RU];
                Ix nn[RU];
                bool in[RU];
#pragma unroll
                for (int k = 0; k < RU; ++k) {
                    const Ix r = t * (Ix)T + (Ix)(32 * k) + (Ix)lane;
                    Ix o = o0, n = 0;
                    in[k] = r >= r_lo && r < r_hi;
                    if (in[k]) divmod<M>(a.n_div, r, o, n);
                    oo[k] = (u32)(o - o0);
                    nn[k] = n;
                    ii[k] = load_index(idx + n);
                }
#pragma unroll
                for (int k = 0; k < RU; ++k) {
                    i64 i = ii[k];
                    uint4 w = fill_unit<uint4>(a.fill);
                    // staged offsets fit in u32: a group is at most tuning.SLAB_MAX_STAGE bytes
                    if (in[k] && resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)nn[k]))
                        w = slabr_pick(stage + (oo[k] * axis_len + (u32)i) * pitch, pitch);
                    slabr_put<U>(tile + (32 * k + lane) * rb, w, units);
                }
                __syncwarp();
                const u64 base = (u64)t * tile_bytes;  // the tile's first output byte
                slabr_flush(a.out, base, tile, b_lo > base ? (u32)(b_lo - base) : 0u,
                            b_hi - base < tile_bytes ? (u32)(b_hi - base) : tile_bytes, lane);
                __syncwarp();
            }
        }
        __syncthreads();
    }
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_slabr(const FlatArgs& a)
{
    if (a.stage_unit)
        slabr_groups<U, Idx, M, MODE, 1>(a);
    else
        slabr_groups<U, Idx, M, MODE, 0>(a);
}

// ---------------------------------------------------------------------------
// flatv: rows of one unit where V = flat_units<U>() divides the index count.
// Chunk c is output units [cV, cV + V): index positions [n, n + V) of one
// outer slice o (a slice holds a whole number of chunks), so the chunk's V
// indices are read as vector loads of up to 16 bytes (one by one where the
// index array's base is not aligned to them; the test is the same for every
// thread), then its V units, then one chunk store.  flat steps each unit's
// row and slice and loads its index alone; on an H200, one-unit rows of small
// tables written as large outputs move 1.4x flat's bytes this way
// (BENCHMARKS.md).  Loads as flat's: a rejected index reads row 0, wrap
// mode's indices outside [-s, s) send the chunk to flat_far().  FlatArgs,
// total = outer * n_indices, chunks = total / V, unit_div of 1.
// ---------------------------------------------------------------------------
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_flatv(const FlatArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int V = flat_units<U>();
    constexpr int IB = V * (int)sizeof(Idx) < 16 ? V * (int)sizeof(Idx) : 16;
    constexpr int PER = IB / (int)sizeof(Idx);
    typedef typename FlatChunk<IB>::T L;
    const Ix chunks = (Ix)a.chunks;
    const Idx* idx = (const Idx*)a.indices;
    if (may_skip<MODE>() && a.axis_len == 0) {
        gather_lean<U, Idx, M, MODE>(a);  // as flat: no table byte to read
        return;
    }
    const bool vec = ((u64)idx & (u64)(IB - 1)) == 0;
    for (Ix c = (Ix)blockIdx.x * (Ix)blockDim.x + (Ix)threadIdx.x; c < chunks;
         c += (Ix)gridDim.x * (Ix)blockDim.x) {
        Ix o, n;
        divmod<M>(a.n_div, c * (Ix)V, o, n);
        i64 ii[V];
        if (vec) {
#pragma unroll
            for (int q = 0; q < V / PER; ++q) {
                const L w = __ldg((const L*)(idx + n) + q);
                Idx p[PER];
                memcpy(p, &w, sizeof(L));
#pragma unroll
                for (int k = 0; k < PER; ++k) ii[q * PER + k] = (i64)p[k];
            }
        } else {
#pragma unroll
            for (int k = 0; k < V; ++k) ii[k] = load_index(idx + n + k);
        }
        const char* slice = a.data + (i64)o * a.s_outer;
        U v[V];
        bool far = false;  // wrap mode: an index outside [-s, s) in this chunk
#pragma unroll
        for (int k = 0; k < V; ++k) {
            i64 i = ii[k];
            bool keep;
            if (MODE == MODE_WRAP) {
                if (i < 0) i += a.axis_len;
                keep = (u64)i < (u64)a.axis_len;
                far |= !keep;
            } else {
                keep = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)(n + (Ix)k));
            }
            i = keep ? i : 0;
            U w = __ldg((const U*)(slice + i * a.s_axis));
            if (may_skip<MODE>() && !keep) w = fill_at<U>(a.fill, (u64)(c * (Ix)V + (Ix)k));
            v[k] = w;
        }
        if (MODE == MODE_WRAP && far) {
            flat_far<U, Idx, M>(a, c);
        } else {
            typedef typename FlatChunk<V * sizeof(U)>::T Chunk;
            Chunk w;
            memcpy(&w, v, sizeof(Chunk));
            store_stream((Chunk*)a.out + c, w);
        }
    }
}

// ---------------------------------------------------------------------------
// bcast: an axis of length 1 in wrap and clip mode, where every index resolves
// to 0: the output is each outer slice's row repeated n_indices times, and no
// index is read (the other kinds read n_indices * sizeof(Idx) bytes for it).
// flat's chunks of the contiguous output (FlatArgs, V = flat_units<U>()), one
// split of the chunk's first unit, then its units in order; unit u of row
// R = (o, n) is unit u of outer slice o.  Units past the output's end read
// unit 0 of slice 0 and are not stored.  One build serves wrap and clip.
// ---------------------------------------------------------------------------
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_bcast(const FlatArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int V = flat_units<U>();
    const Ix total = (Ix)a.total, chunks = (Ix)a.chunks;
    const Ix units = (Ix)a.unit_div.d, n_idx = (Ix)a.n_div.d;
    for (Ix c = (Ix)blockIdx.x * (Ix)blockDim.x + (Ix)threadIdx.x; c < chunks;
         c += (Ix)gridDim.x * (Ix)blockDim.x) {
        const Ix g0 = c * (Ix)V;
        Ix row, u, o, n;
        divmod<M>(a.unit_div, g0, row, u);
        divmod<M>(a.n_div, row, o, n);
        U v[V];
#pragma unroll
        for (int k = 0; k < V; ++k) {
            if (g0 + (Ix)k >= total) {
                u = 0;
                o = 0;
            }
            v[k] = __ldg((const U*)(a.data + (i64)o * a.s_outer) + u);
            if (++u == units) {
                u = 0;
                if (++n == n_idx) {
                    n = 0;
                    ++o;
                }
            }
        }
        if (g0 + (Ix)V <= total) {
            typedef typename FlatChunk<V * sizeof(U)>::T Chunk;
            Chunk w;
            memcpy(&w, v, sizeof(Chunk));
            store_stream((Chunk*)a.out + c, w);
        } else {  // the last chunk: only the units that exist
#pragma unroll
            for (int k = 0; k < V; ++k)
                if (g0 + (Ix)k < total) store_stream((U*)a.out + g0 + k, v[k]);
        }
    }
}

// ---------------------------------------------------------------------------
// bcastw: bcast for rows of 16 bytes or more whose unit is narrow (a row length
// or table not 16-byte aligned): window's 16-byte output chunks, each part read
// as two aligned 16-byte blocks of the outer slice's row and shifted into
// place, with no index read (window_row<..., BCAST>).  bcast moves a 1-byte
// unit row as one byte load per output byte and 8-byte stores.  WindowArgs, as
// window; one build, "wrap", serves wrap and clip.
// ---------------------------------------------------------------------------
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_bcastw(const WindowArgs& a)
{
    gather_window<U, Idx, M, MODE, false, true>(a);
}

// ---------------------------------------------------------------------------
// lean: one unit per thread over the contiguous output, nothing unrolled.  A
// short call's time is its launch and two dependent loads (index, then data);
// this kernel puts the least code between them.  Output unit t is unit u of
// row R (t = R * units + u), row R index position n of outer slice o.
// FlatArgs, with `chunks` unused.
// ---------------------------------------------------------------------------
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_lean(const FlatArgs& a)
{
    typedef typename M::Ix Ix;
    const Ix total = (Ix)a.total;
    const Idx* idx = (const Idx*)a.indices;
    for (Ix t = (Ix)blockIdx.x * (Ix)blockDim.x + (Ix)threadIdx.x; t < total;
         t += (Ix)gridDim.x * (Ix)blockDim.x) {
        Ix row, u, o, n;
        divmod<M>(a.unit_div, t, row, u);
        divmod<M>(a.n_div, row, o, n);
        i64 i = load_index(idx + n);
        const bool keep = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)n);
        store_stream((U*)a.out + t,
                     keep ? __ldg((const U*)(a.data + (i64)o * a.s_outer + i * a.s_axis) + u)
                          : fill_at<U>(a.fill, (u64)t));
    }
}

// ---------------------------------------------------------------------------
// span: long rows of any length at any alignment, written to the contiguous
// output as aligned 16-byte stores, every source block read once, through
// shared memory.  An item is a segment of one output row: SEG = 32 * CG_SPAN_V
// of the row's aligned output chunks; items go to warps, one at a time each,
// and no barrier joins the warps of a block.  Chunk k is the aligned output
// block at a0 + 16k (a0: the row's first 16-byte aligned output byte); its
// bytes start at sp + 16k (sp = src + (a0 - row start)), d bytes past the
// aligned block sb + 16k, the same d for every k of the row.  The warp stages
// the segment's aligned source blocks (one more than its chunks when d > 0)
// in its own slice of shared memory by cp.async, which holds no register while
// in flight (sm_80 on; a plain load and store before), then each lane shifts
// its chunks out of two neighbouring blocks and stores them.  Blocks that reach
// outside [lo, hi) (a table that does not start or end on a 16-byte boundary)
// are read bounded, word by word.  The bytes before a0 and after the last
// whole chunk, at most 15 each, are read and written one per lane by the
// row's first and last segment.  On odd rows of 5-50 KB from DRAM this runs
// 1.02-1.03x the version before it (H100, benchmarks/probe-spanw), which staged
// the segments of a block's rows together between two __syncthreads, and 1.07x
// on 7 KB rows from a 2 MB table.
// ---------------------------------------------------------------------------
#if !defined(CG_SPAN_V)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

// 16 bytes from global to shared memory, asynchronously where the
// architecture has cp.async (both addresses 16-byte aligned).
__device__ __forceinline__ void copy_async16(uint4* smem, const uint4* src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (u32)__cvta_generic_to_shared(smem)),
                 "l"(src)
                 : "memory");
#else
    *smem = __ldg(src);
#endif
}

// Every copy_async16 of this thread has landed.
__device__ __forceinline__ void copy_async_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_span(const SpanArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr u32 SEG = 32 * CG_SPAN_V;
    CG_DYNAMIC_SMEM(uint4, stage_all);  // SEG + 1 blocks per warp
    const u32 lane = threadIdx.x & 31u, warps = blockDim.x >> 5;
    uint4* const stage = stage_all + (u64)(threadIdx.x >> 5) * (SEG + 1);
    const u64 rb = a.row_bytes;
    const u64 lo = (u64)(a.data + a.lo), hi = (u64)(a.data + a.hi);
    const uint4 fillv = fill_unit<uint4>(a.fill);
    const Idx* idx = (const Idx*)a.indices;
    const Ix items = (Ix)a.items, last_seg = (Ix)a.seg_div.d - 1;

    for (Ix it = (Ix)blockIdx.x * (Ix)warps + (Ix)(threadIdx.x >> 5); it < items;
         it += (Ix)gridDim.x * (Ix)warps) {
        Ix r, sg, o, n;
        divmod<M>(a.seg_div, it, r, sg);
        divmod<M>(a.n_div, r, o, n);
        i64 i = load_index(idx + n);
        const bool keep = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)n);
        // Only resolved indices are scaled: a discarded one may be near 2^63.
        const u64 src = keep ? (u64)(a.data + (i64)o * a.s_outer + i * a.s_axis) : 0;
        const u64 ob = (u64)a.out + (u64)r * rb, end = ob + rb;
        const u64 a0 = (ob + 15u) & ~(u64)15;
        const u64 nc = end >= a0 + 16 ? (end - a0) >> 4 : 0;  // whole aligned chunks
        const u64 sp = src + (a0 - ob);
        const u32 d = (u32)sp & 15u;
        const u64 base = (u64)sg * SEG;
        const u32 n_out = base < nc ? (u32)(nc - base < SEG ? nc - base : SEG) : 0u;
        const u32 n_in = keep && n_out ? n_out + (d != 0) : 0u;  // blocks to stage
        const u64 q0 = sp - d + 16 * base;  // the aligned block under the item's first chunk
        if (q0 >= lo && q0 + 16 * (u64)n_in <= hi) {  // warp-uniform: no block at an edge
#pragma unroll
            for (int k = 0; k <= CG_SPAN_V; ++k) {
                const u32 j = lane + 32 * k;
                if (j < n_in) copy_async16(stage + j, (const uint4*)(q0 + 16 * j));
            }
        } else {
            for (u32 j = lane; j < n_in; j += 32) {
                const u64 q = q0 + 16 * j;
                if (q >= lo && q + 16 <= hi)
                    copy_async16(stage + j, (const uint4*)q);
                else
                    stage[j] = load_edge_block(q, lo, hi);
            }
        }
        // Head and tail bytes while the blocks land: at most 15 each (a row of
        // fewer than 32 bytes has no whole chunk and at most 31 head bytes).
        const u64 tail = nc ? a0 + 16 * nc : end;
        const u64 hn = sg == 0 ? (nc ? a0 : end) - ob : 0, tn = sg == last_seg ? end - tail : 0;
        if (lane < hn + tn) {
            const u64 bq = lane < hn ? ob + lane : tail + (lane - hn);
            const u32 f = (u32)bq & 15u;  // out is 16-byte aligned: the fill pattern's byte
            const u64 fw = (f & 8u) ? a.fill[1] : a.fill[0];
            store_stream((unsigned char*)bq,
                         keep ? __ldg((const unsigned char*)(src + (bq - ob)))
                              : (unsigned char)(fw >> ((f & 7u) * 8u)));
        }
        copy_async_wait();
        __syncwarp();
#pragma unroll
        for (int k = 0; k < CG_SPAN_V; ++k) {
            const u32 j = lane + 32 * k;
            if (j < n_out) {
                uint4 v = fillv;
                if (keep) v = d ? window16(stage[j], stage[j + 1], d) : stage[j];
                store_stream((uint4*)(a0 + 16 * (base + j)), v);
            }
        }
        __syncwarp();  // before the next item overwrites the stage
    }
}

// ---------------------------------------------------------------------------
// check: raise mode runs this before the gather; it records the first
// position whose index lies outside [-s, s).
// ---------------------------------------------------------------------------
template <class Idx>
__device__ __forceinline__ void check_indices(const CheckArgs& a)
{
    const Idx* idx = (const Idx*)a.indices;
    const u64 step = (u64)gridDim.x * blockDim.x;
    for (u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x; p < a.n; p += step) {
        const i64 i = load_index(idx + p);
        if (i < -a.axis_len || i >= a.axis_len) atomicMin(a.first_bad, (unsigned long long)p);
    }
}

}  // namespace cg

#endif  // CUGATHER_GATHER_CUH
