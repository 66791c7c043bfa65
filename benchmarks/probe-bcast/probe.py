"""bcast against bcastw on an axis of length 1 (BCASTW_MAX_UNIT), on a GPU:

    python benchmarks/probe-bcast/probe.py     # writes $OUT/probe-bcast.json (default /tmp)

An axis of length 1 in wrap or clip mode repeats each outer slice's row once
per index and reads no index.  bcast moves units of up to 8 bytes, one load
per unit (8-byte chunks of 1-byte units); bcastw writes 16-byte chunks, each
part of a chunk two aligned 16-byte loads shifted into place.  The cases: the
held-out sweeps' bcast shapes of rows of 16 bytes or more under 0.9 of the
copy, then a grid of unit widths (1, 2, 4, 8 bytes: a uint8 table whose row
length is an odd multiple of the unit), row lengths and output sizes.  For
each: the device copy of the output bytes, bcast and bcastw forced, window
(which reads the indices), the shipped plan; every output checked bit for bit
against cupy.take.  Medians of 30 calls between two events behind a holding
kernel (the sweep's timing), microseconds.
"""
import json, os, time
import numpy as np
import cupy as cp
from cugather.bench.peers import time_cupy
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "120"))
KINDS = ("bcast", "bcastw", "window", None)
SWEPT = [  # (shape, dtype, axis, indices, where it came from)
    ((1, 24673), "int8", 0, (8680,), "7129#299 bcast u1 0.774 of copy"),
    ((15721, 1, 2037), "uint8", 1, (8,), "4909#321 bcast u1 0.762"),
    ((1, 1101), "uint8", 0, (67129,), "6271#307 bcast u1 0.813"),
    ((1, 155), "int8", 0, (566706,), "5591#402 bcast u1 0.818"),
    ((16445, 1, 953), "bool", 1, (4,), "7057#139 bcast u1 0.825"),
    ((4, 1, 4619), "uint8", 1, (1260,), "5591#299 bcast u1 0.827"),
    ((12, 1, 5089), "bool", 1, (4, 1), "3863#326 bcast u1 0.867 (238 KB out)"),
    ((14, 1, 291), "float16", 1, (7,), "7057#0 bcast u2 0.883 (55 KB out)"),
    ((17, 1, 7), "float16", 1, (364,), "7057#28 bcast u2 0.890 (14 B rows)"),
    ((1, 5013), "uint8", 0, (77,), "8017#339 bcast u1 0.892 (376 KB out)"),
]


def grid_cases():
    for unit in (1, 2, 4, 8):
        for row in (24, 104, 1016, 5000, 25000):
            r = row // unit | 1  # an odd number of units: the unit is the row's widest
            rb = r * unit
            for out in (256 << 10, 64 << 20, 256 << 20):
                n_outer = 1 if rb * 64 <= out else 4
                n = max(1, out // (rb * n_outer))
                yield ((n_outer, 1, rb), "uint8", 1, (n,), f"grid u{unit} {rb} B rows, "
                                                            f"{out >> 10} KB out")


def us(t):
    return float(np.median(t)) * 1000


def main():
    res, t0 = [], time.perf_counter()
    limits = CUDA.limits(0)
    rt = cp.cuda.runtime
    for shape, dtype, axis, ishape, note in SWEPT + list(grid_cases()):
        if time.perf_counter() - t0 > BUDGET_S:
            break
        dt = np.dtype(dtype)
        raw = np.random.default_rng(5).integers(0, 256, int(np.prod(shape)) * dt.itemsize,
                                                dtype=np.uint8)
        if dt.kind == "b":
            raw &= 1
        data = cp.asarray(raw).view(dt).reshape(shape)
        idx = cp.asarray(np.random.default_rng(6).integers(-9, 9, size=ishape))
        ref = cp.take(data, cp.zeros_like(idx), axis=axis)  # every index wraps to 0
        nb = ref.nbytes
        rec = {"shape": shape, "dtype": dtype, "axis": axis, "indices": ishape, "note": note,
               "row_bytes": int(np.prod(shape[axis + 1:])) * data.itemsize, "out_bytes": nb,
               "us": {}, "launch": {}, "errors": {}}
        src, dst = cp.empty(nb, cp.uint8), cp.empty(nb, cp.uint8)
        rec["us"]["copy"] = us(time_cupy(cp, lambda: rt.memcpyAsync(
            dst.data.ptr, src.data.ptr, nb, rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr), 30))
        del src, dst
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        for kind in KINDS:
            label = kind or "shipped"
            try:
                plan = plan_gather(operand, idx.shape, "int64", axis, "wrap", limits=limits,
                                   kind=kind)
            except ValueError:
                continue
            bound = bind(plan, 0, None, CUDA, data.dtype)
            fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
            if not bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()):
                rec["errors"][label] = "differs from cupy.take"
                continue
            rec["launch"][label] = [plan.key.entry, list(plan.main.grid), list(plan.main.block)]
            rec["us"][label] = us(time_cupy(cp, fn, 30))
        c = rec["us"]["copy"]
        print(f"{note:42s} {nb >> 10:8d} KB copy {c:8.2f} us |",
              " ".join(f"{k} {c / v:.3f}" for k, v in rec["us"].items() if k != "copy"),
              rec["errors"] or "", flush=True)
        res.append(rec)
        del data, idx, ref
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-bcast.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
