"""slab's grid: how many index blocks a group of staged outer rows gets
(BENCHMARKS.md, "slab's index blocks"), on a GPU:

    python benchmarks/probe-slab/grid.py      # writes $OUT/probe-slab-grid.json (default /tmp)

Every block of a group stages the group's outer rows again; with few picks
per axis element most of a block's time goes to that staging.
tuning.SLAB_STAGE_RATIO = R caps the index blocks at R x picks / axis_len
(0: no cap, the rule before).  The cases: the slab and slabw plans of the
held-out sweeps 6577, 9973, 1231, 7603, 8893 and 5179 and of the seed-1004
tuning geometries (tune-sm_90-seed1004-where.jsonl.gz) whose launch some R of
VARIANTS changes.  Each plan is checked bit for bit against cupy.take; the
variants of a case are timed in alternation, 6 rounds of 15 calls between two
events behind a holding kernel (medians, microseconds), beside the device
copy of the output bytes.
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
VARIANTS = (0, 1, 2, 4)
CASES = [  # (shape, dtype, axis, indices, index dtype, where it came from)
    ((4, 67, 1, 1603), 'float16', 3, (9721,), 'int64', 'sweep-6577#216 slab 1.01x torch.index_select'),
    ((138, 43, 817), 'uint8', 2, (2128,), 'int64', 'sweep-6577#262 slab 1.49x torch.index_select'),
    ((4, 47, 284), 'uint8', 2, (127004,), 'int64', 'sweep-6577#375 slab 1.92x jax.numpy.take'),
    ((1, 1, 7, 5516), 'int8', 3, (1569024,), 'int32', 'sweep-9973#20 slab 2.15x torch.index_select'),
    ((10155, 288), 'float16', 1, (393,), 'int64', 'sweep-9973#442 slab 1.59x torch.index_select'),
    ((14, 41, 2932), 'int16', 2, (1, 5821), 'int32', 'sweep-1231#203 slab 1.33x torch.index_select'),
    ((2, 197, 1, 6060), 'int16', 3, (33627,), 'int32', 'sweep-1231#279 slab 1.86x torch.index_select'),
    ((8, 481), 'float64', 1, (235461,), 'int64', 'sweep-1231#455 slab 1.04x torch.index_select'),
    ((104, 301), 'float16', 1, (613, 32), 'int32', 'sweep-8893#356 slab 1.26x torch.index_select'),
    ((1, 79, 1, 1558), 'int32', 3, (8854, 3), 'int32', 'sweep-5179#15 slab 1.20x torch.index_select'),
    ((118, 13, 3243), 'uint8', 2, (1286,), 'int32', 'sweep-5179#457 slab 0.61x torch.index_select'),
    ((2, 157, 2, 1960), 'float16', 3, (2788,), 'int64', 'tune-1004#315 slab'),
    ((3526, 692), 'uint8', 1, (1000,), 'int32', 'tune-1004#2856 slab'),
    ((540, 4109), 'float32', 1, (8085,), 'int64', 'tune-1004#4595 slab'),
    ((78, 2, 6, 1913), 'float32', 3, (19, 188), 'int32', 'tune-1004#9525 slab'),
    ((1, 762, 13384), 'bool', 2, (1714,), 'int32', 'tune-1004#9603 slab'),
    ((6, 366, 1, 1091), 'float32', 3, (18, 87), 'int32', 'tune-1004#12376 slab'),
    ((950, 3590), 'int32', 1, (2626,), 'int32', 'tune-1004#13688 slab'),
    ((4, 1823, 1, 1855), 'int8', 3, (1, 886), 'int64', 'tune-1004#14073 slab'),
    ((1, 5151, 2, 1952), 'bool', 3, (5, 313), 'int32', 'tune-1004#14798 slab'),
    ((1, 347, 1, 5273), 'bool', 3, (9911,), 'int64', 'tune-1004#15882 slab'),
    ((6, 1, 163, 3035), 'int16', 3, (3557,), 'int64', 'tune-1004#16685 slab'),
    ((1, 677, 2453), 'float64', 2, (4, 914), 'int64', 'tune-1004#17977 slab'),
    ((2, 2, 164, 5324), 'int32', 3, (3402,), 'int64', 'tune-1004#19292 slab'),
    ((2970, 653), 'float16', 1, (538,), 'int32', 'tune-1004#24135 slab'),
    ((25, 25, 5, 487), 'float64', 3, (904,), 'int32', 'tune-1004#24958 slab'),
    ((1, 1049, 1798), 'uint8', 2, (1277,), 'int32', 'tune-1004#26520 slab'),
    ((214, 5424), 'float16', 1, (7746,), 'int64', 'tune-1004#29051 slab'),
    ((1, 226, 6499), 'int8', 2, (12016,), 'int64', 'tune-1004#29155 slab'),
    ((1, 699, 4126), 'int16', 2, (4221,), 'int64', 'tune-1004#30599 slab'),
    ((1, 1, 13643, 711), 'float16', 3, (522,), 'int32', 'tune-1004#31498 slab'),
    ((3, 4, 2017, 771), 'uint8', 3, (1, 637), 'int64', 'tune-1004#31555 slab'),
    ((16, 20, 9828), 'uint8', 2, (3470,), 'int64', 'tune-1004#32528 slab'),
    ((4905, 764), 'uint8', 1, (922,), 'int32', 'tune-1004#33065 slab'),
    ((167, 5, 6530), 'float16', 2, (4583,), 'int32', 'tune-1004#33157 slab'),
    ((841, 3357), 'int16', 1, (6, 898), 'int64', 'tune-1004#33957 slab'),
    ((102, 1, 1, 22353), 'bool', 3, (12007,), 'int32', 'tune-1004#34067 slab'),
    ((1, 782, 1221), 'float64', 2, (2261,), 'int32', 'tune-1004#35890 slab'),
    ((3805, 1513), 'int16', 1, (2760,), 'int64', 'tune-1004#36296 slab'),
    ((863, 3, 1628), 'int16', 2, (1915, 1), 'int64', 'tune-1004#36652 slab'),
    ((157, 2, 5548), 'float16', 2, (9863,), 'int32', 'tune-1004#37263 slab'),
    ((761, 10339), 'int8', 1, (1588,), 'int64', 'tune-1004#38426 slab'),
    ((506, 4, 2, 4934), 'uint8', 3, (4833,), 'int32', 'tune-1004#39719 slab'),
    ((2774, 1362, 2), 'uint8', 1, (1108,), 'int32', 'tune-1004#45682 slab'),
    ((2134, 1, 2, 955), 'float32', 3, (38, 18), 'int32', 'tune-1004#47347 slab'),
    ((3712, 1093), 'float32', 1, (1332,), 'int32', 'tune-1004#47528 slab'),
    ((3869, 1, 1, 1176), 'bool', 3, (1339,), 'int32', 'tune-1004#48203 slab'),
    ((779, 1, 13, 1528), 'uint8', 3, (310,), 'int64', 'tune-1004#48511 slab'),
    ((1008, 3647), 'int8', 1, (21, 187), 'int32', 'tune-1004#49474 slab'),
    ((1, 1371, 2934), 'float16', 2, (5186,), 'int32', 'tune-1004#50670 slab'),
    ((1, 10981, 1, 1966), 'uint8', 3, (46, 13), 'int32', 'tune-1004#51201 slab'),
    ((1, 17387, 1, 772), 'bool', 3, (686,), 'int64', 'tune-1004#52419 slab'),
    ((3, 259, 2232), 'float64', 2, (2375,), 'int32', 'tune-1004#58545 slab'),
    ((1427, 1, 2255), 'bool', 2, (4, 800), 'int32', 'tune-1004#58858 slab'),
    ((609, 4969), 'float16', 1, (167, 43), 'int32', 'tune-1004#58875 slab'),
    ((43, 9, 1, 2640), 'uint8', 3, (3378,), 'int64', 'tune-1004#59724 slab'),
    ((2686, 606), 'uint8', 1, (37, 11), 'int32', 'tune-1004#60690 slab'),
    ((16, 74, 2181), 'float32', 2, (1381, 1), 'int64', 'tune-1004#64726 slab'),
    ((4, 367, 2775), 'uint8', 2, (5198,), 'int64', 'tune-1004#67170 slab'),
    ((1, 1, 233, 8042), 'float16', 3, (14471,), 'int32', 'tune-1004#67789 slab'),
    ((1, 108, 12, 1412), 'int64', 3, (1473,), 'int64', 'tune-1004#71761 slab'),
    ((1, 4729, 3304), 'bool', 2, (632,), 'int64', 'tune-1004#73301 slab'),
    ((5776, 352), 'uint8', 1, (285,), 'int64', 'tune-1004#74735 slab')
]


def main():
    limits = CUDA.limits(0)
    rt = cp.cuda.runtime
    res, t0 = [], time.perf_counter()
    saved = tuning.SLAB_STAGE_RATIO
    for shape, dtype, axis, ishape, idt, note in CASES:
        s = SweepShape(tuple(shape), dtype, axis, tuple(ishape), idt, "l2", "loguniform")
        data = make_table(cp, s, 13)
        n = shape[axis]
        idx = cp.random.default_rng(2).integers(0, n, size=ishape, dtype=np.int64).astype(idt)
        ref = cp.take(data, idx, axis=axis).view(cp.uint8)
        operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
        fns, launch = {}, {}
        try:
            for r in VARIANTS:
                tuning.SLAB_STAGE_RATIO = r
                p = plan_gather(operand, idx.shape, idt, axis, "wrap", limits=limits)
                bound = bind(p, 0, None, CUDA, data.dtype)
                f = (lambda b: lambda: execute(b, data, data.data.ptr, idx, None, None, 0))(bound)
                assert bool((f().view(cp.uint8) == ref).all()), (note, r)
                fns[r], launch[r] = f, [p.key.entry, list(p.main.grid), p.main.fields["chunk"]]
        finally:
            tuning.SLAB_STAGE_RATIO = saved
        nb = s.out_bytes
        src, dst = cp.empty(nb, cp.uint8), cp.empty(nb, cp.uint8)
        ts = {r: [] for r in VARIANTS}
        ts["copy"] = []
        copy = lambda: rt.memcpyAsync(dst.data.ptr, src.data.ptr, nb,  # noqa: E731
                                      rt.memcpyDeviceToDevice, cp.cuda.get_current_stream().ptr)
        for _ in range(6):
            for r in VARIANTS:
                ts[r] += list(time_cupy(cp, fns[r], 15))
            ts["copy"] += list(time_cupy(cp, copy, 15))
        us = {str(k): float(np.median(v)) * 1e3 for k, v in ts.items()}
        res.append({"shape": shape, "dtype": dtype, "axis": axis, "indices": ishape,
                    "index_dtype": idt, "note": note, "out_bytes": nb, "us": us,
                    "launch": {str(k): v for k, v in launch.items()}})
        print(note, shape, dtype, ishape, " ".join(f"R{k} {v:.1f}" for k, v in us.items()),
              "| R0/R:", " ".join(f"{us['0'] / us[str(r)]:.2f}" for r in VARIANTS[1:]), flush=True)
        del data, idx, ref, fns, src, dst
        cp.get_default_memory_pool().free_all_blocks()
    with open(os.path.join(OUT, "probe-slab-grid.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "elapsed_s": time.perf_counter() - t0, "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
