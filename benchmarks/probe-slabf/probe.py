"""slabf, flat's chunks over staged groups of outer rows (BENCHMARKS.md, "slabf:
flat's chunks read from shared memory"), on a GPU:

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/probe-slabf/probe.py
    # writes $OUT/probe-slabf.json (default /tmp)

The cases are the held-out sweeps' losers whose axis rows fit in
cugather/plan/tuning.py's SLAB_MAX_STAGE (flat, pack and slab shapes, the
worst first), then shapes of rows of 2 to 8 units of 2-, 4- and 8-byte items.
For each: the device copy of the output bytes, the library's plan, slabf, flat,
pack, slab and slabw forced where they apply, cupy.take, torch.index_select and
jax.numpy.take; every result checked against cupy.take.  Medians of 30 calls,
microseconds.
"""
import json, os
import numpy as np
import cupy as cp
from cugather.bench.peers import time_cupy, time_jax, time_torch
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
CASES = [  # (shape, dtype, axis, indices, index dtype)
    ((15, 70, 575, 3), "int8", 2, (210366,), "int32"),    # seed 9241, flat 0.65x
    ((683, 3, 1, 7), "int8", 1, (25724,), "int32"),       # seed 9241, flat 0.66x
    ((11, 15, 73, 5), "int8", 2, (64100,), "int64"),      # seed 8311, flat 0.86x
    ((262, 2, 5), "uint8", 1, (480372,), "int32"),        # seed 6007, flat 0.59x
    ((9660, 16, 5), "uint8", 1, (15164,), "int64"),       # seed 6211, flat 0.71x
    ((862, 16, 5), "int16", 1, (87106,), "int32"),        # seed 9001, flat 0.73x
    ((83, 6, 7), "float32", 1, (123480,), "int32"),       # seed 9001, flat 0.65x
    ((6329, 119, 7), "int32", 1, (2604,), "int32"),       # seed 6211, flat 0.71x
    ((585, 7, 3), "uint8", 1, (1861,), "int32"),          # seed 1618, pack 0.63x
    ((79, 1, 7), "int32", 2, (3075744,), "int32"),        # seed 1414, flat 0.62x
    ((19, 7, 54), "float32", 2, (1734204,), "int32"),     # seed 1732, flat 0.62x
    ((7, 1, 5, 5319), "int8", 3, (41446,), "int64"),      # seed 3571, slab 0.63x
    ((9299, 1831), "int8", 1, (305,), "int32"),           # seed 6793, slab 0.62x
    ((94, 136, 39), "int32", 2, (4374,), "int64"),        # seed 8311, slab 0.80x
    ((96, 2899), "float32", 1, (89842,), "int64"),        # seed 9241, slab -> flat
    ((1171, 4918), "int32", 1, (12931,), "int64"),        # seed 9241, slab -> flat
    ((64, 300, 3), "float16", 1, (400000,), "int32"),
    ((40, 500, 6), "int16", 1, (300000,), "int64"),
    ((64, 200, 3), "float32", 1, (500000,), "int32"),
    ((30, 100, 3), "float64", 1, (300000,), "int32"),
]
KINDS = (("plan", None), ("slabf", "slabf"), ("flat", "flat"), ("pack", "pack"),
         ("slab", "slab"), ("slabw", "slabw"))


def us(t):
    return float(np.median(t)) * 1000


def main():
    try:
        import torch
    except ImportError:
        torch = None
    try:
        import jax.numpy as jnp
        import jax
    except ImportError:
        jnp = None
    res = []
    rt = cp.cuda.runtime
    for shape, dtype, axis, ishape, idt in CASES:
        rng = cp.random.default_rng(1)
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        data = rng.random(size=(n + 3) // 4, dtype=np.float32).view(np.uint8)[:n]
        data = (data & 1 if dtype == "bool" else data).view(dtype).reshape(shape)
        idx = rng.integers(0, shape[axis], size=ishape, dtype=np.int64).astype(idt)
        ref = cp.take(data, idx, axis=axis)
        row = {"shape": shape, "dtype": dtype, "axis": axis, "indices": ishape,
               "index_dtype": idt, "out_bytes": int(ref.nbytes), "index_bytes": int(idx.nbytes),
               "us": {}, "kernel": {}, "reason": {}}
        src, dst = cp.empty(ref.nbytes, cp.uint8), cp.empty(ref.nbytes, cp.uint8)
        row["us"]["copy"] = us(time_cupy(cp, lambda: rt.memcpyAsync(
            dst.data.ptr, src.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr), 30))
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        for label, kind in KINDS:
            try:
                plan = plan_gather(operand, idx.shape, idt, axis, "wrap",
                                   limits=CUDA.limits(0), kind=kind)
            except ValueError:
                continue
            bound = bind(plan, 0, None, CUDA, data.dtype)
            fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
            assert bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()), (label, shape)
            row["kernel"][label] = plan.key.entry
            row["reason"][label] = plan.reason
            row["us"][label] = us(time_cupy(cp, fn, 30))
        row["us"]["cupy.take"] = us(time_cupy(cp, lambda: cp.take(data, idx, axis=axis), 30))
        if torch is not None:
            td, ti = torch.from_dlpack(data), torch.from_dlpack(idx.reshape(-1))
            f = lambda: torch.index_select(td, axis, ti)  # noqa: E731
            row["us"]["torch"] = us(time_torch(torch, f, 30))
        if jnp is not None:
            jd, ji = jnp.asarray(data.get()), jnp.asarray(idx.get())
            jf = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="clip"))
            row["us"]["jax"] = us(time_jax(lambda: jf(jd, ji), 30))
        u = row["us"]
        peer = min(u[k] for k in ("cupy.take", "torch", "jax") if k in u)
        print(shape, dtype, axis, ishape, idt, {k: round(v, 1) for k, v in u.items()},
              "| slabf %.2fx best peer, %.2fx flat, %.0f%% of copy" % (
                  peer / u["slabf"], u.get("flat", float("nan")) / u["slabf"],
                  100 * u["copy"] / u["slabf"]) if "slabf" in u else "", flush=True)
        res.append(row)
        del data, idx, ref, src, dst
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-slabf.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
