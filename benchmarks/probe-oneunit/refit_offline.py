"""The shipped table refitted under the one-unit rule, without a GPU: which plans of
ten held-out sweeps change, and how fast the changed ones ran where the A/B files
of this folder (ab-*-h100.json, an H100) timed both launches.

    python benchmarks/probe-oneunit/refit_offline.py OUT.json

OUT.json is the refitted table (fitted with the shipped table's ``meta.command``
unless it exists).  RULE: tuning.ONE_UNIT_RULE (default "flatv,flat");
MAXT: the rule holds only for tables of at most this many bytes (default 32 MiB;
a huge value: everywhere); TIE=1: a leaf also ranks, after its ranked
candidates, any candidate whose cost equals the rules' on every geometry left
where it applies (the rules pick it there), instead of leaving them to the
rules; EXTRA: more record files (comma-separated) fitted beside the shipped
command's.  The plans are made with an H200's limits.  BENCHMARKS.md, "The one-unit
rule's refit, offline".
"""
import gzip, json, math, os, shlex, sys, time
import numpy as np
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.chdir(ROOT)
import cugather.plan.table as table
import cugather.plan.tuning as tuning
import cugather.plan.gather as G
from cugather.plan.core import Operand, H200
from cugather.bench.sweep import draw_shapes
from cugather.cli.main import main as cli

MAXT = int(os.environ.get("MAXT", 32 << 20))
RULE = tuple(k for k in os.environ.get("RULE", "flatv,flat").split(",") if k)
TIE = os.environ.get("TIE", "0") == "1"
EXTRA = [f for f in os.environ.get("EXTRA", "").split(",") if f]
orig_rule = G._rule
def gated(limits, row_bytes, unit, n_outer, n_idx, axis_len, s_axis, out_align):
    tb = n_outer * axis_len * row_bytes
    saved = tuning.ONE_UNIT_RULE
    tuning.ONE_UNIT_RULE = RULE if tb <= MAXT else ()
    try:
        return orig_rule(limits, row_bytes, unit, n_outer, n_idx, axis_len, s_axis, out_align)
    finally:
        tuning.ONE_UNIT_RULE = saved

orig_rank = table._rank
def rank_tie(cost, applies, idx):
    ranked, spent = orig_rank(cost, applies, idx)
    # after the ranked ones, the rest: keep an explicit candidate whose cost equals the rules' on
    # every remaining geometry where it applies (the rules pick it there)
    rule = cost.shape[1] - 1
    rest = np.asarray(idx)
    for c in ranked:
        rest = rest[~applies[rest, c]]
    while len(rest):
        best = None
        for c in range(rule):
            if c in ranked:
                continue
            app = applies[rest, c]
            if app.sum() < min(table.MIN_SUPPORT, len(rest)):
                continue
            if np.all(np.abs(cost[rest[app], c] - cost[rest[app], rule]) < 1e-12):
                if best is None or app.sum() > best[1]:
                    best = (c, int(app.sum()))
        if best is None:
            break
        ranked.append(best[0])
        rest = rest[~applies[rest, best[0]]]
    return ranked, spent

def fit(out):
    ships = json.load(open("cugather/plan/tables/sm_90.json"))
    argv = shlex.split(ships["meta"]["command"])[3:]
    if EXTRA:
        at = argv.index("--fit") + 1
        argv[at:at] = EXTRA
    G._rule = gated
    if TIE:
        table._rank = rank_tie
    try:
        assert cli(argv + ["--out", out]) == 0
    finally:
        G._rule = orig_rule
        table._rank = orig_rank

def launch(p):
    return (p.kind, p.key.entry if p.main else None,
            tuple(p.main.grid) if p.main else None, tuple(p.main.block) if p.main else None)

def plan(path, gatedrule, shape, dtype, axis, ishape, idt):
    os.environ["CUGATHER_TUNING"] = path
    table.clear_tables()
    if gatedrule:
        G._rule = gated
    try:
        op = Operand.contiguous(shape, np.dtype(dtype).itemsize)
        return G.plan_gather(op, ishape, idt, axis, "wrap", limits=H200)
    finally:
        G._rule = orig_rule

SEEDS = "3989,8209,3433,9137,2399,5431,8713,6043,7561,7417".split(",")
def geoms():
    for seed in SEEDS:
        p = f"benchmarks/sweep-{seed}.json.gz"
        if os.path.exists(p):
            for r in json.load(gzip.open(p))["records"]:
                yield f"{seed}#{r['i']}", tuple(r["shape"]), r["dtype"], r["axis"], tuple(r["indices"]), r["index_dtype"]
        else:
            for i, s in enumerate(draw_shapes(500, int(seed))):
                yield f"{seed}#{i}", s.shape, s.dtype, s.axis, s.indices, s.index_dtype

measured = {}  # name -> launch -> microseconds, from every A/B of this folder
for f in ["rule", "rules", "both", "flatv"]:
    for c in json.load(open(f"benchmarks/probe-oneunit/ab-{f}-h100.json"))["cases"]:
        for k in "AB":
            key = tuple(tuple(x) if isinstance(x, list) else x for x in c[k])
            measured.setdefault(c["name"], {}).setdefault(key, []).append(c["us_" + k])

if __name__ == "__main__":
    out = sys.argv[1]
    if not os.path.exists(out):
        t = time.time(); fit(out); print("fit", round(time.time() - t), "s")
    ships = "cugather/plan/tables/sm_90.json"
    changed = []
    for name, shape, dtype, axis, ishape, idt in geoms():
        a = plan(ships, False, shape, dtype, axis, ishape, idt)
        b = plan(out, True, shape, dtype, axis, ishape, idt)
        if launch(a) != launch(b):
            tb = int(np.prod(shape)) * np.dtype(dtype).itemsize
            m = measured.get(name, {})
            ua, ub = m.get(launch(a)), m.get(launch(b))
            r = (np.median(ua) / np.median(ub)) if ua and ub else None
            changed.append((name, a.kind, b.kind, tb, r))
    print("changed", len(changed), "measured", sum(c[4] is not None for c in changed))
    rs = [c[4] for c in changed if c[4] is not None]
    if rs:
        print("geomean of measured", round(math.exp(np.mean(np.log(rs))), 4), "min", round(min(rs), 3))
    for c in sorted(changed, key=lambda c: (c[4] is None, c[4] or 0)):
        timed = " ".join(k[0] for k in measured.get(c[0], {}))  # the kinds an A/B timed
        print(" ", c[0], c[1], "->", c[2], "table %.1f MiB" % (c[3] / 2**20), "speed",
              None if c[4] is None else round(c[4], 3), f"({timed})")
