"""The lean kernel's block size on short calls (BENCHMARKS.md, "Short calls:
lean against torch"):

    OUT=DIR python benchmarks/probe-launch/probe_leanblocks.py   # writes $OUT/leanblocks.json

Shapes drawn from the sweep's distribution with seed PROBE_SEED (default 1101,
a tuning seed: no held-out sweep uses it) that the planner gives to lean, with
at most 4 MiB out and tables of at most 4 GiB, up to PROBE_N of them (48).  Per
shape, interleaved over ROUNDS rounds: the plan's launch (`planned`; blocks
halved down to 64 threads while the grid has fewer blocks than SMs) against
128- and 256-thread blocks over the same units, and torch.index_select, each
one call between CUDA events on a held stream (the sweep's timer, medians of
REP), and 50 back to back.  Every launch's output checked against cupy.take.
"""
import dataclasses, json, os
import numpy as np
import cupy as cp
import torch
from cugather.bench.sweep import draw_shapes
from cugather.bench.peers import time_cupy, time_torch
from cugather.plan.core import Operand, alignment
from cugather.plan.gather import plan_gather
from cugather.runtime.binding import BoundKernel, bind
from cugather.runtime.launch import CUDA

OUT = os.environ.get("OUT", "/tmp")
SEED = int(os.environ.get("PROBE_SEED", "1101"))
N = int(os.environ.get("PROBE_N", "48"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
REP = int(os.environ.get("REP", "40"))
LIMITS = CUDA.limits(0) if os.environ.get("PROBE_DRY") is None else __import__("cugather.plan.core", fromlist=["H200"]).H200


def med_us(s):
    return float(np.median(s)) * 1000


def b50(f):
    def g():
        for _ in range(50):
            f()
    return g


def c_strides(shape, itemsize):
    out, acc = [], itemsize
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


picked = []
for s in draw_shapes(4000, seed=SEED):
    if s.out_bytes > 4 << 20 or s.table_bytes > 4 << 30 or s.out_bytes == 0:
        continue
    operand = Operand(tuple(s.shape), c_strides(s.shape, s.itemsize), s.itemsize, 256)
    try:
        p = plan_gather(operand, tuple(s.indices), s.index_dtype, s.axis, "wrap", limits=LIMITS)
    except ValueError:
        continue
    if p.main is not None and p.main.key.kind == "lean":
        picked.append(s)
    if len(picked) >= N:
        break
print(len(picked), "shapes", flush=True)
if os.environ.get("PROBE_DRY"):
    for s in picked:
        print(s.label(), s.out_bytes)
    raise SystemExit(0)

R = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "seed": SEED,
     "rounds": ROUNDS, "repeat": REP, "shapes": []}
for s in picked:
    rng = cp.random.default_rng(3)
    nbytes = s.table_bytes
    data = rng.integers(0, 255, size=nbytes, dtype=np.uint8).view(s.dtype).reshape(s.shape) \
        if nbytes < (64 << 20) else cp.ones(s.shape, s.dtype)
    idx = rng.integers(0, s.axis_len, size=s.indices, dtype=np.int64).astype(s.index_dtype)
    ref = cp.take(data, idx, axis=s.axis)
    refb = ref.view(cp.uint8)
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(data.data.ptr))
    plan = plan_gather(operand, idx.shape, str(idx.dtype), s.axis, "wrap", limits=LIMITS)
    bk = bind(plan, 0, None, CUDA, data.dtype).main
    out = cp.empty_like(ref)
    g, b = plan.main.grid, plan.main.block
    units = g[0] * b[0]  # the planned threads cover the units (grid-stride beyond the cap)
    fns = {"planned": bk}
    for bt in (128, 256):
        if bt != b[0]:
            main = dataclasses.replace(plan.main, grid=(-(-units // bt), 1, 1), block=(bt, 1, 1))
            fns[f"b{bt}"] = BoundKernel(bk.kernel, main)
    calls, bad = {}, []
    for name, k in fns.items():
        f = (lambda k=k: k.launch(cp.cuda.get_current_stream().ptr, data.data.ptr, idx.data.ptr,
                                  out.data.ptr, 0))
        out.fill(0)
        f()
        cp.cuda.Device().synchronize()
        if not bool((out.view(cp.uint8) == refb).all()):
            bad.append(name)
            continue
        calls[name] = f
    td, ti = torch.from_dlpack(data), torch.from_dlpack(idx.ravel())
    timers = {}
    for name, f in calls.items():
        timers[name] = (lambda f=f: time_cupy(cp, f, REP))
        timers[name + "_50"] = (lambda f=f: time_cupy(cp, b50(f), REP // 2))
    timers["torch"] = lambda: time_torch(torch, lambda: torch.index_select(td, s.axis, ti), REP)
    timers["torch_50"] = lambda: time_torch(torch, b50(lambda: torch.index_select(td, s.axis, ti)),
                                            REP // 2)
    per = {k: [] for k in timers}
    for _ in range(ROUNDS):
        for k, t in timers.items():
            v = med_us(t())
            per[k].append(v / 50 if k.endswith("_50") else v)
    rec = {"shape": s.as_dict(), "plan": [plan.main.key.entry, list(g), list(b)], "mismatch": bad,
           "us": {k: round(float(np.median(v)), 3) for k, v in per.items()}}
    R["shapes"].append(rec)
    print(s.label(), json.dumps({"plan": rec["plan"][1:], "us": rec["us"]}), flush=True)
    del data, idx, ref, out, td, ti
    cp.get_default_memory_pool().free_all_blocks()
    torch.cuda.empty_cache()


def geo(key, base):
    xs = [r["us"][base] / r["us"][key] for r in R["shapes"] if key in r["us"] and base in r["us"]]
    return (float(np.exp(np.mean(np.log(xs)))), len(xs), sum(x > 1.03 for x in xs),
            sum(x < 0.97 for x in xs)) if xs else None


R["summary"] = {f"{k} vs {b}": geo(k, b) for k, b in (
    ("b128", "planned"), ("b256", "planned"), ("b128_50", "planned_50"), ("b256_50", "planned_50"),
    ("planned", "torch"), ("b256", "torch"), ("b128", "torch"))}
print(json.dumps(R["summary"]), flush=True)
json.dump(R, open(os.path.join(OUT, "leanblocks.json"), "w"), indent=1)
