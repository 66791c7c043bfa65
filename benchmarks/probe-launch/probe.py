"""Grid and block variants of the library's own kernels, on a GPU (BENCHMARKS.md,
"Ranked leaves, spread short calls, even chunks"):

    python benchmarks/probe-launch/probe.py        # writes $OUT/probe3.json (default /tmp)

A: long rows through the chunks kernel: blocks sized so that a row's chunks
   are even ("bal256", "bal192", "bal128": chunks of at most that many threads'
   worth) against the plan's ("planned").
B: short calls: the plan's grid ("as") against blocks of 128, 64 and 32
   threads and proportionally more of them, each one call between events on a
   held stream (_1) and 50 back to back (_50), beside cupy.take and torch.

Every variant is checked bit for bit against cupy.take (A: where the table is
filled).  results-2026-12-02.json was measured before the planner took up the
even chunks and the spread blocks: "planned" and "as" there are the plans of
that time (full 256-thread chunks, 256-thread blocks); run now, they are the
new plans.
"""
import dataclasses, json, os, sys, time
import numpy as np
import cupy as cp
import cugather
from cugather.plan.core import Operand, alignment, cdiv
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute
from cugather.bench.peers import time_cupy, time_torch

R = {}
OUT = os.environ.get("OUT", "/tmp")
def us(t): return float(np.median(t)) * 1000
def tc(fn, rep=30): return us(time_cupy(cp, fn, rep))
def b50(f):
    def g():
        for _ in range(50): f()
    return g

def planned(data, idx, axis, kind=None, ru=None):
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    return plan_gather(operand, idx.shape, str(idx.dtype), axis, "wrap", limits=CUDA.limits(0),
                       kind=kind, row_unroll=ru)

def runner(plan, data, idx):
    bound = bind(plan, 0, None, CUDA, data.dtype)
    ptr = data.data.ptr
    return lambda: execute(bound, data, ptr, idx, None, None, 0)

def with_launch(plan, grid, block):
    return dataclasses.replace(plan, main=dataclasses.replace(plan.main, grid=tuple(grid), block=tuple(block)))

def same(a, b): return a.shape == b.shape and bool((a.view(cp.uint8) == b.view(cp.uint8)).all())

def make(shape, dtype, axis, n, idt, seed=1, fill=True):
    rng = cp.random.default_rng(seed)
    if fill:
        data = rng.integers(0, 1 << 30, size=int(np.prod(shape)) * np.dtype(dtype).itemsize // 4,
                            dtype=np.int32).view(dtype).reshape(shape)
    else:
        data = cp.empty(shape, dtype)
    idx = rng.integers(0, shape[axis], size=n, dtype=np.int64).astype(idt)
    return data, idx

def copy_us(nbytes):
    a = cp.empty(nbytes, cp.uint8); b = cp.empty(nbytes, cp.uint8)
    rt = cp.cuda.runtime
    t = tc(lambda: rt.memcpyAsync(b.data.ptr, a.data.ptr, nbytes, rt.memcpyDeviceToDevice,
                                  cp.cuda.get_current_stream().ptr))
    del a, b
    return t

