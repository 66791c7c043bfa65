"""spanb, span's chunks staged by the bulk copy engine, against span, chunks and
the copy on long rows from DRAM (BENCHMARKS.md, "spanb: long rows through the
bulk copy engine"), on a GPU:

    git apply benchmarks/probe-spanb/spanb.diff   # the kernel was not kept
    python benchmarks/probe-spanb/probe.py   # writes $OUT/probe-spanb.json (default /tmp)

The cases are the held-out sweeps' rows of 4 KB or more with 1 MiB or more out
that ran under 95% of the copy (seeds 6577, 9973, 1231 as in
benchmarks/probe-long, then 4127 and 6619), then controls that reached it.  For
each: the device copy of the output bytes; the shipped plan; span and chunks
where they apply; spanb under each VARIANTS setting (stages, 16-byte chunks per
segment, blocks per SM: the launch bound and the persistent grid).  Every
result is checked bit for bit against cupy.take.  Medians of 30 calls between
two events behind a holding kernel (the sweep's timing), microseconds; the
variants of a case run back to back.  PROBE_VARIANTS=a,b,... times a subset.
Result: results-2026-12-05.json (H200, PROBE_BUDGET_S=130, every case).
"""
import json, os, time
import numpy as np
import cupy as cp
import cugather.plan.tuning as tuning
from cugather.bench.peers import time_cupy
from cugather.bench.sweep import SweepShape
from cugather.bench.sweep_run import make_table
from cugather.compile import render
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "240"))
VARIANTS = {  # label: (SPANB_STAGES, SPANB_SEG, SPANB_BLOCKS); shared memory per block
    # S x ((SEG + 1) x 16 + 48) stays under 48 KB, times the blocks under 228 KB
    "b3x768": (3, 768, 5), "b2x1024": (2, 1024, 5), "b4x512": (4, 512, 6),
    "b3x512": (3, 512, 6), "b4x640": (4, 640, 5)}
if os.environ.get("PROBE_VARIANTS"):
    VARIANTS = {k: VARIANTS[k] for k in os.environ["PROBE_VARIANTS"].split(",")}
CASES = [  # (shape, dtype, axis, indices, index dtype, where it came from)
    ((96316, 14442), 'int32', 0, (4261,), 'int64', "6577 chunks u8 0.861 of copy"),
    ((8123, 51326), 'bool', 0, (7, 17), 'int32', "6577 chunks u2 0.932"),
    ((180731, 7638), 'float16', 0, (2656,), 'int64', "6577 chunks u4 0.946"),
    ((10, 16, 142, 9841), 'float16', 2, (5,), 'int64', "6577 span 0.864"),
    ((13, 51508, 8571, 1), 'float16', 1, (442,), 'int64', "6577 span 0.889"),
    ((1, 3, 13924, 29209), 'float16', 2, (716,), 'int64', "6577 span 0.884"),
    ((2, 1, 31967, 22307), 'int8', 2, (351,), 'int64', "9973 span 0.855"),
    ((54668, 8140), 'int8', 0, (25054,), 'int64', "9973 chunks u4 0.752"),
    ((2, 2, 2778, 50275), 'uint8', 2, (1069,), 'int32', "9973 span 0.922"),
    ((716564, 2, 7459), 'uint8', 0, (35959,), 'int64', "1231 span 0.895"),
    ((1, 2929, 7, 11490), 'float16', 2, (2,), 'int32', "1231 window 0.885"),
    ((98104, 13, 439), 'int16', 0, (6655,), 'int64', "4127 span 0.944 (11414 B rows, 72 MiB)"),
    ((2647, 26, 3102), 'float64', 1, (3,), 'int64', "4127 span 0.881 (24816 B rows, 188 MiB)"),
    ((1124, 14, 7, 1151), 'int64', 1, (5, 1), 'int32', "4127 chunks 0.830 (64456 B rows, 345 MiB)"),
    ((171078, 4159), 'int16', 0, (18481, 1), 'int64', "4127 span 0.883 (8318 B rows, 147 MiB)"),
    ((265451, 67, 3, 13), 'int16', 0, (39452,), 'int32', "4127 span 0.875 (5226 B rows, 197 MiB)"),
    ((1, 1423, 16, 21990), 'uint8', 2, (6,), 'int32', "4127 span 0.888 (21990 B rows, 179 MiB)"),
    ((511804, 847), 'float64', 0, (73051,), 'int32', "6619 chunks 0.930 (6776 B rows, 472 MiB)"),
    ((26786, 1395), 'complex128', 0, (41052,), 'int64', "6619 chunks 0.915 (22320 B rows, 874 MiB)"),
    ((134610, 5, 467), 'int64', 0, (14913,), 'int64', "6619 span 0.878 (18680 B rows, 266 MiB)"),
    ((290311, 21327), 'int16', 0, (2216,), 'int64', "6619 span 0.899 (42654 B rows, 90 MiB)"),
    ((420826, 1, 3407), 'float32', 0, (11044,), 'int64', "6619 chunks 0.748 (13628 B rows, 144 MiB)"),
    ((15274, 122, 163), 'float16', 0, (9057,), 'int64', "6619 chunks 0.807 (39772 B rows, 344 MiB)"),
    ((8757, 39, 5879), 'float32', 1, (4,), 'int32', "6619 span 0.872 (23516 B rows, 786 MiB)"),
    # controls: rows from DRAM at 95% of copy or more in the sweeps, KV-cache blocks
    ((2, 381210, 1405, 1), 'complex128', 1, (860,), 'int32', "6577 chunks u16 1.024 (22480 B rows)"),
    ((71, 3, 6102, 2288), 'int16', 2, (5, 181), 'int32', "6577 chunks u16 0.987 (4576 B rows)"),
    ((1255363, 456), 'complex128', 0, (6724,), 'int64', "6577 span 0.989 (7296 B rows)"),
    ((55428, 9, 3461), 'uint8', 0, (575,), 'int64', "1231 span 0.979 (31149 B rows)"),
    ((8192, 16, 8, 128), 'float16', 0, (32, 128), 'int32', "KV blocks (32 KB rows)"),
]


