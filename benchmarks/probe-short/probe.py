"""Short calls of long rows, where torch.index_select wins by a few tenths of a
microsecond (BENCHMARKS.md, "Short calls of long rows"), on a GPU:

    python benchmarks/probe-short/probe.py     # writes $OUT/probe-short.json (default /tmp)

The cases are the held-out sweeps' losers of at most a few MiB out with rows
of 384 B to 63 KB (tables larger than L2 cut to a few hundred MB, still larger
than L2).  For each: the device copy of the output bytes, the library's plan;
the chunks kernel with one row per block and blocks of 256, 128, 64 and 32
threads, the row split over blockIdx.y into as many chunks as that takes
("c256" ... "c32"), and with the plan's block; rows, lean, flat, span and seg
forced (lean past its output limit), seg also with blocks of 128 and 64
threads ("seg128", "seg64"); "tv", a kernel of torch's structure (one block
row per index, one 16-byte load per thread, written here and launched through
CuPy), and "tvcs", the same with evict-first stores; cupy.take and
torch.index_select.  Every result is checked against cupy.take.  Medians of 60
calls, each between two events behind a holding kernel (the sweep's timing),
microseconds.

seg, a kernel kind tried and not kept, runs only with seg-kernel.diff applied.
The result files:
  results-first.json   before seg, lean's limit lifted for the plan too
  results-seg.json     seg's first form (rows over blockIdx.x, split by
                       fast_divmod)
  results-seg-3d.json  the form in the diff
  results-lean.json    with lean-limit.diff applied and
                       CUGATHER_TUNING=benchmarks/probe-short/sm_90-lean.json,
                       one more case (416-byte rows)
"""
import dataclasses, json, os
import numpy as np
import cupy as cp
import cugather.plan.tuning as tuning
from cugather.bench.peers import time_cupy, time_torch
from cugather.plan.core import Operand, alignment, cdiv
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
CASES = [  # (shape, dtype, axis, indices, index dtype, note)
    ((139, 957, 2), "int64", 0, (137,), "int32", "4523 chunks 0.90x"),
    ((40000, 8528), "int8", 0, (243,), "int32", "4523 chunks 0.95x (table 157626 rows)"),
    ((7, 5, 509), "complex128", 0, (70,), "int64", "4523 chunks 0.95x"),
    ((5539, 13, 227, 1), "complex128", 0, (1, 53), "int32", "7177 chunks 0.89x"),
    ((6000, 2634, 4, 3), "float16", 0, (23,), "int64", "7177 chunks 0.92x (11698 rows)"),
    ((2835, 342), "int64", 0, (217,), "int32", "6389 chunks 0.90x"),
    ((15061, 268), "float32", 0, (2, 145), "int32", "6389 chunks 0.91x"),
    ((200000, 1696), "uint8", 0, (114,), "int32", "6389 chunks 0.92x (8171978 rows)"),
    ((8398, 2, 1, 2329), "float64", 0, (32,), "int64", "6389 chunks 0.91x"),
    ((446, 1238), "int64", 0, (139,), "int64", "6389 chunks 0.94x"),
    ((122, 12, 3, 4), "complex128", 0, (762,), "int32", "6389 chunks 0.96x"),
    ((602706 // 20, 1, 44, 57), "int32", 0, (194, 1), "int64", "7177 chunks 0.96x"),
    ((1, 25, 1004, 3), "float64", 1, (11, 11), "int32", "7177 chunks 0.96x"),
    ((40000, 467, 2), "complex128", 0, (5, 6), "int64", "6389 lean 0.96x (845994 rows)"),
    ((100000, 233), "complex128", 0, (27,), "int32", "4523 lean 0.95x (358270 rows)"),
    ((555, 873), "complex128", 0, (67, 1), "int64", "6389 lean 0.96x"),
    ((2219, 100), "complex128", 0, (53, 1), "int32", "4523 lean 0.94x"),
    ((481646, 66, 1), "float64", 0, (17,), "int64", "7177 lean 0.95x"),
    ((70, 43, 26, 6), "int32", 0, (208,), "int32", "4523 chunks 1.00x, 5.6 MB"),
    ((45, 2069, 4), "int32", 0, (789,), "int64", "6389 chunks 0.99x, 26 MB"),
    ((2277, 41, 4, 104), "uint8", 1, (34,), "int64", "3907: 416 B rows, 32 MB"),
]
FORCED = ("rows", "lean", "flat", "span", "seg")

TV_SRC = r"""
template <class I>
__device__ void tv(char* out, const char* inp, const I* idx, long long slice, long long stride)
{
    long long ind = idx[blockIdx.x];
    for (int off = (blockDim.x * blockIdx.y + threadIdx.x) * 16; off < slice;
         off += blockDim.x * gridDim.y * 16)
        *(uint4*)(out + (long long)blockIdx.x * slice + off) =
            __ldg((const uint4*)(inp + ind * stride + off));
}
template <class I>
__device__ void tvcs(char* out, const char* inp, const I* idx, long long slice, long long stride)
{
    long long ind = idx[blockIdx.x];
    for (int off = (blockDim.x * blockIdx.y + threadIdx.x) * 16; off < slice;
         off += blockDim.x * gridDim.y * 16)
        __stcs((uint4*)(out + (long long)blockIdx.x * slice + off),
               __ldg((const uint4*)(inp + ind * stride + off)));
}
extern "C" __global__ void tvcs32(char* o, const char* i, const int* x, long long s, long long t)
{ tvcs<int>(o, i, x, s, t); }
extern "C" __global__ void tvcs64(char* o, const char* i, const long long* x, long long s, long long t)
{ tvcs<long long>(o, i, x, s, t); }
extern "C" __global__ void tv32(char* o, const char* i, const int* x, long long s, long long t)
{ tv<int>(o, i, x, s, t); }
extern "C" __global__ void tv64(char* o, const char* i, const long long* x, long long s, long long t)
{ tv<long long>(o, i, x, s, t); }
"""


def us(t):
    return float(np.median(t)) * 1000


def with_launch(plan, grid, block):
    return dataclasses.replace(plan, main=dataclasses.replace(plan.main, grid=tuple(grid),
                                                              block=tuple(block)))


def main():
    import torch
    mod = cp.RawModule(code=TV_SRC)
    rt = cp.cuda.runtime
    res = []
    for shape, dtype, axis, ishape, idt, note in CASES:
        rng = cp.random.default_rng(1)
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        data = rng.integers(0, 1 << 30, size=(n + 3) // 4, dtype=np.int32).view(np.uint8)[:n]
        data = data.view(dtype).reshape(shape)
        idx = rng.integers(0, shape[axis], size=ishape, dtype=np.int64).astype(idt)
        ref = cp.take(data, idx, axis=axis)
        row = {"shape": shape, "dtype": dtype, "axis": axis, "indices": ishape,
               "index_dtype": idt, "note": note, "out_bytes": int(ref.nbytes),
               "row_bytes": int(np.prod(shape[axis + 1:])) * data.itemsize,
               "us": {}, "launch": {}}
        u = row["us"]
        src, dst = cp.empty(ref.nbytes, cp.uint8), cp.empty(ref.nbytes, cp.uint8)
        u["copy"] = us(time_cupy(cp, lambda: rt.memcpyAsync(
            dst.data.ptr, src.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr), 60))
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        plans = {}
        lean_max = tuning.LEAN_MAX_OUT
        for kind in (None, "chunks") + FORCED:
            tuning.LEAN_MAX_OUT = lean_max if kind is None else 1 << 40  # lean past its limit
            try:
                plans[kind or "plan"] = plan_gather(operand, idx.shape, idt, axis, "wrap",
                                                    limits=CUDA.limits(0), kind=kind)
            except ValueError:
                pass
        row["plan"] = plans["plan"].key.entry
        c = plans.get("chunks")
        if c is not None:
            rows, units = c.main.fields["rows"], c.main.fields["units"]
            for tx in (256, 128, 64, 32):
                plans[f"c{tx}"] = with_launch(c, (rows, cdiv(units, tx * tuning.CHUNKS_CU), 1),
                                              (tx, 1, 1))
        g = plans.get("seg")
        if g is not None and g.main.block[0] > 64:
            rows, units = g.main.fields["rows"], g.main.fields["units"]
            for tx in (128, 64):
                if tx < g.main.block[0]:
                    plans[f"seg{tx}"] = with_launch(g, (rows, cdiv(units, tx), 1), (tx, 1, 1))
        for label, plan in plans.items():
            bound = bind(plan, 0, None, CUDA, data.dtype)
            fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
            assert bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()), (label, shape)
            row["launch"][label] = [plan.key.entry, plan.main.grid, plan.main.block]
            u[label] = us(time_cupy(cp, fn, 60))
        rb = row["row_bytes"]
        if axis == 0 and rb % 16 == 0 and data.data.ptr % 16 == 0:
            out = cp.empty(ref.shape, ref.dtype)
            grid = (int(idx.size), min(cdiv(rb, 256 * 16), 65535), 1)
            block = (min(256, cdiv(cdiv(rb, 16), 32) * 32), 1, 1)
            for name in ("tv", "tvcs"):
                k = mod.get_function(name + ("32" if idt == "int32" else "64"))
                f = lambda: k(grid, block, (out, data, idx, np.int64(rb), np.int64(rb)))  # noqa: E731
                out[...] = 0
                f()
                assert bool((out.view(cp.uint8) == ref.view(cp.uint8)).all()), (name, shape)
                row["launch"][name] = [name, grid, block]
                u[name] = us(time_cupy(cp, f, 60))
        u["cupy.take"] = us(time_cupy(cp, lambda: cp.take(data, idx, axis=axis), 60))
        td, ti = torch.from_dlpack(data), torch.from_dlpack(idx.reshape(-1))
        u["torch"] = us(time_torch(torch, lambda: torch.index_select(td, axis, ti), 60))
        best = min(u[k] for k in ("cupy.take", "torch") if k in u)
        print(shape, dtype, ishape, idt, note, {k: round(v, 2) for k, v in u.items()},
              "| plan %.3fx best peer" % (best / u["plan"]), flush=True)
        res.append(row)
        del data, idx, ref, src, dst, td, ti
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-short.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