# ------------------------------------------------------------------ A: chunks
A = {}
for name, shape, dtype, axis, n, idt, check in (
        ("rb24856_u8", (53600, 3107), np.float64, 0, 20713, np.int64, True),
        ("rb24048_u16", (8707, 74, 1503), np.complex128, 1, 3, np.int64, False),
        ("rb4184_u8", (270000, 523), np.float64, 0, 165103, np.int32, True),
        ("rb12440_u8", (100000, 1555), np.float64, 0, 30000, np.int32, True),
        ("rb6992_u16", (74500, 437), np.complex128, 0, 21281, np.int64, True),
        ("kv32k_u16", (8192, 16, 8, 128), np.float16, 0, 4096, np.int32, True),
        ("rb40960_u16", (30000, 2560), np.complex128, 0, 8000, np.int64, True),
        ("rb5736_u8", (164000, 717), np.float64, 0, 36557, np.int32, True)):
    data, idx = make(shape, dtype, axis, n, idt, fill=check)
    ref = cp.take(data, idx, axis=axis) if check else None
    p = planned(data, idx, axis, kind="chunks")
    res = {"planned_grid": p.main.grid, "planned_block": p.main.block,
           "copy": copy_us(p.out_size * data.itemsize if hasattr(p, "out_size") else
                           int(np.prod(p.out_shape)) * data.itemsize)}
    units = p.main.fields["units"]; rows = p.main.fields["rows"]
    variants = {"planned": p}
    for cu_cap in (256, 192, 128):
        chunks = cdiv(units, cu_cap * 4)
        tx = cdiv(cdiv(units, chunks * 4), 32) * 32
        ty = max(1, 256 // tx)
        variants[f"bal{cu_cap}"] = with_launch(p, (min(cdiv(rows, ty), 2**31 - 1), chunks, 1),
                                               (tx, ty, 1))
    for vn, vp in variants.items():
        fn = runner(vp, data, idx)
        out = fn()
        if check and not same(out, ref):
            res[vn] = "MISMATCH"; continue
        res[vn] = tc(fn)
        res[vn + "_launch"] = [vp.main.grid, vp.main.block]
    A[name] = res
    print("A", name, json.dumps(res), flush=True)
    del data, idx, ref
    cp.get_default_memory_pool().free_all_blocks()
R["A"] = A

# ------------------------------------------------------------------ B: short calls
import torch
B = {}
for name, shape, dtype, axis, n, idt, kinds in (
        ("scalar_u1_5760", (320, 890777 // 320 + 1), np.bool_, 1, 18, np.int64, [None]),
        ("scalar_u4_15234", (66390342,), np.float32, 0, 15234, np.int64, [None, "flat", "rows"]),
        ("scalar_u2_8444", (115088554,), np.int16, 0, 8444, np.int32, [None, "flat"]),
        ("rows_u4_6428", (5004,), np.int32, 0, 6428, np.int32, [None, "scalar", "flat"]),
        ("flat_u8_14996", (312279355,), np.float64, 0, 14996, np.int32, [None, "scalar", "rows"]),
        ("chunks_u16_1537", (358,), np.complex128, 0, 1537, np.int32, [None, "scalar", "rows"]),
        ("chunks_u16_rb320_82", (100247, 20), np.complex128, 0, 82, np.int64, [None, "rows"]),
        ("rows_u2_7914", (505304440,), np.int16, 0, 7914, np.int32, [None, "scalar", "flat"]),
        ("c128_rb3328_n44", (30000, 208), np.complex128, 0, 44, np.int64, [None])):
    data, idx = make(shape, dtype, axis, n, idt)
    ref = cp.take(data, idx, axis=axis)
    td = torch.from_dlpack(data); ti = torch.from_dlpack(idx)
    res = {"cupy_1": tc(lambda: cp.take(data, idx, axis=axis), 60),
           "torch_1": us(time_torch(torch, lambda: torch.index_select(td, axis, ti), 60)),
           "cupy_50": tc(b50(lambda: cp.take(data, idx, axis=axis)), 20) / 50,
           "torch_50": us(time_torch(torch, b50(lambda: torch.index_select(td, axis, ti)), 20)) / 50}
    for k in kinds:
        try:
            p = planned(data, idx, axis, kind=k)
        except ValueError as e:
            res[str(k)] = str(e)[:80]; continue
        g, b = p.main.grid, p.main.block
        threads = b[0] * b[1]
        variants = {"as": p}
        for bt in (128, 64, 32):
            if threads <= bt:
                continue
            f = threads // bt
            nb = (b[0], b[1] // f, 1) if b[1] >= f else (b[0] // f, b[1], 1)
            variants[f"b{bt}"] = with_launch(p, (g[0] * f, g[1], g[2]), nb)
        for vn, vp in variants.items():
            tag = f"{k or p.main.key.kind}_{vn}"
            fn = runner(vp, data, idx)
            if not same(fn(), ref):
                res[tag] = "MISMATCH"; continue
            res[tag + "_1"] = tc(fn, 60)
            res[tag + "_50"] = tc(b50(fn), 20) / 50
            res[tag + "_launch"] = [vp.main.grid, vp.main.block, vp.main.key.entry]
    B[name] = res
    print("B", name, json.dumps(res), flush=True)
    del data, idx, ref, td, ti
    cp.get_default_memory_pool().free_all_blocks()
R["B"] = B
json.dump(R, open(os.path.join(OUT, "probe3.json"), "w"), indent=1)
