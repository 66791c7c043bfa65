"""Lean to 64 MiB with a table fitted under the table before's splits, against
the planner before, plan by plan (BENCHMARKS.md, "Lean to 64 MiB under the
table's splits, inner in whole waves"), on a GPU:

    python benchmarks/probe-short/ab.py       # writes $OUT/ab.json (default /tmp)

It needs tuning.SHORT_CALL_OUT, the rules' short-call limit apart from lean's
(lean-limit-64mib.diff, shipped since).  Planner A is the one before: the
table sm_90-before-lean64.json with tuning.LEAN_MAX_OUT set back to 1 MiB.
Planner B: LEAN_MAX_OUT at 64 MiB with the table AB_TABLE (default
sm_90-lean-64mib-under-shipped.json; the shipped one is
sm_90-lean-64mib-inner3-under-shipped.json).  The geometries are those of the
held-out sweeps 6577, 9973 and 1231 and of the fixed suite whose launch
(kernel, grid, block) the two planners make differently.  Each is checked bit
for bit against cupy.take, then A and B are timed in alternation, 8 rounds of
15 calls each, between two events behind a holding kernel: medians,
microseconds.  The results: ab-lean64-under-shipped.json (B the default) and
ab-lean64-inner3.json (B the shipped table).

Other pairs of planners: AB_A_TABLE and AB_A_LEAN (planner A's table and
LEAN_MAX_OUT), AB_B_LEAN, AB_A_BOX_SLACK and AB_B_BOX_SLACK (table.BOX_SLACK's
log2_row_bytes), AB_A_FLAT_RULE_MAX_ROW and AB_B_FLAT_RULE_MAX_ROW
(tuning.FLAT_RULE_MAX_ROW; 0 gives the rules before it), AB_A_ONE_UNIT_RULE
and AB_B_ONE_UNIT_RULE (tuning.ONE_UNIT_RULE, comma-separated kinds; empty
gives the rules before it: scalar); a table path of "none" gives the rules
alone, AB_SEEDS (the sweeps, comma-separated) and AB_BUDGET_S
(seconds after which no further geometry starts; a seed whose
sweep-SEED.json.gz is not kept has its 500 shapes drawn again);
benchmarks/probe-chunks/ab-chunks16.json came from AB_A_TABLE=
benchmarks/probe-chunks/sm_90-before-chunks16.json AB_A_LEAN=67108864
AB_TABLE=cugather/plan/tables/sm_90.json AB_SEEDS=7603,8893,5179,2851,6947;
benchmarks/probe-chunks/ab-box-slack.json from AB_A_TABLE and AB_TABLE both
the shipped table, AB_A_LEAN=67108864 AB_A_BOX_SLACK=0 AB_B_BOX_SLACK=1 and
AB_SEEDS=7603,8893,5179,2851,6947,4127,6619.
"""
import gzip, json, os, time
import numpy as np
import cupy as cp
import cugather.plan.table as table
import cugather.plan.tuning as tuning
from cugather.bench.cases import CASES as FIXED
from cugather.bench.peers import time_cupy
from cugather.bench.sweep import SweepShape, draw_shapes
from cugather.bench.sweep_run import make_indices, make_table
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.environ.get("OUT", "/tmp")
PLANNERS = {"A": (int(os.environ.get("AB_A_LEAN", 1 << 20)),
                  os.environ.get("AB_A_TABLE") or os.path.join(HERE, "sm_90-before-lean64.json")),
            "B": (int(os.environ.get("AB_B_LEAN", 64 << 20)), os.environ.get("AB_TABLE") or
                  os.path.join(HERE, "sm_90-lean-64mib-under-shipped.json"))}
SEEDS = tuple(os.environ.get("AB_SEEDS", "6577,9973,1231").split(","))
BUDGET_S = float(os.environ.get("AB_BUDGET_S", "inf"))  # stop starting geometries after it


def plan_of(name, operand, ishape, idt, axis, limits):
    lean_max, path = PLANNERS[name]
    saved, saved_slack = tuning.LEAN_MAX_OUT, dict(table.BOX_SLACK)
    saved_flat, saved_one = tuning.FLAT_RULE_MAX_ROW, tuning.ONE_UNIT_RULE
    one = os.environ.get(f"AB_{name}_ONE_UNIT_RULE")
    slack = os.environ.get(f"AB_{name}_BOX_SLACK")
    os.environ["CUGATHER_TUNING"] = path
    table.clear_tables()
    try:
        tuning.LEAN_MAX_OUT = lean_max
        tuning.FLAT_RULE_MAX_ROW = int(os.environ.get(f"AB_{name}_FLAT_RULE_MAX_ROW", saved_flat))
        if one is not None:
            tuning.ONE_UNIT_RULE = tuple(k for k in one.split(",") if k)
        if slack is not None:
            table.BOX_SLACK["log2_row_bytes"] = float(slack)
        return plan_gather(operand, ishape, idt, axis, "wrap", limits=limits)
    finally:
        tuning.LEAN_MAX_OUT = saved
        tuning.FLAT_RULE_MAX_ROW, tuning.ONE_UNIT_RULE = saved_flat, saved_one
        table.BOX_SLACK.clear()
        table.BOX_SLACK.update(saved_slack)