def us(t):
    return float(np.median(t)) * 1000


def set_spanb(stages, seg, blocks):
    """Build and plan spanb with ``stages`` stages of ``seg`` chunks, ``blocks`` per SM."""
    tuning.SPANB_STAGES, tuning.SPANB_SEG, tuning.SPANB_BLOCKS = stages, seg, blocks
    tuning.KERNEL_DEFINES["CG_SPANB_STAGES"] = stages
    # The launch bound is no define: one that names it keeps each setting's
    # build apart in the compile caches (keyed by the sources' digest).
    tuning.KERNEL_DEFINES["CG_PROBE_SPANB_BLOCKS"] = blocks
    render.sources_digest.cache_clear()
    render.render.cache_clear()


def timed(rec, label, plan, data, idx, ref):
    bound = bind(plan, 0, None, CUDA, data.dtype)
    fn = lambda: execute(bound, data, data.data.ptr, idx, None, None, 0)  # noqa: E731
    if not bool((fn().view(cp.uint8) == ref.view(cp.uint8)).all()):
        rec["errors"][label] = "differs from cupy.take"
        return
    rec["launch"][label] = [plan.key.entry, list(plan.main.grid), list(plan.main.block),
                            plan.main.shared_mem]
    rec["us"][label] = us(time_cupy(cp, fn, 30))


def main():
    res, t0 = [], time.perf_counter()
    limits = CUDA.limits(0)
    shipped = (tuning.SPANB_STAGES, tuning.SPANB_SEG, tuning.SPANB_BLOCKS)
    for shape, dtype, axis, ishape, idt, note in CASES:
        if time.perf_counter() - t0 > BUDGET_S:
            break
        s = SweepShape(shape, dtype, axis, ishape, idt, "beyond", "loguniform")
        data = make_table(cp, s, 7)
        idx = cp.random.default_rng(3).integers(0, shape[axis], size=ishape,
                                                dtype=np.int64).astype(idt)
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
        ref = cp.take(data, idx, axis=axis)
        plan = lambda kind: plan_gather(operand, idx.shape, idt, axis, "wrap",  # noqa: E731
                                        limits=limits, kind=kind)
        p = plan(None)
        rec["shipped_kind"] = p.kind
        timed(rec, "shipped", p, data, idx, ref)
        for kind in ("span", "chunks"):
            try:
                timed(rec, kind, plan(kind), data, idx, ref)
            except ValueError:
                pass
        for label, setting in VARIANTS.items():
            set_spanb(*setting)
            try:
                timed(rec, label, plan("spanb"), data, idx, ref)
            except ValueError:
                pass
            finally:
                set_spanb(*shipped)
        c = rec["us"]["copy"]
        print(shape, dtype, ishape, idt, note, "copy %.1f us |" % c,
              " ".join(f"{k} {c / v:.3f}" for k, v in rec["us"].items() if k != "copy"),
              rec["errors"] or "", flush=True)
        res.append(rec)
        del data, idx, ref
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-spanb.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "variants": VARIANTS, "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
