"""How many units a thread of the chunks kernel keeps in flight (BENCHMARKS.md,
"chunks16: more bytes in flight"), on a GPU:

    python benchmarks/probe-chunks/probe.py   # writes $OUT/probe-chunks.json (default /tmp)

The chunks kernel moves CG_CHUNKS_CU units per thread (tuning.CHUNKS_CU, 4 for
every unit width) under a launch bound of tuning.CHUNKS_BLOCKS (8) blocks of
256 threads: 16 bytes in flight per thread for 4-byte units, 64 for 16-byte
ones.  The held-out sweeps' chunks calls of rows from beyond L2 ran at
0.73-0.87 of the copy with 4-byte units, 0.85-0.96 with 8-byte and 0.90-0.96
with 16-byte ones.  The cases are those calls (32 MiB out or more, under 0.96
of the copy), then controls: chunks calls from tables in L2 with 200 MiB or
more out, and short calls of 4-16 MiB.  For each: the device copy of the
output bytes; the shipped plan; chunks under each VARIANTS setting (units per
thread, blocks per SM of the launch bound) where its unit builds without
spilling (NVRTC 12.9, sm_90: see SPILLS); span; the chunks16 kernel
(tuning.CHUNKS16_CU units per thread, CHUNKS16_BLOCKS) where its unit has one.  Every result is checked bit
for bit against cupy.take.  Medians of 30 calls between two events behind a
holding kernel (the sweep's timing), microseconds; the variants of a case run
back to back.  PROBE_VARIANTS=a,b,... times a subset.  Results (H200,
2026-12-04): results-variants.json (every variant, 20:10, before chunks16
existed) and results-chunks16.json (PROBE_VARIANTS=cu4 with chunks16, 20:21).
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
VARIANTS = {  # label: (CHUNKS_CU, CHUNKS_BLOCKS); "cu4" is the shipped setting
    "cu4": (4, 8), "cu8": (8, 8), "cu8b4": (8, 4), "cu16b6": (16, 6), "cu16b4": (16, 4)}
SPILLS = {  # units whose chunks kernel spills under a variant (wrap, int64 ids)
    "cu8": (16,), "cu16b6": (8, 16), "cu16b4": (16,)}
if os.environ.get("PROBE_VARIANTS"):
    VARIANTS = {k: VARIANTS[k] for k in os.environ["PROBE_VARIANTS"].split(",")}
CASES = [  # (shape, dtype, axis, indices, index dtype, where it came from)
    ((58333, 1985), 'float32', 0, (94559,), 'int64', "8893 lose chunks u4 0.729 (7940 B rows, 716 MiB)"),
    ((440266, 3081), 'int32', 0, (19454, 1), 'int64', "5179 lose chunks u4 0.736 (12324 B rows, 228 MiB)"),
    ((3370851, 279), 'int32', 0, (5, 82007), 'int32', "5179 lose chunks u4 0.737 (1116 B rows, 436 MiB)"),
    ((317332, 1413), 'int32', 0, (67014,), 'int64', "6947 lose chunks u4 0.744 (5652 B rows, 361 MiB)"),
    ((36865, 2489), 'int32', 0, (70132,), 'int64', "8893 lose chunks u4 0.766 (9956 B rows, 665 MiB)"),
    ((533075, 183), 'int32', 0, (79751, 2), 'int32', "8893 lose chunks u4 0.781 (732 B rows, 111 MiB)"),
    ((267371, 5, 89), 'int32', 0, (358017,), 'int32', "5179 lose chunks u4 0.805 (1780 B rows, 607 MiB)"),
    ((1, 4597048, 1500), 'uint8', 1, (314222,), 'int32', "8893 lose chunks u4 0.824 (1500 B rows, 449 MiB)"),
    ((880486, 750), 'float16', 0, (495826, 1), 'int32', "6947 lose chunks u4 0.831 (1500 B rows, 709 MiB)"),
    ((1049790, 10, 75), 'int16', 0, (1, 107278), 'int64', "8893 lose chunks u4 0.845 (1500 B rows, 153 MiB)"),
    ((1, 1007, 9554, 193), 'int32', 2, (233,), 'int32', "8893 lose chunks u4 0.861 (772 B rows, 172 MiB)"),
    ((109541, 599), 'int32', 0, (56118,), 'int64', "6947 lose chunks u4 0.866 (2396 B rows, 128 MiB)"),
    ((73654, 2867), 'int64', 0, (4, 3547), 'int32', "5179 lose chunks u8 0.854 (22936 B rows, 310 MiB)"),
    ((546453, 133, 1), 'float64', 0, (102218,), 'int64', "8893 lose chunks u8 0.886 (1064 B rows, 103 MiB)"),
    ((6862253, 25, 5), 'int64', 0, (505513,), 'int32', "5179 lose chunks u8 0.918 (1000 B rows, 482 MiB)"),
    ((2663176, 250), 'float32', 0, (2, 190335), 'int64', "7603 lose chunks u8 0.921 (1000 B rows, 363 MiB)"),
    ((2567298, 200, 5), 'uint8', 0, (212131,), 'int64', "7603 lose chunks u8 0.927 (1000 B rows, 202 MiB)"),
    ((1936656, 500), 'int16', 0, (330405,), 'int64', "7603 lose chunks u8 0.929 (1000 B rows, 315 MiB)"),
    ((121043, 6, 2179), 'int32', 0, (1299,), 'int64', "2851 lose chunks u8 0.946 (52296 B rows, 64 MiB)"),
    ((2, 1244771, 375), 'int64', 1, (4088, 14), 'int64', "5179 lose chunks u8 0.947 (3000 B rows, 327 MiB)"),
    ((111, 39448, 125, 6), 'float32', 1, (729,), 'int32', "7603 lose chunks u8 0.950 (3000 B rows, 231 MiB)"),
    ((1297115, 87), 'float64', 0, (81607,), 'int32', "2851 lose chunks u8 0.954 (696 B rows, 54 MiB)"),
    ((2076380, 500, 2), 'bool', 0, (58614,), 'int64', "7603 lose chunks u8 0.957 (1000 B rows, 55 MiB)"),
    ((951264, 1000), 'uint8', 0, (87734,), 'int32', "5179 lose chunks u8 0.959 (1000 B rows, 83 MiB)"),
    ((184602, 6888), 'int64', 0, (3338, 1), 'int32', "5179 lose chunks u16 0.903 (55104 B rows, 175 MiB)"),
    ((3226762, 127), 'complex128', 0, (279810,), 'int32', "7603 lose chunks u16 0.923 (2032 B rows, 542 MiB)"),
    ((31252, 2246), 'float64', 0, (9174,), 'int64', "7603 lose chunks u16 0.925 (17968 B rows, 157 MiB)"),
    ((1587025, 308), 'int32', 0, (255687,), 'int32', "8893 lose chunks u16 0.928 (1232 B rows, 300 MiB)"),
    ((590240, 2, 283), 'float64', 0, (1, 196114), 'int64', "2851 lose chunks u16 0.937 (4528 B rows, 846 MiB)"),
    ((1556060, 155), 'complex128', 0, (366793,), 'int32', "7603 lose chunks u16 0.939 (2480 B rows, 867 MiB)"),
    ((923092, 1, 742, 2), 'float64', 0, (14, 2798), 'int32', "5179 lose chunks u16 0.945 (11872 B rows, 443 MiB)"),
    ((821692, 2832), 'int16', 0, (61403,), 'int32', "8893 lose chunks u16 0.946 (5664 B rows, 331 MiB)"),
    ((8715861, 2, 22, 2), 'complex128', 0, (374990,), 'int32', "7603 lose chunks u16 0.952 (1408 B rows, 503 MiB)"),
    ((1185879, 12, 68), 'int32', 0, (56074,), 'int64', "7603 lose chunks u16 0.956 (3264 B rows, 174 MiB)"),
    ((70, 27732, 15, 18), 'complex128', 1, (847,), 'int64', "2851 lose chunks u16 0.957 (4320 B rows, 244 MiB)"),
    ((6789, 171), 'float32', 0, (42128, 8), 'int64', "6947 l2 chunks u4 1.250 (684 B rows, 219 MiB)"),
    ((2187, 8, 1500), 'bool', 1, (127,), 'int64', "7603 l2 chunks u4 1.387 (1500 B rows, 397 MiB)"),
    ((35816, 113), 'float64', 0, (791141,), 'int32', "2851 l2 chunks u8 1.213 (904 B rows, 682 MiB)"),
    ((937, 1249, 1, 2), 'float32', 0, (54962,), 'int32', "8893 l2 chunks u8 1.307 (9992 B rows, 523 MiB)"),
    ((178, 14, 67, 2), 'int64', 0, (67564,), 'int32', "5179 l2 chunks u16 1.993 (15008 B rows, 967 MiB)"),
    ((59, 2, 11350, 375), 'int32', 2, (63,), 'int32', "8893 short chunks u4 1.000 (1500 B rows, 10 MiB)"),
    ((31465, 2565), 'int32', 0, (1061,), 'int64', "5179 short chunks u4 1.008 (10260 B rows, 10 MiB)"),
    ((567496, 5, 100, 1), 'int16', 0, (12266,), 'int32', "8893 short chunks u8 1.060 (1000 B rows, 11 MiB)"),
    ((318990, 3000), 'uint8', 0, (5095,), 'int64', "6947 short chunks u8 1.068 (3000 B rows, 14 MiB)"),
]


def us(t):
    return float(np.median(t)) * 1000


def set_chunks(cu, blocks):
    """Build chunks with ``cu`` units per thread and a launch bound of ``blocks``."""
    tuning.CHUNKS_CU, tuning.CHUNKS_BLOCKS = cu, blocks
    tuning.KERNEL_DEFINES["CG_CHUNKS_CU"] = cu
    # The launch bound is no define: one that names it keeps each setting's
    # build apart in the compile caches (keyed by the sources' digest).
    tuning.KERNEL_DEFINES["CG_PROBE_CHUNKS_BLOCKS"] = blocks
    render.sources_digest.cache_clear()
    render.render.cache_clear()


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
    shipped = (tuning.CHUNKS_CU, tuning.CHUNKS_BLOCKS)
    set_chunks(*shipped)
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
        for kind in ("span", "chunks16"):
            try:
                timed(rec, kind, plan(kind), data, idx, ref)
            except ValueError:
                pass
        for label, (cu, blocks) in VARIANTS.items():
            p = plan("chunks")
            if p.key.unit in SPILLS.get(label, ()):
                continue
            set_chunks(cu, blocks)
            try:
                timed(rec, label, plan("chunks"), data, idx, ref)
            finally:
                set_chunks(*shipped)
        c = rec["us"]["copy"]
        print(shape, dtype, ishape, idt, note, "copy %.1f us |" % c,
              " ".join(f"{k} {c / v:.3f}" for k, v in rec["us"].items() if k != "copy"),
              rec["errors"] or "", flush=True)
        res.append(rec)
        del data, idx, ref
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-chunks.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "variants": VARIANTS, "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
