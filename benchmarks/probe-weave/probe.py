"""weave, rows under 16 bytes woven in shared memory a warp's tile at a time,
against flat, pack, slabf and the peers (BENCHMARKS.md, "weave: short rows a
tile at a time"), on a GPU:

    XLA_PYTHON_CLIENT_PREALLOCATE=false python benchmarks/probe-weave/probe.py
    # writes $OUT/probe-weave.json (default /tmp)

The cases are held-out sweeps' shapes of rows of 2 to 15 bytes and two units or
more where cugather lost to a peer (jax.numpy.take mostly), from tables in L1,
in L2 and beyond it, then controls.  For each: the device copy of the output
bytes; the library's plan; flat, pack and slabf forced where they apply; weave
under each VARIANTS setting (rows per lane, __launch_bounds__ minimum blocks,
which rows a lane takes, how it reads the table's edge blocks);
cupy.take, torch.index_select and jax.numpy.take.  Every result is checked bit
for bit against cupy.take.  Medians of 30 calls between two events behind a
holding kernel, microseconds.  PROBE_VARIANTS=a,b,... times a subset,
PROBE_BUDGET_S stops after that many seconds, PROBE_SET=edges times tiny
tables instead (writes $OUT/probe-weave-edges.json), PROBE_SET=minima the
short-row losses of two held-out sweeps ($OUT/probe-weave-minima.json),
PROBE_SET=held those of two later ones ($OUT/probe-weave-held.json);
PROBE_KINDS=a,b,... the kinds forced beside weave (default flat,pack,slabf).
"""
import json, os, time
import numpy as np
import cupy as cp
import cugather.plan.tuning as tuning
from cugather.bench.peers import time_cupy, time_jax, time_torch
from cugather.compile import render
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "300"))
# (WEAVE_RU, WEAVE_BLOCKS, WEAVE_LANES, WEAVE_EDGES); suffix e: a warp reads the
# table's edge blocks once.  (Results before 2026-12-05 17:30 also name f
# variants: a row within one block left its second block unread, the default
# since.)
VARIANTS = {"r4b4": (4, 4, 0, 0), "r4b4i": (4, 4, 1, 0), "r2b5": (2, 5, 0, 0),
            "r8b2": (8, 2, 0, 0), "r8b2i": (8, 2, 1, 0), "r4b4e": (4, 4, 0, 1)}
if os.environ.get("PROBE_VARIANTS"):
    VARIANTS = {k: VARIANTS[k] for k in os.environ["PROBE_VARIANTS"].split(",")}
