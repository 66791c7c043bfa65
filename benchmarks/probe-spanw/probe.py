"""Whether a warp-owned span kernel beats the shipped span on long rows at any
byte alignment from DRAM (BENCHMARKS.md, "Long rows from DRAM"), on a GPU:

    python benchmarks/probe-spanw/probe.py   # writes $OUT/probe-spanw.json (default /tmp)

span stages a block row's segment of aligned 16-byte source blocks in shared
memory with cp.async and shifts them into aligned output chunks between two
__syncthreads; on odd rows of 4-62 KB it reached 0.88-0.94 of the copy.  The
kernels here (SOURCE) have no block barrier at all: a WARP owns one segment of
one output row (32 V aligned 16-byte output chunks; items are (row, segment)
pairs, grid-stride, warp-uniform), stages its 32 V + 1 source blocks in its
own slice of shared memory by cp.async.cg, waits for them with __syncwarp,
funnel-shifts (window16) and stores with st.global.cs:

    warp      one buffer, a grid of one item per warp
    warp-res  one buffer, a grid of the resident blocks only (grid-stride)
    warp2     two buffers, resident grid: the next item's cp.async is issued
              (commit_group) before wait_group 1 and the current item's shifts
              and stores, so a warp always has one segment's loads in flight

The bytes before a row's first aligned output chunk and after its last whole
one (at most 15 each) are copied bytewise by the warp of segment 0 / the last
segment; source blocks that reach outside the table are read word by word or
byte by byte (load_block of kernels/gather.cuh), never past its ends.  A
warp-register version (no shared memory) is left out: span's notes put one at
0.48-0.72 of copy.

PROBE_SET=short (or all) takes span's shorter rows and L2-resident tables
instead (SHORT); PROBE_MINE=warp-t128-v4,... keeps only the kernels named.
Cases: held-out sweeps' (7129, 8017, 3863, 2459) long odd rows where span or
chunks16 missed 95% of the copy on an H100, then two aligned controls.  A
table over 3 GB has its axis shrunk to about 2 GB (still far beyond the 50 MB
L2; row length and index count kept).  Per case, in one process: the device
copy of the output bytes (cudaMemcpyAsync), the shipped plan, forced span,
chunks and window plans, and the kernels above with 128 and 256 threads and V
in {2, 4, 8}.  Every variant is first checked bit for bit against cupy.take
(a mismatch is recorded in "errors" and not timed).  Times: medians of 30
calls between CUDA events behind a holding kernel (time_cupy), taken in
PROBE_ROUNDS (default 3) interleaved rounds of 30 / ROUNDS calls over all the
variants of the case, in microseconds.  PROBE_BUDGET_S (default 150) stops
starting new cases past that many seconds.  The result file also has each
kernel's registers, local (spill) bytes, dynamic shared memory and resident
blocks per SM.
"""
import json, os, time
import numpy as np
import cupy as cp
from cugather.bench.peers import time_cupy
from cugather.bench.sweep import SweepShape
from cugather.bench.sweep_run import make_table
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "150"))
ROUNDS = int(os.environ.get("PROBE_ROUNDS", "3"))
MAX_TABLE, SHRUNK_TABLE = 3e9, 2e9
LIBRARY = {"shipped": None, "span": "span", "chunks": "chunks", "window": "window"}
MINE = [(k, t, v) for k in ("warp", "warp2") for t in (128, 256) for v in (2, 4, 8)]
MINE += [("warp-res", 256, 4), ("warp-res", 256, 8)]
CASES = [  # (shape, dtype, axis, indices, index dtype, where it came from)
    ((1, 54832, 27105), 'bool', 1, (38317,), 'int32', "7129#82 span 0.926"),
    ((401628, 30235), 'uint8', 0, (21221,), 'int32', "8017#404 span 0.920"),
    ((90321, 1, 49537, 1), 'bool', 0, (88, 186), 'int64', "3863#19 span 0.916"),
    ((297848, 5847), 'bool', 0, (19072,), 'int64', "8017#305 span 0.944"),
    ((80538, 34895), 'uint8', 0, (2, 1983), 'int64', "2459#102 span 0.940"),
    ((56100, 5942, 6), 'bool', 0, (1, 29091), 'int64',
     "7129#412 chunks16 u4 0.835 (35652 B rows, 4-byte aligned)"),
    ((281962, 10180), 'uint8', 0, (33162,), 'int32', "7129#313 chunks16 u4 0.913"),
    ((412, 2, 93, 39), 'int8', 0, (1718,), 'int32', "3863#259 span 0.877 (2 MB table, 12 MB out)"),
    # controls: aligned rows
    ((3, 45228, 2037), 'complex128', 1, (7140,), 'int32', "3863#199 chunks 0.933 (aligned)"),
    ((2, 381210, 1405, 1), 'complex128', 1, (860,), 'int32', "chunks aligned control"),
]

