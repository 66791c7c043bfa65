"""What the seg kernel does that a kernel of torch's structure does not
(BENCHMARKS.md, "Short calls of long rows"), on a GPU:

    python benchmarks/probe-short/bisect.py   # writes $OUT/probe-short-bisect.json

Same launch (a block row per index, min(256, units rounded up to warps)
threads, one 16-byte unit per thread) for every variant, on short calls of
rows that are a multiple of 16 bytes, axis 0; written here, compiled by
NVRTC through CuPy:

  tv       torch's structure: the index read with a plain load, 5 scalar params
  tvnc     the index read through the read-only path (__ldg), as cugather does
  tvseg    seg's code with scalar params: rows in a grid-stride loop, the row
           split by fast_divmod, wrap mode's range test, 64-bit addresses
  tvseglb  tvseg under __launch_bounds__(256, 8), as seg is built
  tvrows, tvdiv, tvwrap (from bisect-2.json on)
           tv plus one part of seg: the grid-stride loop over rows, the
           fast_divmod split, wrap mode's range test; tvwrapo that test with
           its rare path (a division) in a function of its own; tvall all
           three, tvallo all three with the rare path out of line
  tvS      tv reading its params from a 144-byte struct laid out as GatherArgs
           (one kernel parameter, launched by cuLaunchKernel as cugather does)
  seg      seg, a kernel kind of this shape tried in the library and not kept
           (seg-kernel.diff against cugather 1145da3 adds it), through the
           library's own bind and launch path: bisect-1.json and bisect-2.json
           with its first form (rows over blockIdx.x split by fast_divmod),
           bisect-3.json with the one in the diff (index positions over x,
           outer slices over z, loops tested after their first pass)
  lean     the library's lean kernel (lean forced; where its output limit
           allows; added after the three runs)

Every output is checked against cupy.take.  Medians of 60 calls, each between
two events behind a holding kernel, microseconds.
"""
import json, os
import numpy as np
import cupy as cp
from cugather.bench.peers import time_cupy, time_torch
from cugather.plan.core import Operand, alignment, cdiv
from cugather.plan.fastdiv import make_divisor
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
CASES = [
    ((139, 957, 2), "int64", (137,), "int32"),
    ((40000, 8528), "int8", (243,), "int32"),
    ((2835, 342), "int64", (217,), "int32"),
    ((15061, 268), "float32", (290,), "int32"),
    ((200000, 1696), "uint8", (114,), "int32"),
    ((8398, 2, 1, 2329), "float64", (32,), "int64"),
    ((446, 1238), "int64", (139,), "int64"),
    ((40000, 467, 2), "complex128", (30,), "int64"),
    ((481646, 66, 1), "float64", (17,), "int64"),
]
SRC = r"""
typedef unsigned long long u64;
template <class I, bool NC>
__device__ __forceinline__ void tv_body(char* out, const char* inp, const I* idx, long long slice,
                                        long long stride)
{
    long long ind = NC ? (long long)__ldg(idx + blockIdx.x) : (long long)idx[blockIdx.x];
    for (int off = (blockDim.x * blockIdx.y + threadIdx.x) * 16; off < slice;
         off += blockDim.x * gridDim.y * 16)
        *(uint4*)(out + (long long)blockIdx.x * slice + off) =
            __ldg((const uint4*)(inp + ind * stride + off));
}
template <class I>
__device__ __forceinline__ void seg_body(char* out, const char* data, const I* idx,
    long long s_outer, long long s_axis, long long axis_len, unsigned rows, unsigned units,
    unsigned nd, unsigned m, unsigned l)
{
    for (unsigned row = blockIdx.x; row < rows; row += gridDim.x) {
        unsigned o = (__umulhi(m, row) + row) >> l, n = row - o * nd;
        long long i = (long long)__ldg(idx + n);
        if ((u64)i >= (u64)axis_len) {
            if (i < 0 && i >= -axis_len) i += axis_len;
            else { i %= axis_len; if (i < 0) i += axis_len; }
        }
        const uint4* src = (const uint4*)(data + (long long)o * s_outer + i * s_axis);
        uint4* dst = (uint4*)out + (u64)row * units;
        for (unsigned u = blockIdx.y * blockDim.x + threadIdx.x; u < units;
             u += gridDim.y * blockDim.x)
            __stcs(dst + u, __ldg(src + u));
    }
}
__device__ __noinline__ long long wrap_slow(long long i, long long s)
{
    if (i < 0 && i >= -s) return i + s;
    i %= s;
    return i < 0 ? i + s : i;
}
// tv plus one of seg's parts: ROWS a grid-stride loop over rows, DIV the row
// split by fast_divmod, WRAP wrap mode's range test (1 inline, 2 its rare
// path out of line), S64 64-bit unit offsets
template <class I, bool ROWS, bool DIV, int WRAP>
__device__ __forceinline__ void part_body(char* out, const char* data, const I* idx,
    long long s_outer, long long s_axis, long long axis_len, unsigned rows, unsigned units,
    unsigned nd, unsigned m, unsigned l)
{
    for (unsigned row = blockIdx.x; row < rows; row += ROWS ? gridDim.x : rows) {
        unsigned o = 0, n = row;
        if (DIV) { o = (__umulhi(m, row) + row) >> l; n = row - o * nd; }
        long long i = (long long)idx[n];
        if (WRAP == 1 && (u64)i >= (u64)axis_len) {
            if (i < 0 && i >= -axis_len) i += axis_len;
            else { i %= axis_len; if (i < 0) i += axis_len; }
        }
        if (WRAP == 2 && (u64)i >= (u64)axis_len) i = wrap_slow(i, axis_len);
        const char* src = data + (DIV ? (long long)o * s_outer : 0) + i * s_axis;
        char* dst = out + (long long)row * units * 16;
        for (int off = (blockDim.x * blockIdx.y + threadIdx.x) * 16; off < (int)units * 16;
             off += blockDim.x * gridDim.y * 16)
            *(uint4*)(dst + off) = __ldg((const uint4*)(src + off));
        if (!ROWS) break;
    }
}
struct Args {  // GatherArgs' layout
    const char* data; const void* indices; char* out; u64* first_bad;
    long long s_outer, s_axis, axis_len; u64 rows, units, n_indices, outer;
    u64 d, m; unsigned l, pad; unsigned chunk, stage_unit, row_unroll, pad2; u64 fill[2];
};
#define ENTRIES(T, S) \
extern "C" __global__ void tv##S(char* o, const char* i, const T* x, long long s, long long t) \
{ tv_body<T, false>(o, i, x, s, t); } \
extern "C" __global__ void tvnc##S(char* o, const char* i, const T* x, long long s, long long t) \
{ tv_body<T, true>(o, i, x, s, t); } \
extern "C" __global__ void tvseg##S(char* o, const char* d, const T* x, long long so, long long sa, \
    long long al, unsigned r, unsigned u, unsigned nd, unsigned m, unsigned l) \
{ seg_body<T>(o, d, x, so, sa, al, r, u, nd, m, l); } \
extern "C" __global__ void __launch_bounds__(256, 8) tvseglb##S(char* o, const char* d, const T* x, \
    long long so, long long sa, long long al, unsigned r, unsigned u, unsigned nd, unsigned m, \
    unsigned l) \
{ seg_body<T>(o, d, x, so, sa, al, r, u, nd, m, l); } \
extern "C" __global__ void tvS##S(const Args a) \
{ tv_body<T, false>(a.out, a.data, (const T*)a.indices, (long long)(a.units * 16), a.s_axis); }
#define PART(NAME, T, S, ROWS, DIV, WRAP) \
extern "C" __global__ void NAME##S(char* o, const char* d, const T* x, long long so, long long sa, \
    long long al, unsigned r, unsigned u, unsigned nd, unsigned m, unsigned l) \
{ part_body<T, ROWS, DIV, WRAP>(o, d, x, so, sa, al, r, u, nd, m, l); }
#define PARTS(T, S) PART(tvrows, T, S, true, false, 0) PART(tvdiv, T, S, false, true, 0) \
    PART(tvwrap, T, S, false, false, 1) PART(tvwrapo, T, S, false, false, 2) \
    PART(tvall, T, S, true, true, 1) PART(tvallo, T, S, true, true, 2)
PARTS(int, 32)
PARTS(long long, 64)
ENTRIES(int, 32)
ENTRIES(long long, 64)
"""