CASES = [  # (shape, dtype, axis, indices, index dtype, where it came from)
    ((13019, 7), "int8", 0, (2, 6719042), "int32", "6619 flat 0.78x (the minimum)"),
    ((683, 3, 1, 7), "int8", 1, (25724,), "int32", "9241 flat 0.66x"),
    ((15, 70, 575, 3), "int8", 2, (210366,), "int32", "9241 flat 0.65x"),
    ((262, 2, 5), "uint8", 1, (480372,), "int32", "6007 flat 0.59x"),
    ((9660, 16, 5), "uint8", 1, (15164,), "int64", "6211 flat 0.71x"),
    ((862, 16, 5), "int16", 1, (87106,), "int32", "9001 flat 0.73x"),
    ((850, 5), "float16", 0, (13668972,), "int32", "9001 flat 0.73x"),
    ((5, 7, 2, 1), "int8", 0, (5019396,), "int32", "2027 pack 0.48x"),
    ((20, 1, 5), "uint8", 1, (2083790,), "int32", "8837 flat 0.59x"),
    ((91, 7, 1, 1), "int8", 0, (6855404,), "int64", "5051 rows 0.69x"),
    ((1636, 79, 3), "int16", 1, (11120,), "int32", "2236 rows 0.54x"),
    ((1, 2, 3367, 5), "float16", 2, (2266501, 2), "int64", "4711 rows 0.75x"),
    ((64, 200, 3), "float32", 1, (500000,), "int32", "slabf probe"),
    ((18, 485, 117, 3), "float32", 2, (10084,), "int64", "7331 flat 0.76x (12.3 MB table)"),
    ((48864, 19, 1, 3), "float32", 1, (324,), "int32", "6619 slabf 0.81x (10.6 MB table)"),
    ((8001, 327, 5), "uint8", 1, (5872,), "int64", "1732 rows 0.62x (13 MB table)"),
    ((26, 139, 428, 5), "int16", 2, (3340,), "int32", "3141 rows 0.62x (15.5 MB table)"),
    ((303, 108823, 7, 1), "uint8", 1, (186604,), "int32", "2027 rows 0.71x (231 MB table)"),
    ((8885, 2698, 7, 1), "int16", 1, (2008,), "int32", "8837 pack 0.70x (336 MB table)"),
    ((4696, 65540, 6), "uint8", 1, (17390,), "int32", "7919 rows 0.71x (1.8 GB table)"),
    ((46705909, 15, 1, 1), "bool", 0, (20044, 187), "int32", "3141 rows 0.68x (700 MB table)"),
    ((1, 2791, 173347, 11), "int8", 2, (200, 38), "int64", "1732 rows 0.70x (5.3 GB table)"),
    ((585, 7, 3), "uint8", 1, (1861,), "int32", "1618 pack 0.63x (a 6 us call)"),
    ((5000, 3), "float32", 0, (100000,), "int64", "a 1.2 MB call of 12 B rows"),
]
# PROBE_SET=edges: tables of a few dozen bytes to a few KB, where most rows
# touch the block holding the table's first or last byte, from the plan-by-plan
# run's losses and wins, then a control;
# a 7th field offsets the table from its allocation by that many bytes.
EDGE_CASES = [
    ((11, 1, 7), "bool", 0, (7521520,), "int32", "2851#263 weave 0.775x slabf (77 B)"),
    ((11, 1, 7), "bool", 0, (7521520,), "int32", "2851#263 at byte offset 5", 5),
    ((12, 1, 7), "int8", 0, (7, 44057), "int64", "6619#228 weave 0.97x flat (84 B)"),
    ((7, 1, 7), "int8", 0, (2847318,), "int32", "5179#156 weave 0.985x slabf (49 B)"),
    ((5, 1, 1, 7), "bool", 0, (405079,), "int64", "4127#25 weave 1.05x flat (35 B)"),
    ((2, 2, 1, 7), "uint8", 1, (403985,), "int32", "6619#419 weave 1.20x flat (28 B)"),
    ((5, 1, 6, 7), "uint8", 2, (349473,), "int64", "5179#109 weave 1.35x slabf (210 B)"),
    ((8, 12, 7), "uint8", 1, (4400884,), "int32", "2851#89 weave 1.64x slabf (672 B)"),
    ((131, 7), "uint8", 0, (15022208,), "int64", "8893#16 weave 1.33x slabf (917 B)"),
    ((783, 1, 6, 1), "uint8", 0, (3, 1219258), "int32", "6947#71 weave 0.857x slabf (4.7 KB)"),
    ((2451, 1, 1, 3), "float16", 0, (2834749,), "int64", "6619#462 weave 0.93x flat (14.7 KB)"),
    ((13019, 7), "int8", 0, (2, 6719042), "int32", "6619#452 weave 1.80x flat (control)"),
]
# PROBE_SET=minima: the short-row losses of held-out sweeps 5813 and 6733 (H100,
# weave's second block at the fill value), where the table names another kernel.
MINIMA_CASES = [
    ((16, 268, 3), "int16", 1, (1215976,), "int64", "6733#368 flat 0.79x JAX (25 KB)"),
    ((4, 2, 3, 3), "uint8", 2, (15055139,), "int32", "5813#157 slabf 0.85x JAX (72 B)"),
    ((2, 1, 439, 3), "uint8", 2, (9328180,), "int64", "6733#342 slabf 0.92x JAX (2.6 KB)"),
    ((20, 3), "float16", 0, (1, 9395798), "int64", "6733#328 slabf 1.43x (120 B)"),
    ((47, 3), "float16", 0, (7663867,), "int64", "6733#403 slabf 1.50x (282 B)"),
    ((1, 9, 14835181, 3), "int16", 2, (6160275,), "int32", "5813#1 flat 1.03x (801 MB)"),
]
# PROBE_SET=held: the short-row minima of held-out sweeps 3863 and 6271 (H100,
# the table refitted with the thin leaves), and #442 with a ninth of its picks
# (6.4 MB of indices, which fit L2, against 57 MB: what re-reading them per outer
# row costs).
HELD_CASES = [
    ((4, 4, 337, 3), "int8", 2, (9, 1595651), "int32", "3863#442 weave 0.61x JAX (15.8 KB)"),
    ((4, 4, 337, 3), "int8", 2, (1, 1595651), "int32", "3863#442, a ninth of its picks"),
    ((54, 381, 362, 3), "uint8", 2, (898,), "int32", "6271#425 weave 0.74x JAX (21.3 MB)"),
    ((48, 5, 1), "int32", 0, (7682496,), "int64", "3863#294 slabf 0.84x JAX (960 B)"),
    ((4968, 445, 3, 1), "int16", 1, (2984,), "int64", "6271#353 slabf 0.88x JAX (12.7 MB)"),
    ((192, 306872, 1, 5), "int8", 1, (14011, 4), "int64", "3863#393 weave 0.93x JAX (281 MB)"),
]
SETS = {"": (CASES, "probe-weave.json"), "edges": (EDGE_CASES, "probe-weave-edges.json"),
        "minima": (MINIMA_CASES, "probe-weave-minima.json"),
        "held": (HELD_CASES, "probe-weave-held.json")}