# PROBE_SET=short: span's shorter rows (661 B-4.5 KB) and tables in L2 where the
# held-out sweeps (H100) plan span, against their sweep's fraction of copy.
SHORT = [
    ((136, 15, 723, 1), 'uint8', 1, (15, 2), 'int64', "2459#46 span 0.907 (723 B, 2 MB out)"),
    ((1196, 1002), 'int8', 0, (6365,), 'int32', "2459#383 span 0.953 (1002 B, 6 MB out)"),
    ((600, 1, 661, 1), 'int8', 0, (223740,), 'int64', "2459#441 span 1.123 (661 B, L2 table)"),
    ((3216295, 625), 'float16', 0, (270, 330), 'int32', "5591#183 span 0.854 (1250 B)"),
    ((1191689, 1, 11, 61), 'float16', 0, (502862,), 'int32', "5813#23 span 0.863 (1342 B)"),
    ((543, 439), 'int16', 0, (47493,), 'int32', "8017#67 span 1.319 (878 B, L2 table)"),
    ((467, 773), 'int8', 0, (86309,), 'int32', "8017#424 span 1.314 (773 B, L2 table)"),
    ((914, 1, 2129, 1), 'uint8', 0, (4666,), 'int32', "6733#364 span 0.933 (2129 B, 9 MB out)"),
    ((3335, 2880, 1523), 'bool', 1, (6,), 'int32', "5591#279 span 0.934 (1523 B, 3 outer)"),
    ((2836646, 753, 3), 'float16', 0, (18356,), 'int32', "4909#491 span 0.927 (4518 B)"),
    ((262, 1145, 3, 303), 'float16', 1, (89, 25), 'int64', "4817#248 span 1.214 (1818 B)"),
    ((2, 2077, 2), 'int32', 0, (8695,), 'int32', "3863#181 span 1.308 (16616 B, L2 table)"),
]
SETS = {"long": CASES, "short": SHORT, "all": CASES + SHORT}
PROBE_SET = os.environ.get("PROBE_SET", "long")
if os.environ.get("PROBE_MINE"):  # e.g. warp-t128-v4,warp-t256-v4
    MINE = [m for m in MINE if f"{m[0]}-t{m[1]}-v{m[2]}" in os.environ["PROBE_MINE"].split(",")]

SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned char u8;

// Bytes [s, s + 16) of the 32 bytes a, b (kernels/gather.cuh's window16).
__device__ __forceinline__ uint4 window16(const uint4& a, const uint4& b, u32 s)
{
    const u32 q = s >> 2, r = (s & 3) * 8;
    const u32 w0 = q == 0 ? a.x : q == 1 ? a.y : q == 2 ? a.z : a.w;
    const u32 w1 = q == 0 ? a.y : q == 1 ? a.z : q == 2 ? a.w : b.x;
    const u32 w2 = q == 0 ? a.z : q == 1 ? a.w : q == 2 ? b.x : b.y;
    const u32 w3 = q == 0 ? a.w : q == 1 ? b.x : q == 2 ? b.y : b.z;
    const u32 w4 = q == 0 ? b.x : q == 1 ? b.y : q == 2 ? b.z : b.w;
    return make_uint4(__funnelshift_r(w0, w1, r), __funnelshift_r(w1, w2, r),
                      __funnelshift_r(w2, w3, r), __funnelshift_r(w3, w4, r));
}

// The aligned block at q that reaches outside [lo, hi): its words inside by
// word loads, the word holding an end byte by byte, the rest zero.
__device__ __forceinline__ uint4 load_edge(u64 q, u64 lo, u64 hi)
{
    u32 w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const u64 p = q + 4 * k;
        if (p >= lo && p + 4 <= hi) {
            w[k] = __ldg((const u32*)p);
        } else if (p + 4 > lo && p < hi) {
            for (int j = 0; j < 4; ++j)
                if (p + j >= lo && p + j < hi) w[k] |= (u32)__ldg((const u8*)(p + j)) << (j * 8);
        }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void cp16(uint4* s, u64 g)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                     (u32)__cvta_generic_to_shared(s)), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
