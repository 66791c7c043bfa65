"""Where long rows from DRAM lose to the device copy (BENCHMARKS.md, "Long rows
from DRAM"), on a GPU:

    python benchmarks/probe-long/probe.py     # writes $OUT/probe-long.json (default /tmp)

The cases are the held-out sweeps' (6577, 9973, 1231) geometries of rows of
4 KB or more and outputs of 1 MiB or more that ran under 95% of the copy,
then controls of the same sweeps that reached it.  For each: the device copy
of the output bytes; the shipped plan and every candidate kind that applies
(lean with its output limit lifted; span also with other segment sizes,
SPAN_V, and block widths, SPAN_THREADS); each of the shipped plan, span and chunks with three index
orders: random (the sweep's), the same indices sorted, and consecutive rows
(0, 1, 2, ...: the gather reads one contiguous range, as the copy does).
Every result is checked bit for bit against cupy.take of the same indices.
Medians of 30 calls between two events behind a holding kernel (the sweep's
timing), microseconds; the variants of a case run back to back.  Result:
results.json (H200, 2026-12-04 17:18, the planner of that afternoon).
"""
import json, os, time
import numpy as np
import cupy as cp
import cugather.plan.tuning as tuning
from cugather.bench.peers import time_cupy
from cugather.bench.sweep import SweepShape
from cugather.bench.sweep_run import make_table
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "200"))
VARIANTS = {  # label: (kind, tuning constants set for it); None: the shipped plan
    "shipped": (None, {}), "span": ("span", {}), "chunks": ("chunks", {}),
    "window": ("window", {}), "flat": ("flat", {}), "rows": ("rows", {}),
    "lean": ("lean", {"LEAN_MAX_OUT": 1 << 62}),
    "span-v2": ("span", {"SPAN_V": 2}), "span-v8": ("span", {"SPAN_V": 8}),
    "span-t128": ("span", {"SPAN_THREADS": 128}),
    "span-v8-t128": ("span", {"SPAN_V": 8, "SPAN_THREADS": 128})}
ORDERED = ("shipped", "span", "chunks")  # timed with sorted and consecutive indices too
CASES = [  # (shape, dtype, axis, indices, index dtype, where it came from)
    ((96316, 14442), 'int32', 0, (4261,), 'int64', "6577 chunks u8 0.861 of copy"),
    ((8123, 51326), 'bool', 0, (7, 17), 'int32', "6577 chunks u2 0.932"),
    ((180731, 7638), 'float16', 0, (2656,), 'int64', "6577 chunks u4 0.946"),
    ((1209262, 10, 35), 'complex128', 0, (6272,), 'int64', "6577 chunks u16 0.945"),
    ((10, 16, 142, 9841), 'float16', 2, (5,), 'int64', "6577 span 0.864"),
    ((182, 11143), 'float32', 0, (73,), 'int64', "6577 span 0.918 (8 MB table)"),
    ((13, 51508, 8571, 1), 'float16', 1, (442,), 'int64', "6577 span 0.889"),
    ((1, 3, 13924, 29209), 'float16', 2, (716,), 'int64', "6577 span 0.884"),
    ((1598, 292, 764, 6), 'float32', 1, (14, 1), 'int32', "6577 span 0.912 (16-byte rows)"),
    ((2, 1, 31967, 22307), 'int8', 2, (351,), 'int64', "9973 span 0.855"),
    ((54668, 8140), 'int8', 0, (25054,), 'int64', "9973 chunks u4 0.752"),
    ((2, 2, 2778, 50275), 'uint8', 2, (1069,), 'int32', "9973 span 0.922"),
    ((1351494, 19, 237, 2), 'int8', 0, (2711, 5), 'int64', "9973 span 0.898"),
    ((1159130, 2, 593), 'int64', 0, (25021,), 'int32', "9973 chunks u16 0.943"),
    ((716564, 2, 7459), 'uint8', 0, (35959,), 'int64', "1231 span 0.895"),
    ((1, 2929, 7, 11490), 'float16', 2, (2,), 'int32', "1231 window 0.885"),
    ((6294, 1, 18083), 'int16', 0, (2992,), 'int32', "1231 span 0.949"),
    # controls: rows from DRAM at 95% of copy or more in the sweeps
    ((2, 381210, 1405, 1), 'complex128', 1, (860,), 'int32', "6577 chunks u16 1.024 (22480 B rows)"),
    ((71, 3, 6102, 2288), 'int16', 2, (5, 181), 'int32', "6577 chunks u16 0.987 (4576 B rows)"),
    ((1074378, 56, 62), 'float32', 0, (5868,), 'int32', "9973 chunks u16 0.974 (13888 B rows)"),
    ((1255363, 456), 'complex128', 0, (6724,), 'int64', "6577 span 0.989 (7296 B rows)"),
    ((55428, 9, 3461), 'uint8', 0, (575,), 'int64', "1231 span 0.979 (31149 B rows)"),
]