CASES, RESULT = SETS[os.environ.get("PROBE_SET", "")]
KINDS = tuple(os.environ.get("PROBE_KINDS", "flat,pack,slabf").split(","))


def us(t):
    return float(np.median(t)) * 1000


def set_weave(ru, blocks, lanes, edges):
    tuning.WEAVE_RU, tuning.WEAVE_BLOCKS, tuning.WEAVE_LANES = ru, blocks, lanes
    tuning.WEAVE_EDGES = edges
    tuning.KERNEL_DEFINES["CG_WEAVE_RU"] = ru
    tuning.KERNEL_DEFINES["CG_WEAVE_LANES"] = lanes
    tuning.KERNEL_DEFINES["CG_WEAVE_EDGES"] = edges
    # The launch bound is no define: one that names it keeps each setting's
    # build apart in the compile caches (keyed by the sources' digest).
    tuning.KERNEL_DEFINES["CG_PROBE_WEAVE_BLOCKS"] = blocks
    render.sources_digest.cache_clear()
    render.render.cache_clear()


def timed(row, label, plan, data, idx, ref):
    bound = bind(plan, 0, None, CUDA, data.dtype)
    fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
    if not bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()):
        row["errors"][label] = "differs from cupy.take"
        return
    row["kernel"][label] = plan.key.entry
    row["us"][label] = us(time_cupy(cp, fn, 30))


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
    shipped = (tuning.WEAVE_RU, tuning.WEAVE_BLOCKS, tuning.WEAVE_LANES, tuning.WEAVE_EDGES)
    for shape, dtype, axis, ishape, idt, note, *offset in CASES:
        if time.perf_counter() - t0 > BUDGET_S:
            break
        rng = cp.random.default_rng(1)
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
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
            set_weave(*setting)
            try:
                timed(row, label, plan("weave"), data, idx, ref)
            except ValueError:
                pass
            finally:
                set_weave(*shipped)
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
    with open(os.path.join(OUT, RESULT), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "variants": VARIANTS, "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