__device__ __forceinline__ void cp_wait_1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

struct Args {
    u64 lo, hi;      // the table's bytes
    u64 out, rb;     // output base (256-byte aligned), row bytes
    u64 s_outer;     // bytes between outer slices of the table
    u32 n_idx, nseg, items;  // indices, segments per row, rows * nseg
};

// Item it = (output row r, segment s): where its chunks come from and go.
struct Item {
    u64 src, ob, a0, sb, tail, base;  // row source, row output, first chunk,
    u32 d, n_out, s;                  // block under chunk 0, tail bytes, first chunk index
};

template <class Idx, int V>
__device__ __forceinline__ Item item_at(const Args& a, const Idx* idx, u32 it)
{
    Item t;
    const u32 r = it / a.nseg, o = r / a.n_idx;
    t.s = it - r * a.nseg;
    const i64 i = (i64)__ldg(idx + (r - o * a.n_idx));
    t.src = a.lo + (u64)o * a.s_outer + (u64)i * a.rb;
    t.ob = a.out + (u64)r * a.rb;
    t.a0 = (t.ob + 15u) & ~(u64)15;
    const u64 nc = (t.ob + a.rb - t.a0) >> 4;  // whole aligned chunks (rb >= 32)
    t.tail = t.a0 + 16 * nc;
    const u64 sp = t.src + (t.a0 - t.ob);
    t.d = (u32)sp & 15u;
    t.sb = sp - t.d;
    t.base = (u64)t.s * (32 * V);
    t.n_out = t.base < nc ? (u32)(nc - t.base < 32 * V ? nc - t.base : 32 * V) : 0u;
    return t;
}

// This lane's share of the item's source blocks into stage by cp.async; an
// item that touches the table's first or last block (rare) takes the checked
// loop, its edge blocks by plain loads and a shared store.
template <int V>
__device__ __forceinline__ void stage_in(uint4* stage, const Item& t, const Args& a, u32 lane)
{
    const u32 n_in = t.n_out ? t.n_out + (t.d != 0) : 0u;
    const u64 q0 = t.sb + 16 * t.base;
    if (q0 >= a.lo && q0 + 16 * n_in <= a.hi) {  // warp-uniform: no block at an edge
#pragma unroll
        for (int k = 0; k <= V; ++k)
            if (lane + 32 * k < n_in) cp16(stage + lane + 32 * k, q0 + 16 * (lane + 32 * k));
        return;
    }
    for (u32 j = lane; j < n_in; j += 32) {
        const u64 q = q0 + 16 * j;
        if (q >= a.lo && q + 16 <= a.hi) cp16(stage + j, q);
        else stage[j] = load_edge(q, a.lo, a.hi);
    }
}

// Head bytes (segment 0) and tail bytes (last segment), one per lane.
__device__ __forceinline__ void edge_bytes(const Item& t, const Args& a, u32 lane)
{
    if (t.s == 0 && lane < t.a0 - t.ob)
        __stcs((u8*)(t.ob + lane), __ldg((const u8*)(t.src + lane)));
    if (t.s == a.nseg - 1 && lane < t.ob + a.rb - t.tail)
        __stcs((u8*)(t.tail + lane), __ldg((const u8*)(t.src + (t.tail - t.ob) + lane)));
}

template <int V>
__device__ __forceinline__ void stage_out(const uint4* stage, const Item& t, u32 lane)
{
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const u32 j = lane + 32 * k;
        if (j < t.n_out)
            __stcs((uint4*)(t.a0 + 16 * (t.base + j)),
                   t.d ? window16(stage[j], stage[j + 1], t.d) : stage[j]);
    }
}

