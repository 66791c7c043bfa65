"""slab with aligned stores (tuning.SLAB_ALIGN) and slab and slabw at 16 blocks
a SM (tuning.SLAB_BLOCKS_PER_SM) against the shipped kernels, on the sweep
geometries the shipped planner gives to slab or slabw, on a GPU:

    OUT=DIR python benchmarks/probe-losers/align_ab.py     # writes $OUT/align_ab.json

Per geometry (the records of benchmarks/sweep-SEED.json.gz for each seed of
AB_SEEDS, default 6421,7753,4481,5023): the plan at 8 blocks a SM (b8, the
shipped one) and at 16 (b16, skipped where the grid is the same), each
rendered with CG_SLAB_ALIGN 0 and, for slab, 1 (suffix _al); every variant
compiled the same way, checked bit for bit against cupy.take, then all timed
in alternation, 8 rounds of 15 calls between events behind a holding kernel:
medians, microseconds.  AB_BUDGET_S: seconds after which no geometry starts.
"""
import gzip, json, os, time
import numpy as np
import cupy as cp
from cugather.bench.peers import time_cupy
from cugather.bench.sweep import SweepShape
from cugather.bench.sweep_run import make_indices, make_table
from cugather.plan import tuning
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.launch import CUDA
from variants import bound_variant

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.environ.get("OUT", "/tmp")
SEEDS = os.environ.get("AB_SEEDS", "6421,7753,4481,5023").split(",")
BUDGET_S = float(os.environ.get("AB_BUDGET_S", "inf"))


def plan_at(operand, ishape, idt, axis, limits, blocks):
    saved = tuning.SLAB_BLOCKS_PER_SM
    tuning.SLAB_BLOCKS_PER_SM = blocks
    try:
        return plan_gather(operand, ishape, idt, axis, "wrap", limits=limits)
    finally:
        tuning.SLAB_BLOCKS_PER_SM = saved


def main():
    limits = CUDA.limits(0)
    res, t0 = [], time.perf_counter()
    stream = cp.cuda.get_current_stream()
    for seed in SEEDS:
        with gzip.open(os.path.join(ROOT, "benchmarks", f"sweep-{seed}.json.gz")) as f:
            records = json.load(f)["records"]
        for r in records:
            if time.perf_counter() - t0 > BUDGET_S:
                break
            shape, axis, ishape = tuple(r["shape"]), r["axis"], tuple(r["indices"])
            dtype, idt = r["dtype"], r["index_dtype"]
            operand = Operand.contiguous(shape, np.dtype(dtype).itemsize)
            p8 = plan_at(operand, ishape, idt, axis, limits, 8)
            if p8.kind not in ("slab", "slabw") or p8.main is None:
                continue
            p16 = plan_at(operand, ishape, idt, axis, limits, 16)
            name = f"{seed}#{r['i']}"
            try:
                s = SweepShape(shape, dtype, axis, ishape, idt, "beyond", "loguniform")
                data = make_table(cp, s, 11)
                assert alignment(data.data.ptr) >= 256
                n = shape[axis]
                idx = make_indices(cp, s, 5)
                ref = cp.take(data, cp.where(idx < 0, idx + n, idx), axis=axis)
                refb = ref.view(cp.uint8).ravel()
                out = cp.empty_like(ref)
                fns, plans = {}, {"b8": p8}
                if tuple(p16.main.grid) != tuple(p8.main.grid) or p16.kind != p8.kind:
                    plans["b16"] = p16
                for tag, p in plans.items():
                    for al in ((0, 1) if p.kind == "slab" else (0,)):
                        bk = bound_variant(p, CG_SLAB_ALIGN=al)
                        go = (lambda b: lambda: b.launch(stream.ptr, data.data.ptr, idx.data.ptr,
                                                         out.data.ptr, 0))(bk)
                        out.fill(0)
                        go()
                        if not bool((out.view(cp.uint8).ravel() == refb).all()):
                            raise AssertionError(f"{name} {tag} align {al}: mismatch")
                        fns[tag + ("_al" if al else "")] = go
                ts = {k: [] for k in fns}
                for _ in range(8):
                    for k, fn in fns.items():
                        ts[k] += list(time_cupy(cp, fn, 15))
                us = {k: float(np.median(v)) * 1e3 for k, v in ts.items()}
                rec = {"name": name, "shape": shape, "dtype": dtype, "axis": axis,
                       "indices": ishape, "index_dtype": idt, "out_bytes": s.out_bytes,
                       "kind": p8.kind, "grid_b8": list(p8.main.grid),
                       "grid_b16": list(p16.main.grid), "kind_b16": p16.kind, "us": us}
                res.append(rec)
                print(name, shape, dtype, axis, ishape, p8.kind, " ".join(
                    f"{k} {us['b8'] / v:.3f}" for k, v in us.items() if k != "b8"),
                    "b8 %.2f us" % us["b8"], flush=True)
            except Exception as e:  # one geometry's failure is recorded, the run goes on
                res.append({"name": name, "error": repr(e)})
                print(name, "ERROR", repr(e), flush=True)
            finally:
                data = idx = ref = refb = out = fns = None
                cp.get_default_memory_pool().free_all_blocks()
        with open(os.path.join(OUT, "align_ab.json"), "w") as f:
            json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                       "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "cases": res}, f, indent=1)
    for k in ("b8_al", "b16", "b16_al"):
        sp = [c["us"]["b8"] / c["us"][k] for c in res if "us" in c and k in c["us"]]
        if sp:
            print(k, "over b8: n", len(sp), "geomean %.4f" % float(np.exp(np.mean(np.log(sp)))),
                  "min %.3f max %.3f" % (min(sp), max(sp)),
                  ">3%% faster %d, >3%% slower %d" % (sum(x > 1.03 for x in sp),
                                                     sum(x < 1 / 1.03 for x in sp)))
    print("elapsed %.0f s" % (time.perf_counter() - t0))


if __name__ == "__main__":
    main()