def us(t):
    return float(np.median(t)) * 1000


def timed(rec, label, plan, data, idx, ref):
    bound = bind(plan, 0, None, CUDA, data.dtype)
    fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
    if not bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()):
        rec["errors"][label] = "differs from cupy.take"
        return
    rec["launch"][label] = [plan.key.entry, list(plan.main.grid), list(plan.main.block)]
    rec["us"][label] = us(time_cupy(cp, fn, 30))


def main():
    res, t0 = [], time.perf_counter()
    limits = CUDA.limits(0)
    for shape, dtype, axis, ishape, idt, note in CASES:
        if time.perf_counter() - t0 > BUDGET_S:
            break
        s = SweepShape(shape, dtype, axis, ishape, idt, "beyond", "loguniform")
        data = make_table(cp, s, 7)
        n = shape[axis]
        rand = cp.random.default_rng(3).integers(0, n, size=ishape, dtype=np.int64).astype(idt)
        orders = {"random": rand, "sorted": cp.sort(rand.reshape(-1)).reshape(ishape),
                  "consecutive": (cp.arange(s.n_indices, dtype=np.int64) % n).astype(idt).reshape(ishape)}
        rec = {"shape": shape, "dtype": dtype, "axis": axis, "indices": ishape, "index_dtype": idt,
               "note": note, "row_bytes": s.row_bytes, "out_bytes": s.out_bytes,
               "table_bytes": s.table_bytes, "us": {}, "launch": {}, "errors": {}}
        nb = s.out_bytes
        src, dst = cp.empty(nb, cp.uint8), cp.empty(nb, cp.uint8)
        rt = cp.cuda.runtime
        rec["us"]["copy"] = us(time_cupy(cp, lambda: rt.memcpyAsync(
            dst.data.ptr, src.data.ptr, nb, rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr), 30))
        del src, dst
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        for order, idx in orders.items():
            ref = cp.take(data, idx, axis=axis)
            for name in (VARIANTS if order == "random" else ORDERED):
                kind, knobs = VARIANTS[name]
                label = name + ("" if order == "random" else "@" + order)
                saved = {k: getattr(tuning, k) for k in knobs}
                try:
                    for k, v in knobs.items():
                        setattr(tuning, k, v)
                    plan = plan_gather(operand, idx.shape, idt, axis, "wrap", limits=limits,
                                       kind=kind)
                except ValueError:
                    continue
                finally:
                    for k, v in saved.items():
                        setattr(tuning, k, v)
                if plan.main is None:
                    continue
                if kind is None:
                    rec["shipped_kind"] = plan.kind
                timed(rec, label, plan, data, idx, ref)
            del ref
        c = rec["us"]["copy"]
        print(shape, dtype, ishape, idt, note, "copy %.1f us |" % c,
              " ".join(f"{k} {c / v:.3f}" for k, v in rec["us"].items() if k != "copy"),
              rec["errors"] or "", flush=True)
        res.append(rec)
        del data, orders, rand
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-long.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
