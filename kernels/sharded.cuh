// cugather device code: a gather from a row-sharded table whose shards live
// in several allocations (other GPUs' memory mapped through peer access, or
// any set of buffers), one launch.  The body of one extern "C" entry point
// rendered from templates/gather.cu.j2; common.cuh must come first.
//
// U is the unit moved per load/store (1, 2, 4, 8 or 16 bytes: the widest
// dividing the row bytes, the output and every shard's base address), Idx
// the index element type (int or long long), MODE the out-of-range policy
// applied to the global row number.  Raise mode trusts a prior bounds check
// (the check kernel of gather.cuh, run with axis_len = total).
#ifndef CUGATHER_SHARDED_CUH
#define CUGATHER_SHARDED_CUH

// CG_MAX_RANKS: most shards one argument block describes; CG_SHARDED_RU: rows
// per thread at most (the plan passes 1 .. CG_SHARDED_RU in row_unroll).  The
// sharded kind's spec (cugather/distributed/plan.py) renders them into its
// own source only.
#if !defined(CG_MAX_RANKS) || !defined(CG_SHARDED_RU)
#error "compile kernels/*.cuh through cugather's renderer: it defines the CG_* constants"
#endif

namespace cg {

// The argument struct (cugather/plan/layout.py SHARDED_ARGS mirrors it).
// Global row i lives in the last shard s with offsets[s] <= i, at row
// i - offsets[s] of the contiguous rows starting at bases[s].
struct ShardedArgs {
    const char* data;   // unused (0): rows come from the shard bases below
    const void* indices;
    char* out;
    u64* first_bad;     // raise mode: the first bad index position (see resolve_checked)
    u64 n;            // indices = rows of the output
    u64 units;        // units per row
    i64 total;        // rows of the whole table = offsets[n_shards]
    u32 n_shards;     // 1 .. CG_MAX_RANKS
    u32 row_unroll;   // rows per thread, 1 .. CG_SHARDED_RU
    u64 fill[2];
    i64 offsets[CG_MAX_RANKS + 1];
    u64 bases[CG_MAX_RANKS];  // addresses valid on the launching device
};

// Address of global row i (0 <= i < total).  The scan is unrolled so that
// every offsets/bases entry is read at a constant position of the parameter
// bank (uniform across the warp, no copy of the block to local memory); it
// stops after n_shards entries.  Empty shards repeat the next offset and are
// passed over (a later shard with the same offset wins).
template <class U>
__device__ __forceinline__ const U* shard_row(const ShardedArgs& a, i64 i)
{
    u64 base = a.bases[0];
    i64 first = 0;
#pragma unroll
    for (int s = 1; s < CG_MAX_RANKS; ++s) {
        if (s >= (int)a.n_shards) break;
        const i64 o = a.offsets[s];
        if (i >= o) {
            base = a.bases[s];
            first = o;
        }
    }
    return (const U*)base + (u64)(i - first) * a.units;
}

// The row tile of common.cuh (copy_rows): each thread moves CU units of up
// to RU rows (RU * CU loads in flight, which hides the latency of remote
// reads); a row's source is resolved once per thread.
template <class U, class Idx, int MODE, int CU, int RU>
__device__ __forceinline__ void sharded_tile(const ShardedArgs& a)
{
    const Idx* idx = (const Idx*)a.indices;
    copy_rows<U, Math64, MODE, CU, RU>(
        a.n, a.units, a.out, a.fill, (int)a.row_unroll,
        [&](u64 row) -> const U* {
            i64 i = load_index(idx + row);
            return resolve_checked<MODE>(i, a.total, a.first_bad, row) ? shard_row<U>(a, i)
                                                                      : (const U*)0;
        },
        [](const U* p) { return __ldg(p); });
}

template <class U, class Idx, int MODE>
__device__ __forceinline__ void gather_sharded(const ShardedArgs& a)
{
    sharded_tile<U, Idx, MODE, (sizeof(U) >= 8 ? 16 / sizeof(U) : 1), CG_SHARDED_RU>(a);
}

}  // namespace cg

#endif  // CUGATHER_SHARDED_CUH
