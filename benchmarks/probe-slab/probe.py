"""The slab kernel's index loads in flight and slabw's word stores (BENCHMARKS.md,
"Long odd rows through shared memory; slab's index loads in flight" and "slabw:
slab's picks stored a word at a time"), on a GPU:

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/probe-slab/probe.py
    # writes $OUT/probe-slab[-ilpN][-wordA-B-C].json (default /tmp)

PROBE_SLAB_ILP=N builds slab with N index loads per thread in flight instead of
cugather/plan/tuning.py's SLAB_ILP (1 is the kernel before); PROBE_SLAB_WORD=A,B,C
has slabw store 1-, 2- and 4-byte units A, B and C bytes at a time (4 or 8, each
wider than its unit) instead of SLAB_WORD.  The cases are the held-out sweeps'
slab and inner shapes, the worst first.  For each: the device copy of the output
bytes, slab and slabw forced, the library's plan, flat, lean and inner forced
where they apply, cupy.take, torch.index_select and jax.numpy.take; every result
checked against cupy.take.  Medians of 30 calls, microseconds.
"""
import json, os
import numpy as np
from cugather.plan import tuning

VARIANT = ""
if os.environ.get("PROBE_SLAB_ILP"):
    tuning.SLAB_ILP = tuning.KERNEL_DEFINES["CG_SLAB_ILP"] = int(os.environ["PROBE_SLAB_ILP"])
    VARIANT = f"-ilp{tuning.SLAB_ILP}"
if os.environ.get("PROBE_SLAB_WORD"):
    words = [int(w) for w in os.environ["PROBE_SLAB_WORD"].split(",")]
    tuning.SLAB_WORD = dict(zip((1, 2, 4), words))
    for unit, word in tuning.SLAB_WORD.items():
        tuning.KERNEL_DEFINES[f"CG_SLAB_WORD_U{unit}"] = word
    VARIANT += "-word" + "-".join(map(str, words))
import cupy as cp
from cugather.bench.peers import time_cupy, time_jax, time_torch
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
CASES = [  # (shape, dtype, axis, indices, index dtype): seeds 3907, 2971, 7919
    ((1, 3, 1, 2275), "bool", 3, (4115838, 2), "int32"),
    ((3, 310, 24), "int16", 2, (183166,), "int32"),
    ((217, 297), "int8", 1, (1409852, 1), "int32"),
    ((55, 5019), "int8", 1, (3496152,), "int64"),
    ((17, 1, 4, 652), "float16", 3, (5568374,), "int64"),
    ((1, 2668, 1, 4), "uint8", 3, (160932,), "int64"),
    ((10, 23), "int8", 1, (9549709,), "int64"),
    ((17, 2, 1, 14), "float16", 3, (6389461,), "int32"),
    ((18722, 2185), "bool", 1, (54, 81), "int32"),
    ((9, 163), "float32", 1, (5747158,), "int64"),
    # seeds 5303, 6793 and 8311
    ((3568, 1421), "uint8", 1, (233780,), "int32"),
    ((9299, 1831), "int8", 1, (305,), "int32"),
    ((94, 136, 39), "int32", 2, (4374,), "int64"),
    ((1, 6, 2, 4), "float16", 3, (2908970,), "int32"),
    ((339, 12, 7066), "int8", 2, (70483,), "int32"),
    ((1, 271, 50), "int16", 2, (1763615,), "int32"),
]


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
               "us": {}, "kernel": {}}
        src, dst = cp.empty(ref.nbytes, cp.uint8), cp.empty(ref.nbytes, cp.uint8)
        row["us"]["copy"] = us(time_cupy(cp, lambda: rt.memcpyAsync(
            dst.data.ptr, src.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr), 30))
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        for label, kind in (("slab", "slab"), ("slabw", "slabw"), ("plan", None), ("flat", "flat"),
                            ("lean", "lean"), ("inner", "inner")):
            try:
                plan = plan_gather(operand, idx.shape, idt, axis, "wrap",
                                   limits=CUDA.limits(0), kind=kind)
            except ValueError:
                continue
            bound = bind(plan, 0, None, CUDA, data.dtype)
            fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
            assert bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()), (label, shape)
            row["kernel"][label] = plan.key.entry
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
        moved = 2 * ref.nbytes + idx.nbytes
        print(shape, dtype, axis, ishape, idt, {k: round(v, 1) for k, v in row["us"].items()},
              "slab %.0f%% of copy" % (100 * row["us"]["copy"] * (moved / (2 * ref.nbytes))
                                       / row["us"]["slab"]) if "slab" in row["us"] else "",
              flush=True)
        res.append(row)
        del data, idx, ref, src, dst
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, f"probe-slab{VARIANT}.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
