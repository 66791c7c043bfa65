// cugather device code: GatherElements (take_along_axis, torch.gather) and
// its argument struct.  The body of the extern "C" entry points rendered from
// templates/gather.cu.j2; common.cuh comes first (raise mode's bounds check
// is gather.cuh's check_indices).
//
// U is the unit moved per load/store (1, 2, 4, 8 or 16 bytes), Idx the index
// element type (int or long long), M the index math (Math32, Math64), MODE the
// out-of-range policy.  Shapes are split on the host into as few dimensions
// as the strides allow.
#ifndef CUGATHER_ELEMENTS_CUH
#define CUGATHER_ELEMENTS_CUH

#if !defined(CG_ELEMENTS_ILP) || !defined(CG_ELEMENTS_ROW_PICKS)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

namespace cg {

// Argument struct, passed by value (cugather/plan/layout.py mirrors it).
// elements: out (contiguous, `total` units) is split, innermost first, into
// ndim dimensions.  A coordinate c of dimension d moves c * strides[d] bytes
// in data and c * index_strides[d] elements in indices (0 where broadcast);
// the gathered axis has data stride 0 and adds index * s_axis instead.
struct ElementsArgs {
    const char* data;
    const void* indices;
    char* out;
    u64* first_bad;  // raise mode: the first bad index position (see resolve_checked)
    u64 total;
    i64 axis_len;
    i64 s_axis;   // bytes per step of an index value
    u32 ndim;       // >= 1; the outermost dimension takes the quotient, no division
    u32 col_tiles;  // 0: slots in flat order; else column tiles (see gather_elements)
    u64 cols;       // column-tile order: units per row; elements_row: picks per row
    u64 row_tiles;  // column-tile order: tiles of CG_ELEMENTS_ILP * blockDim.x / 32 rows;
                    // elements_row: output rows
    u32 stage_unit; // elements_row: bytes per staging load
    u32 pad;
    Divisor dims[CG_MAX_DIMS];
    i64 strides[CG_MAX_DIMS];        // bytes
    u64 index_strides[CG_MAX_DIMS];  // index elements
    u64 fill[2];
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
    off = 0;
    ipos = 0;
    split_position<M>(a.dims, (int)a.ndim, t, [&](int d, Ix c, Ix) {
        off += (i64)c * a.strides[d];
        ipos += c * (Ix)a.index_strides[d];
    });
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
            keep[k] = resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)ipos);
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

// ---------------------------------------------------------------------------
// elements_row: the gathered axis is the output's innermost dimension (index
// stride 1), contiguous in data, and a data row fits in shared memory (ONNX
// GatherElements on the last axis, torch.gather's top-k pattern).  A block
// takes an output row of `cols` picks: its first CG_ELEMENTS_ROW_PICKS indices
// per thread are loaded, then the data row is staged with wide loads (both
// streams in flight together), then the picks are read from shared memory.
// Every byte of the row is read once, in full sectors; direct picks read one
// 32-byte sector each, several times over where picks share a sector.
// ---------------------------------------------------------------------------
template <class U, class Idx, class M, int MODE>
__device__ __forceinline__ void gather_elements_row(const ElementsArgs& a)
{
    typedef typename M::Ix Ix;
    constexpr int P = CG_ELEMENTS_ROW_PICKS;
    CG_DYNAMIC_SMEM(unsigned char, stage);
    const U* row = (const U*)stage;
    const Ix m = (Ix)a.cols, rows = (Ix)a.row_tiles, bs = (Ix)blockDim.x;
    const Idx* idx = (const Idx*)a.indices;
    U* out = (U*)a.out;
    const u64 row_bytes = (u64)a.axis_len * sizeof(U);

    for (Ix r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 off;
        Ix ipos;
        elements_offsets<M>(a, r * m, off, ipos);  // the row's first slot: axis coordinate 0
        i64 first[P];
#pragma unroll
        for (int k = 0; k < P; ++k) {
            const Ix j = (Ix)threadIdx.x + (Ix)k * bs;
            first[k] = j < m ? load_index(idx + ipos + j) : 0;
        }
        stage_row_by(a.stage_unit, a.data + off, stage, row_bytes);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < P; ++k) {
            const Ix j = (Ix)threadIdx.x + (Ix)k * bs;
            i64 i = first[k];
            if (j < m)
                store_stream(out + r * m + j,
                             resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)(ipos + j))
                                 ? row[i] : fill_at<U>(a.fill, (u64)(r * m + j)));
        }
        for (Ix j = (Ix)threadIdx.x + (Ix)P * bs; j < m; j += bs) {
            i64 i = load_index(idx + ipos + j);
            store_stream(out + r * m + j,
                         resolve_checked<MODE>(i, a.axis_len, a.first_bad, (u64)(ipos + j))
                             ? row[i] : fill_at<U>(a.fill, (u64)(r * m + j)));
        }
        __syncthreads();  // the next row may be staged over this one
    }
}

}  // namespace cg

#endif  // CUGATHER_ELEMENTS_CUH
