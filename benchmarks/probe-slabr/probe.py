"""slabr, rows under 16 bytes from a staged table woven a warp's tile at a time,
against weave, flat, slabf, pack and the peers (BENCHMARKS.md, "slabr: short
rows from a staged table"), on a GPU:

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/probe-slabr/probe.py
    # writes $OUT/probe-slabr.json (default /tmp)

The cases are the short-row shapes of benchmarks/probe-weave (held-out sweeps'
losses to a peer, tables in L1, in L2 and beyond it, the tiny tables) that
slabr applies to.  For each: the device copy of the output bytes; the
library's plan; weave, flat, slabf and pack forced where they apply; slabr
under each VARIANTS setting (rows per lane, blocks per SM: its launch bound
and the grid's target); cupy.take, torch.index_select and jax.numpy.take.
Every result is checked bit for bit against cupy.take.  Medians of 30 calls
between two events behind a holding kernel, microseconds.  PROBE_VARIANTS=a,b
times a subset, PROBE_KINDS=a,b the kinds forced beside slabr (default
weave,flat,slabf,pack), PROBE_BUDGET_S stops after that many seconds.
"""
import importlib.util
import json
import os
import time

import numpy as np
import cupy as cp
import cugather.plan.tuning as tuning
from cugather.bench.peers import time_cupy, time_jax, time_torch
from cugather.compile import render
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.launch import CUDA

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "200"))
# (SLABR_RU, SLABR_BLOCKS).  results-h100.json also has r4b4p and r2b4p: each of
# a row's unit stores under a predicate, as in first-h100.json's version (a
# switch, CG_SLABR_BREAK 0, gone since).
VARIANTS = {"r4b4": (4, 4), "r2b4": (2, 4), "r8b3": (8, 3), "r2b6": (2, 6)}
if os.environ.get("PROBE_VARIANTS"):
    VARIANTS = {k: VARIANTS[k] for k in os.environ["PROBE_VARIANTS"].split(",")}
KINDS = tuple(os.environ.get("PROBE_KINDS", "weave,flat,slabf,pack").split(","))

_spec = importlib.util.spec_from_file_location(
    "probe_weave", os.path.join(os.path.dirname(__file__), "..", "probe-weave", "probe.py"))
_weave = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_weave)
CASES = _weave.HELD_CASES + _weave.MINIMA_CASES + _weave.CASES + _weave.EDGE_CASES[:4]
us, timed = _weave.us, _weave.timed  # a median in microseconds; one kernel checked and timed


def set_slabr(ru, blocks):
    tuning.SLABR_RU, tuning.SLABR_BLOCKS = ru, blocks
    tuning.KERNEL_DEFINES["CG_SLABR_RU"] = ru
    # The launch bound is no define: one that names it keeps each setting's
    # build apart in the compile caches (keyed by the sources' digest).
    tuning.KERNEL_DEFINES["CG_PROBE_SLABR_BLOCKS"] = blocks
    render.sources_digest.cache_clear()
    render.render.cache_clear()


def main():
    try:
        import torch
    except ImportError:
        torch = None
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jnp = None
    res, t0 = [], time.perf_counter()
    rt = cp.cuda.runtime
    limits = CUDA.limits(0)
    shipped = (tuning.SLABR_RU, tuning.SLABR_BLOCKS)
    for shape, dtype, axis, ishape, idt, note, *offset in CASES:
        if time.perf_counter() - t0 > BUDGET_S:
            break
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        try:
            plan_gather(Operand.contiguous(shape, np.dtype(dtype).itemsize), ishape, idt, axis,
                        "wrap", limits=limits, kind="slabr")
        except ValueError:
            continue  # not slabr's
        rng = cp.random.default_rng(1)
        skip = offset[0] if offset else 0
        data = rng.integers(0, 256, size=n + skip, dtype=np.uint8)
        data = (data & 1 if dtype == "bool" else data)[skip:].view(dtype).reshape(shape)
        idx = rng.integers(0, shape[axis], size=ishape, dtype=np.int64).astype(idt)
        ref = cp.take(data, idx, axis=axis)
        row = {"shape": shape, "dtype": dtype, "axis": axis, "offset": skip, "indices": ishape,
               "index_dtype": idt, "note": note, "out_bytes": int(ref.nbytes),
               "index_bytes": int(idx.nbytes), "table_bytes": n, "us": {}, "kernel": {},
               "errors": {}}
        src, dst = cp.empty(ref.nbytes, cp.uint8), cp.empty(ref.nbytes, cp.uint8)
        row["us"]["copy"] = us(time_cupy(cp, lambda: rt.memcpyAsync(
            dst.data.ptr, src.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr), 30))
        del src, dst
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        plan = lambda kind: plan_gather(operand, idx.shape, idt, axis, "wrap",  # noqa: E731
                                        limits=limits, kind=kind)
        p = plan(None)
        row["plan"] = p.kind
        timed(row, "plan", p, data, idx, ref)
        for kind in KINDS:
            try:
                timed(row, kind, plan(kind), data, idx, ref)
            except ValueError:
                pass
        for label, setting in VARIANTS.items():
            set_slabr(*setting)
            try:
                timed(row, label, plan("slabr"), data, idx, ref)
            except ValueError:
                pass
            finally:
                set_slabr(*shipped)
        row["us"]["cupy.take"] = us(time_cupy(cp, lambda: cp.take(data, idx, axis=axis), 30))
        if torch is not None:
            td, ti = torch.from_dlpack(data), torch.from_dlpack(idx.reshape(-1))
            row["us"]["torch"] = us(time_torch(torch, lambda: torch.index_select(td, axis, ti),
                                               30))
        if jnp is not None:
            jd, ji = jnp.asarray(data.get()), jnp.asarray(idx.get())
            jf = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="clip"))
            row["us"]["jax"] = us(time_jax(lambda: jf(jd, ji), 30))
            del jd, ji
        u = row["us"]
        peer = min(u[k] for k in ("cupy.take", "torch", "jax") if k in u)
        print(shape, dtype, axis, ishape, idt, note, "| copy %.1f us, best peer %.2f of copy |"
              % (u["copy"], u["copy"] / peer),
              " ".join(f"{k} {u['copy'] / v:.2f}" for k, v in u.items()
                       if k not in ("copy", "cupy.take", "torch", "jax")),
              row["errors"] or "", flush=True)
        res.append(row)
        del data, idx, ref
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-slabr.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "variants": VARIANTS, "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
