"""Every candidate kernel on the held-out sweeps' worst shapes, beside the
peers and the copy, on a GPU (BENCHMARKS.md, "The held-out losers, every
candidate"):

    OUT=DIR python benchmarks/probe-losers/probe.py     # writes $OUT/losers.json

For each shape (a sweep seed and the shape's index in it, drawn and filled as
``bench --sweep`` does) the sweep's own record (cugather's plan, the copy,
cupy.take, torch.index_select, jax.numpy.take) and the tuner's (every candidate
planned, checked bit for bit against cupy.take and timed: ``tune_shape``), so
that a loser shows whether a candidate already beats the peers there (the
table's choice) or none does (a kernel).  PROBE_SHAPES=SEED:INDEX,... picks
other shapes; PROBE_BUDGET_S stops starting shapes after that many seconds.
"""
import json, os, time
import cupy as cp
from cugather.bench.sweep import draw_shapes
from cugather.bench.sweep_run import run_shape
from cugather.bench import _load_peers
from cugather.bench.tune import tune_shape

OUT = os.environ.get("OUT", "/tmp")
BUDGET_S = float(os.environ.get("PROBE_BUDGET_S", "inf"))
SHAPES = os.environ.get("PROBE_SHAPES", (
    "6421:251,6421:47,6421:153,6421:438,6421:312,6421:239,6421:413,6421:82,6421:83,"
    "4481:78,4481:145,4481:337,4481:123,4481:314,5023:29,5023:154,5023:433,7753:458"))

# the sweep's own peers: JAX with 64-bit types kept (without jax_enable_x64 it takes
# float64 and int64 data as 32-bit, half the bytes)
peers = _load_peers(True)

res = {"gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "shapes": []}
t0 = time.perf_counter()
for item in SHAPES.split(","):
    if time.perf_counter() - t0 > BUDGET_S:
        break
    seed, index = (int(x) for x in item.split(":"))
    s = draw_shapes(index + 1, seed)[index]
    shape_seed = (seed * 1_000_003 + index) & ((1 << 63) - 1)
    sweep = run_shape(cp, s, shape_seed, peers)
    cp.get_default_memory_pool().free_all_blocks()
    tuned = tune_shape(cp, s, shape_seed, 0)
    cp.get_default_memory_pool().free_all_blocks()
    copy_ms = sweep["impl"].get("copy", {}).get("ms")
    peer_ms = {k: v["ms"] for k, v in sweep["impl"].items() if k not in ("copy", "cugather")}
    best_peer = min(peer_ms.values()) if peer_ms else None
    cands = sorted(tuned["times"].items(), key=lambda kv: kv[1])
    row = {"seed": seed, "index": index, "label": s.label(), "plan": sweep.get("plan"),
           "ratio": sweep.get("ratio"), "copy_ms": copy_ms, "peers_ms": peer_ms,
           "cugather_ms": sweep["impl"].get("cugather", {}).get("ms"),
           "rule": tuned.get("rule"), "candidates_ms": dict(cands),
           "errors": {**sweep.get("errors", {}), **tuned.get("errors", {})},
           "features": tuned.get("features")}
    res["shapes"].append(row)
    top = ", ".join(f"{k} {best_peer / v:.2f}x" for k, v in cands[:4]) if best_peer else ""
    print(f"{seed}:{index} {s.label()}: cugather {row['ratio']} ({row['plan'] and row['plan']['entry']}); "
          f"best candidates vs best peer: {top}", flush=True)
    with open(os.path.join(OUT, "losers.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
