"""slabr's two orders and its rows of one unit, against the planned kernel, the
other staging kernels and the peers (BENCHMARKS.md, "slabr: each index once
per group, rows of one unit"), on a GPU:

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/probe-slabr/orders.py
    # writes $OUT/probe-slabr-orders.json (default /tmp)

Order 0 steps a warp over tiles of the whole output, so each outer row of a
group loads every index again; order 1 loads a tile of index positions once
and writes it to every outer row of the group.  Cases: the held-out sweeps'
short-row losses that slabr applies to (benchmarks/probe-weave's sets), rows
of one 1-, 2- or 4-byte unit from the held-out sweeps where slab, slabw,
slabf, flat or inner ran below or near a peer (set "one": the first build,
orders-first-h100.json, staged such rows; slabr refuses them since, and the
script skips what slabr does not apply to), and a ladder of pick counts per
outer row (128 to 8192) that places tuning.SLABR_ORDER_PICKS.  For each:
the device copy of the output bytes; the library's plan; slabr in order 0 and
in order 1 (tuning.SLABR_ORDER_PICKS and SLABR_ORDER_INDEX_BYTES moved; order
1 needs groups of two outer rows or more); weave, flat, slabf, slab, slabw and inner forced where they
apply; cupy.take, torch.index_select and jax.numpy.take.  Every result is
checked bit for bit against cupy.take.  Medians of 30 calls between two
events behind a holding kernel, microseconds.  PROBE_BUDGET_S stops after
that many seconds; PROBE_SETS=held,one,ladder picks the sets.
"""
import importlib.util
import json
import os
import time

import numpy as np
import cupy as cp
import cugather.plan.tuning as tuning
from cugather.bench.peers import time_cupy, time_jax, time_torch
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.launch import CUDA

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "200"))
KINDS = ("weave", "flat", "slabf", "slab", "slabw", "inner")

_spec = importlib.util.spec_from_file_location(
    "probe_weave", os.path.join(os.path.dirname(__file__), "..", "probe-weave", "probe.py"))
_weave = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_weave)
us, timed = _weave.us, _weave.timed  # a median in microseconds; one kernel checked and timed

HELD = _weave.HELD_CASES + _weave.MINIMA_CASES + _weave.CASES
ONE = [  # rows of one unit, from the held-out sweeps (seed#shape, plan, ratio to the best peer)
    ((22, 4, 3975), "int16", 2, (3476574,), "int64", "7129#2 slabf 0.75x JAX (683 KB)"),
    ((257, 7), "float32", 1, (1974, 138), "int64", "5591#326 slabw 0.90x JAX"),
    ((1, 43, 17, 2), "int32", 3, (182672,), "int32", "7129#54 slabw 0.92x JAX"),
    ((9, 19, 2), "int32", 2, (2, 79390), "int32", "4817#429 slabw 0.94x JAX"),
    ((118, 202, 21), "int16", 2, (934, 19), "int64", "8017#25 slabw 0.94x JAX"),
    ((8, 34, 4, 3), "int32", 3, (53275,), "int64", "5591#439 slabw 0.98x JAX"),
    ((31, 1, 993, 101), "int32", 3, (2784,), "int64", "5813#499 slabw 0.98x JAX"),
    ((9039, 7), "float16", 1, (22796,), "int64", "6271#62 slabw 0.98x JAX"),
    ((1522, 4, 1, 572), "int32", 3, (2, 2958), "int32", "6733#258 slabw 0.98x JAX"),
    ((7, 3, 1, 1060), "int32", 3, (3, 697174), "int64", "5591#48 slabw 0.99x JAX"),
    ((94, 257, 4), "int16", 2, (974,), "int32", "5591#18 slab 1.03x JAX"),
    ((1, 3, 181, 2295), "uint8", 3, (1867476,), "int64", "6271#175 slabw 1.10x JAX"),
    ((4, 1, 9075), "int16", 2, (1363359,), "int64", "6271#474 inner 1.12x torch"),
    ((4, 1237, 1, 615), "int8", 3, (74448,), "int64", "5591#403 slabw 1.17x JAX"),
    ((19, 1, 4344), "float32", 2, (3678901,), "int32", "3863#20 flat 1.19x torch"),
    ((35286, 4), "float16", 1, (4878, 3), "int64", "7129#287 slabw 1.15x JAX"),
]
LADDER = [((2000, 100, 3), "uint8", 1, (p,), "int32", f"ladder 3 B rows, {p} picks")
          for p in (128, 256, 512, 1024, 2048, 8192)] + \
         [((2000, 200), "int16", 1, (p,), "int32", f"ladder 2 B rows of one unit, {p} picks")
          for p in (128, 256, 512, 1024, 2048, 8192)] + \
         [((600, 300, 7), "uint8", 1, (p,), "int64", f"ladder 7 B rows, {p} picks")
          for p in (256, 1024, 4096)]
SETS = {"held": HELD, "one": ONE, "ladder": LADDER}
CASES = [c for s in os.environ.get("PROBE_SETS", "held,one,ladder").split(",") for c in SETS[s]]


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
    shipped = tuning.SLABR_ORDER_PICKS, tuning.SLABR_ORDER_INDEX_BYTES
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
        row["chosen_by"] = p.chosen_by
        timed(row, "plan", p, data, idx, ref)
        for label, picks, index_bytes in (("o0", 1 << 62, 1 << 62), ("o1", 1, 0)):
            tuning.SLABR_ORDER_PICKS, tuning.SLABR_ORDER_INDEX_BYTES = picks, index_bytes
            try:
                q = plan("slabr")
                row.setdefault("group", q.fields["group"])
                if label == "o0" or q.fields["stage_unit"] == 1:
                    timed(row, label, q, data, idx, ref)
            finally:
                tuning.SLABR_ORDER_PICKS, tuning.SLABR_ORDER_INDEX_BYTES = shipped
        row["slabr_planned_order"] = plan("slabr").fields["stage_unit"]
        for kind in KINDS:
            try:
                timed(row, kind, plan(kind), data, idx, ref)
            except ValueError:
                pass
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
        print(shape, dtype, axis, ishape, idt, note, "| g", row.get("group"),
              "| copy %.1f us, best peer %.2f of copy |" % (u["copy"], u["copy"] / peer),
              " ".join(f"{k} {u['copy'] / v:.2f}" for k, v in u.items()
                       if k not in ("copy", "cupy.take", "torch", "jax")),
              row["errors"] or "", flush=True)
        res.append(row)
        del data, idx, ref
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-slabr-orders.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