def launch(p):
    return (p.kind, p.key.entry if p.main else None,
            tuple(p.main.grid) if p.main else None, tuple(p.main.block) if p.main else None)


def geometries():
    for seed in SEEDS:
        path = os.path.join(ROOT, "benchmarks", f"sweep-{seed}.json.gz")
        if not os.path.exists(path):  # no records kept: the sweep's shapes, drawn again
            for i, s in enumerate(draw_shapes(500, int(seed))):
                yield (f"{seed}#{i}", s.shape, s.dtype, s.axis, s.indices, s.index_dtype,
                       None, None)
            continue
        with gzip.open(path) as f:
            for r in json.load(f)["records"]:
                yield (f"{seed}#{r['i']}", tuple(r["shape"]), r["dtype"], r["axis"],
                       tuple(r["indices"]), r["index_dtype"], r.get("best_peer"),
                       r["impl"].get(r.get("best_peer") or "", {}).get("ms"))
    for c in FIXED:
        yield (f"fixed:{c.name}", tuple(c.shape), c.dtype, c.axis, tuple(c.n_indices),
               c.index_dtype, None, None)


def main():
    limits = CUDA.limits(0)
    assert hasattr(tuning, "SHORT_CALL_OUT"), "needs lean-limit-64mib.diff (shipped since)"
    res, t0 = [], time.perf_counter()
    for name, shape, dtype, axis, ishape, idt, peer, peer_ms in geometries():
        if time.perf_counter() - t0 > BUDGET_S:
            print("budget spent: stopped before", name, flush=True)
            break
        operand = Operand.contiguous(shape, np.dtype(dtype).itemsize)
        pa = plan_of("A", operand, ishape, idt, axis, limits)
        pb = plan_of("B", operand, ishape, idt, axis, limits)
        if launch(pa) == launch(pb) or pa.main is None or pb.main is None:
            continue
        s = SweepShape(shape, dtype, axis, ishape, idt, "beyond", "loguniform")
        data = make_table(cp, s, 11)
        assert alignment(data.data.ptr) >= 256
        n = shape[axis]
        idx = make_indices(cp, s, 5)
        ref = cp.take(data, cp.where(idx < 0, idx + n, idx), axis=axis).view(cp.uint8)
        fns = {}
        for k, p in (("A", pa), ("B", pb)):
            bound = bind(p, 0, None, CUDA, data.dtype)
            fns[k] = (lambda b: lambda: execute(b, data, data.data.ptr, idx, None, None, 0))(bound)
            assert bool((fns[k]().view(cp.uint8) == ref).all()), (name, k)
        ts = {"A": [], "B": []}
        for _ in range(8):
            for k in ("A", "B"):
                ts[k] += list(time_cupy(cp, fns[k], 15))
        rec = {"name": name, "shape": shape, "dtype": dtype, "axis": axis, "indices": ishape,
               "index_dtype": idt, "out_bytes": s.out_bytes,
               "A": launch(pa), "B": launch(pb), "why_A": pa.chosen_by, "why_B": pb.chosen_by,
               "us_A": float(np.median(ts["A"])) * 1e3, "us_B": float(np.median(ts["B"])) * 1e3,
               "best_peer": peer, "best_peer_us_sweep": peer_ms * 1e3 if peer_ms else None}
        res.append(rec)
        print(name, shape, dtype, axis, ishape, idt, pa.kind, "->", pb.kind,
              "A %.2f us B %.2f us B/A speed %.3f" % (rec["us_A"], rec["us_B"],
                                                       rec["us_A"] / rec["us_B"]), flush=True)
        del data, idx, ref, fns
        cp.get_default_memory_pool().free_all_blocks()
    sp = [r["us_A"] / r["us_B"] for r in res]
    print("changed", len(res), "geomean B/A speed %.4f" % float(np.exp(np.mean(np.log(sp)))),
          "B faster by >3%:", sum(x > 1.03 for x in sp), "slower by >3%:", sum(x < 1 / 1.03 for x in sp),
          "elapsed %.0f s" % (time.perf_counter() - t0))
    with open(os.path.join(OUT, "ab.json"), "w") as f:
        json.dump({"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