// DB false: one stage of 32 V + 1 blocks per warp; true: two, the next
// item's loads in flight while this one is shifted and stored.  (256, 4): at
// most 64 registers; ptxas then gives 48 (one stage) and 55 (two) on sm_90,
// no spills, where unbounded it took 57-79.
template <class Idx, int V, bool DB>
__global__ void __launch_bounds__(256, 4) spanw(Args a, const Idx* __restrict__ idx)
{
    extern __shared__ uint4 smem[];
    const u32 lane = threadIdx.x & 31u, w = threadIdx.x >> 5, wpb = blockDim.x >> 5;
    uint4* const st0 = smem + (u64)w * (DB ? 2 : 1) * (32 * V + 1);
    const u32 nw = gridDim.x * wpb;
    u32 it = blockIdx.x * wpb + w;
    if (!DB) {
        for (; it < a.items; it += nw) {
            const Item t = item_at<Idx, V>(a, idx, it);
            stage_in<V>(st0, t, a, lane);
            edge_bytes(t, a, lane);
            cp_wait_all();
            __syncwarp();
            stage_out<V>(st0, t, lane);
            __syncwarp();  // before the next item overwrites the stage
        }
        return;
    }
    if (it >= a.items) return;
    Item cur = item_at<Idx, V>(a, idx, it);
    stage_in<V>(st0, cur, a, lane);
    cp_commit();
    u32 b = 0;
    for (; it < a.items; it += nw) {
        Item nxt = cur;
        if (it + nw < a.items) {
            nxt = item_at<Idx, V>(a, idx, it + nw);
            stage_in<V>(st0 + (b ^ 1u) * (32 * V + 1), nxt, a, lane);
        }
        cp_commit();  // possibly empty: wait_group 1 then always means "cur landed"
        edge_bytes(cur, a, lane);
        cp_wait_1();
        __syncwarp();
        stage_out<V>(st0 + b * (32 * V + 1), cur, lane);
        __syncwarp();  // before the item after next overwrites this stage
        cur = nxt;
        b ^= 1u;
    }
}
"""


def names():
    """Every instantiation SOURCE is compiled with."""
    return [f"spanw<{c}, {v}, {db}>" for c in ("int", "long long") for v in (2, 4, 8)
            for db in ("false", "true")]


ARGS = np.dtype([("lo", "u8"), ("hi", "u8"), ("out", "u8"), ("rb", "u8"), ("s_outer", "u8"),
                 ("n_idx", "u4"), ("nseg", "u4"), ("items", "u4"), ("pad", "u4")])


def us(t):
    return float(np.median(t)) * 1000


def fitted(shape, dtype, axis):
    """shape with its axis shrunk so the table is about 2 GB where it is over 3 GB."""
    s = SweepShape(shape, dtype, axis, (1,), "int32", "beyond", "loguniform")
    if s.table_bytes <= MAX_TABLE:
        return shape
    per = s.table_bytes // shape[axis]
    return shape[:axis] + (int(SHRUNK_TABLE // per),) + shape[axis + 1:]


def mine(mod, info, kern, threads, v, data, idx, s, sms):
    """A launcher of my kernel for case s (None where it does not apply)."""
    rb, n_idx = s.row_bytes, s.n_indices
    if rb < 32:
        return None
    rows, nseg = s.outer * n_idx, -(-(rb // 16) // (32 * v))
    items, wpb = rows * nseg, threads // 32
    if items >= 1 << 31:
        return None
    name = f"spanw<{'int' if s.index_dtype == 'int32' else 'long long'}, {v}, " \
           f"{'true' if kern == 'warp2' else 'false'}>"  # c++filt's spelling: CuPy's cache maps it
    k = mod.get_function(name)
    drv, f = cp.cuda.driver, k.kernel.ptr  # attributes as cugather/inspect/api.py reads them
    stage = (2 if kern == "warp2" else 1) * (32 * v + 1) * 16  # bytes per warp
    smem = wpb * stage  # allow 256 threads' worth: the variants share the function
    drv.funcSetAttribute(f, drv.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8 * stage)
    key = f"{kern}-t{threads}-v{v}"
    if key not in info:
        attr = {a: drv.funcGetAttribute(getattr(drv, "CU_FUNC_ATTRIBUTE_" + a.upper()), f)
                for a in ("num_regs", "local_size_bytes", "shared_size_bytes")}
        info[key] = {"name": name, **attr, "dynamic_smem": smem, "blocks_per_sm":
                     drv.occupancyMaxActiveBlocksPerMultiprocessor(f, threads, smem)}
    grid = -(-items // wpb)  # warp: one item per warp; the others: the resident blocks
    grid = grid if kern == "warp" else min(grid, sms * info[key]["blocks_per_sm"])
    lo = data.data.ptr
    launch = [name, [grid], [threads], smem]

    def fn():
        out = cp.empty(rows * rb, cp.uint8)
        a = np.array((lo, lo + s.table_bytes, out.data.ptr, rb, s.axis_len * rb, n_idx, nseg,
                      items, 0), dtype=ARGS)
        k((grid,), (threads,), (a, idx), shared_mem=smem)  # a 0-d array: by value
        return out
    return fn, launch


def main():
    res, info, t0 = [], {}, time.perf_counter()
    limits = CUDA.limits(0)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",), name_expressions=names())
    rt = cp.cuda.runtime
    for shape0, dtype, axis, ishape, idt, note in SETS[PROBE_SET]:
        if time.perf_counter() - t0 > BUDGET_S:
            break
        shape = fitted(shape0, dtype, axis)
        s = SweepShape(shape, dtype, axis, ishape, idt, "beyond", "loguniform")
        data = make_table(cp, s, 7)
        idx = cp.random.default_rng(3).integers(0, s.axis_len, size=ishape,
                                                dtype=np.int64).astype(idt)
        ref = cp.take(data, idx, axis=axis).reshape(-1).view(cp.uint8)
        rec = {"shape": shape0, "run_shape": shape, "dtype": dtype, "axis": axis,
               "indices": ishape, "index_dtype": idt, "note": note, "row_bytes": s.row_bytes,
               "row_mod16": s.row_bytes % 16, "out_bytes": s.out_bytes,
               "table_bytes": s.table_bytes, "us": {}, "launch": {}, "errors": {}}
        nb = s.out_bytes
        src, dst = cp.empty(nb, cp.uint8), cp.empty(nb, cp.uint8)
        fns = {"copy": lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, nb,
                                              rt.memcpyDeviceToDevice,
                                              cp.cuda.get_current_stream().ptr)}
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        cands = []
        for label, kind in LIBRARY.items():
            try:
                plan = plan_gather(operand, idx.shape, idt, axis, "wrap", limits=limits, kind=kind)
            except ValueError:
                continue
            if plan.main is None:
                continue
            if kind is None:
                rec["shipped_kind"] = plan.kind
            bound = bind(plan, 0, None, CUDA, data.dtype)
            fn = (lambda b: lambda: execute(b, data, data.data.ptr, idx, None, None, 0))(bound)
            cands.append((label, fn, [plan.key.entry, list(plan.main.grid),
                                      list(plan.main.block)]))
        for kern, threads, v in MINE:
            got = mine(mod, info, kern, threads, v, data, idx, s, sms)
            if got is not None:
                cands.append((f"{kern}-t{threads}-v{v}",) + got)
        for label, fn, launch in cands:
            try:
                bad = int((fn().reshape(-1).view(cp.uint8) != ref).sum())
            except Exception as e:  # noqa: BLE001 - recorded, the case goes on
                rec["errors"][label] = f"{type(e).__name__}: {e}"
                continue
            if bad:
                rec["errors"][label] = f"differs from cupy.take in {bad} bytes"
                continue
            rec["launch"][label] = launch
            fns[label] = fn
        samples = {k: [] for k in fns}
        for _ in range(ROUNDS):
            for label, fn in fns.items():
                samples[label] += time_cupy(cp, fn, max(1, 30 // ROUNDS))
        rec["us"] = {k: us(v) for k, v in samples.items()}
        c = rec["us"]["copy"]
        print(shape, dtype, axis, ishape, idt, note, f"R%16={s.row_bytes % 16}",
              "copy %.1f us |" % c,
              " ".join(f"{k} {c / v:.3f}" for k, v in rec["us"].items() if k != "copy"),
              rec["errors"] or "", flush=True)
        res.append(rec)
        data = idx = ref = src = dst = fns = cands = samples = None  # the closures read these
        cp.get_default_memory_pool().free_all_blocks()
    for k, v in info.items():
        print(k, v)
    name = "probe-spanw.json" if PROBE_SET == "long" else f"probe-spanw-{PROBE_SET}.json"
    with open(os.path.join(OUT, name), "w") as f:
        json.dump({"device": rt.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "rounds": ROUNDS, "kernels": info, "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