def us(t):
    return float(np.median(t)) * 1000


def main():
    import torch
    from cupy.cuda import driver
    mod = cp.RawModule(code=SRC)
    res = []
    for shape, dtype, ishape, idt in CASES:
        rng = cp.random.default_rng(1)
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        data = rng.integers(0, 1 << 30, size=(n + 3) // 4, dtype=np.int32).view(np.uint8)[:n]
        data = data.view(dtype).reshape(shape)
        idx = rng.integers(0, shape[0], size=ishape, dtype=np.int64).astype(idt)
        ref = cp.take(data, idx, axis=0)
        rb = n // shape[0]
        units = rb // 16
        row = {"shape": shape, "dtype": dtype, "indices": ishape, "index_dtype": idt,
               "row_bytes": rb, "out_bytes": int(ref.nbytes), "us": {}}
        u = row["us"]
        out = cp.empty(ref.shape, ref.dtype)
        grid = (int(idx.size), cdiv(units, 256), 1)
        block = (min(256, cdiv(units, 32) * 32), 1, 1)
        s = "32" if idt == "int32" else "64"
        div = make_divisor(int(idx.size), 32)
        calls = {
            "tv": (mod.get_function("tv" + s), (out, data, idx, np.int64(rb), np.int64(rb))),
            "tvnc": (mod.get_function("tvnc" + s), (out, data, idx, np.int64(rb), np.int64(rb))),
        }
        for name in ("tvseg", "tvseglb", "tvrows", "tvdiv", "tvwrap", "tvwrapo", "tvall",
                     "tvallo"):
            calls[name] = (mod.get_function(name + s),
                           (out, data, idx, np.int64(0), np.int64(rb), np.int64(shape[0]),
                            np.uint32(idx.size), np.uint32(units), np.uint32(div.d),
                            np.uint32(div.m), np.uint32(div.l)))
        for name, (k, args) in calls.items():
            f = lambda: k(grid, block, args)  # noqa: E731
            out[...] = 0
            f()
            assert bool((out.view(cp.uint8) == ref.view(cp.uint8)).all()), (name, shape)
            u[name] = us(time_cupy(cp, f, 60))
        # tvS: one struct parameter through cuLaunchKernel
        a = np.zeros(18, np.uint64)
        a[0], a[1], a[2] = data.data.ptr, idx.data.ptr, out.data.ptr
        a[5], a[8] = rb, units
        params = np.array([a.ctypes.data], np.uint64)
        fptr = mod.get_function("tvS" + s).kernel.ptr
        f = lambda: driver.launchKernel(fptr, grid[0], grid[1], 1, block[0], 1, 1, 0,  # noqa: E731
                                        cp.cuda.get_current_stream().ptr, params.ctypes.data, 0)
        out[...] = 0
        f()
        assert bool((out.view(cp.uint8) == ref.view(cp.uint8)).all()), ("tvS", shape)
        u["tvS"] = us(time_cupy(cp, f, 60))
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        for kind in ("seg", "lean"):
            try:
                plan = plan_gather(operand, idx.shape, idt, 0, "wrap", limits=CUDA.limits(0),
                                   kind=kind)
            except ValueError:  # seg: only with seg-kernel.diff applied
                continue
            bound = bind(plan, 0, None, CUDA, data.dtype)
            g = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
            assert bool((g().view(cp.uint8) == ref.view(cp.uint8)).all()), (kind, shape)
            u[kind] = us(time_cupy(cp, g, 60))
        td, ti = torch.from_dlpack(data), torch.from_dlpack(idx)
        u["torch"] = us(time_torch(torch, lambda: torch.index_select(td, 0, ti), 60))
        u["tv_again"] = us(time_cupy(cp, lambda: calls["tv"][0](grid, block, calls["tv"][1]), 60))
        print(shape, dtype, ishape, idt, {k: round(v, 2) for k, v in u.items()}, flush=True)
        res.append(row)
        del data, idx, ref, out, td, ti
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-short-bisect.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
