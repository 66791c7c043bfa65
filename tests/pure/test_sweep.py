"""The sweep without a GPU: its shape distribution (every documented constraint,
recomputed here from the raw shapes), the summary statistics and worst-shape
selection against independent NumPy computations, the "why" classifier on
constructed records, the text report and the command-line flags."""

import math
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from cugather.bench import sweep as sw
from cugather.bench.sweep_report import (LAUNCH_BOUND_MS, ratio_stats, score, summarize,
                                         sweep_chart, sweep_text, why)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@pytest.fixture(scope="module")
def many():
    return sw.draw_shapes(3000, seed=1)


def test_same_seed_same_shapes_and_prefixes():
    a = sw.draw_shapes(60, seed=7)
    assert a == sw.draw_shapes(60, seed=7)
    assert a[:25] == sw.draw_shapes(25, seed=7)  # a short sweep is the start of a long one
    assert a != sw.draw_shapes(60, seed=8)
    assert sw.draw_shapes(0) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        sw.draw_shapes(-1)


def _facts(s):
    """A shape's quantities computed here from its fields alone."""
    item = np.dtype(s.dtype).itemsize
    row = math.prod(s.shape[s.axis + 1:]) * item
    outer = math.prod(s.shape[:s.axis])
    n = math.prod(s.indices)
    out = math.prod(s.shape[:s.axis] + s.indices + s.shape[s.axis + 1:]) * item
    table = math.prod(s.shape) * item
    idx = n * np.dtype(s.index_dtype).itemsize
    return dict(item=item, row=row, outer=outer, n=n, out=out, table=table, idx=idx)


def test_every_constraint_holds(many):
    for s in many:
        f = _facts(s)
        assert 1 <= len(s.shape) <= 4 and 0 <= s.axis < len(s.shape), s
        assert all(isinstance(d, int) and d >= 1 for d in s.shape + s.indices), s
        assert f["item"] in (1, 2, 4, 8, 16) and s.index_dtype in ("int32", "int64"), s
        assert 1 <= f["row"] <= 64 * KiB, s
        assert 1 <= f["n"] <= 16 * MiB and len(s.indices) <= 2, s
        assert 4 * KiB <= f["out"] <= GiB, s
        assert s.shape[s.axis] < 2 ** 31, s
        if s.table_class == "l2":
            assert f["table"] <= 40 * MiB, s
        else:
            assert s.table_class == "beyond" and 200 * MiB <= f["table"] <= 16 * GiB, s
        # table, indices twice, six output-sized arrays
        assert f["table"] + 2 * f["idx"] + 6 * f["out"] <= sw.MEMORY_CAP <= 32 * GiB, s
        assert (s.row_bytes, s.out_bytes, s.table_bytes, s.moved_bytes) == (
            f["row"], f["out"], f["table"], 2 * f["out"] + f["idx"]), s
        if s.row_class == "element":
            assert f["row"] == f["item"] and s.axis == len(s.shape) - 1, s
        if s.row_class == "awkward":
            assert f["row"] in sw.AWKWARD_ROW_BYTES and f["row"] % 16, s
        assert sw.violations(s) == []


def test_the_distribution_reaches_everything(many):
    facts = [_facts(s) for s in many]
    assert Counter(len(s.shape) for s in many).keys() == {1, 2, 3, 4}
    assert {np.dtype(s.dtype).name for s in many} == {
        "bool", "uint8", "int8", "float16", "int16", "float32", "int32", "float64", "int64",
        "complex128"}
    assert {s.index_dtype for s in many} == {"int32", "int64"}
    assert {len(s.indices) for s in many} == {0, 1, 2}
    where = Counter("first" if s.axis == 0 else "last" if s.axis == len(s.shape) - 1 else "mid"
                    for s in many)
    assert set(where) == {"first", "mid", "last"} and min(where.values()) > 100, where
    rows = [f["row"] for f in facts]
    assert min(rows) == 1 and max(rows) > 32 * KiB
    assert {3, 5, 6, 12, 20, 24, 40, 100, 1000} <= set(rows)
    # a fixed share from the awkward list, more odd sizes from the log-uniform rows
    assert sum(s.row_class == "awkward" for s in many) / len(many) == pytest.approx(0.35, abs=0.04)
    odd = sum(r % 16 != 0 and r not in (1, 2, 4, 8) for r in rows) / len(rows)
    assert odd > 0.4, odd
    assert sum(r % 16 == 0 for r in rows) / len(rows) > 0.15
    outs = [f["out"] for f in facts]
    assert min(outs) < 16 * KiB and max(outs) > 256 * MiB
    ns = [f["n"] for f in facts]
    assert min(ns) == 1 and max(ns) > 4 * MiB
    tables = Counter(s.table_class for s in many)
    assert tables["l2"] / len(many) == pytest.approx(0.5, abs=0.05)
    assert max(f["table"] for f in facts) > 4 * GiB
    assert min(f["table"] for f in facts if f["table"] > 40 * MiB) >= 200 * MiB


def test_violations_names_each_broken_constraint():
    ok = sw.SweepShape((1000, 16), "float32", 0, (100,), "int64", "l2", "loguniform")
    assert sw.violations(ok) == []
    small = sw.SweepShape((1000, 4), "float32", 0, (10,), "int64", "l2", "loguniform")
    assert any("output 160 B" in v for v in sw.violations(small))
    fat = sw.SweepShape((100000, 1024), "float32", 0, (1000,), "int64", "l2", "loguniform")
    assert any("above 41943040 for an L2 table" in v for v in sw.violations(fat))
    thin = sw.SweepShape((1000, 1024), "float32", 0, (1000,), "int64", "beyond", "loguniform")
    assert any("outside [209715200" in v for v in sw.violations(thin))
    long_axis = sw.SweepShape((2 ** 31,), "int8", 0, (5000,), "int64", "beyond", "element")
    assert any("axis length" in v for v in sw.violations(long_axis))


# ---------------------------------------------------------------- statistics
def _rec(i, ratio, kind="rows", peer="torch.index_select", mismatch=(), errors=None):
    return {"i": i, "ratio": ratio, "plan": {"kind": kind, "entry": f"cugather_{kind}"},
            "best_peer": peer, "mismatch": list(mismatch), "errors": errors or {}}


def test_ratio_stats_against_numpy():
    rs = [1.0, 0.9, 0.5, 2.5, 1.7, 0.899, 1.2]
    st = ratio_stats(rs)
    a = np.array(rs)
    assert st["n"] == 7
    assert st["share_ge_1"] == pytest.approx(np.mean(a >= 1.0)) == pytest.approx(4 / 7)
    assert st["share_ge_0_9"] == pytest.approx(np.mean(a >= 0.9)) == pytest.approx(5 / 7)
    assert st["min"] == 0.5
    assert st["geomean"] == pytest.approx(float(np.exp(np.log(a).mean())))
    assert st["median"] == pytest.approx(float(np.median(a)))
    assert ratio_stats([3.0, 1.0])["median"] == 2.0
    assert ratio_stats([])["geomean"] is None


def test_summarize_picks_the_worst_and_counts():
    rng = np.random.default_rng(5)
    ratios = np.exp(rng.normal(0.2, 0.5, 40))
    kinds = ["rows", "scalar", "inner", "chunks"]
    recs = [_rec(i, float(r), kinds[i % 4], ["cupy.take", "torch.index_select"][i % 2])
            for i, r in enumerate(ratios)]
    recs.append(dict(_rec(40, None), errors={"cugather": "MemoryError: out of memory"}))
    recs[3]["mismatch"] = ["jax.numpy.take"]
    s = summarize(recs)
    assert s["shapes"] == 41 and s["n"] == 40
    assert s["worst"] == [int(i) for i in np.argsort(ratios)[:10]]
    assert s["min"] == pytest.approx(ratios.min())
    assert s["geomean"] == pytest.approx(float(np.exp(np.log(ratios).mean())))
    assert s["share_ge_1"] == pytest.approx(float(np.mean(ratios >= 1)))
    for j, k in enumerate(kinds):
        mine = ratios[j::4]
        assert s["per_kind"][k]["n"] == 10
        assert s["per_kind"][k]["min"] == pytest.approx(mine.min())
    assert s["best_peer_counts"] == {"cupy.take": 20, "torch.index_select": 20}
    assert s["mismatches"] == [[3, "jax.numpy.take"]]
    assert s["errors"] == [[40, "cugather", "MemoryError: out of memory"]]
    assert summarize(recs, worst_count=3)["worst"] == s["worst"][:3]


def test_score_finds_the_best_peer_and_the_ceiling():
    rec = {"impl": {"copy": {"gbps": 4000.0}, "cugather": {"gbps": 3000.0},
                    "cupy.take": {"gbps": 1000.0}, "torch.index_select": {"gbps": 2400.0},
                    "jax.numpy.take": {"gbps": 2000.0}},
           "checked": {"cupy.take": True, "torch.index_select": False, "jax.numpy.take": True}}
    score(rec)
    assert rec["best_peer"] == "torch.index_select"
    assert rec["ratio"] == pytest.approx(1.25)
    assert rec["impl"]["cugather"]["of_ceiling"] == pytest.approx(0.75)
    assert rec["impl"]["jax.numpy.take"]["of_ceiling"] == pytest.approx(0.5)
    assert rec["mismatch"] == ["torch.index_select"]
    alone = score({"impl": {"copy": {"gbps": 1.0}, "cugather": {"gbps": 1.0}}, "checked": {}})
    assert alone["ratio"] is None and alone["best_peer"] is None


# ---------------------------------------------------------------- why
def _why_rec(kind="rows", unit=16, row=512, table=8 * MiB, out=64 * MiB, cg_ms=1.0,
             peer_ms=0.8, grid=(4096, 1, 1), itemsize=4, **extra):
    # copy at 0.25 ms moves the bytes cugather moves in 1 ms: 4000 GB/s vs 1000 GB/s
    impl = {"copy": {"gbps": 4000.0, "ms": 0.25},
            "cugather": {"ms": cg_ms, "gbps": 1000.0 / cg_ms},
            "torch.index_select": {"ms": peer_ms, "gbps": 1000.0 / peer_ms},
            "cupy.take": {"ms": 10 * peer_ms, "gbps": 100.0 / peer_ms}}
    rec = {"impl": impl, "checked": {"torch.index_select": True}, "errors": {},
           "plan": {"kind": kind, "unit": unit, "grid": list(grid), "entry": "e"},
           "row_bytes": row, "table_bytes": table, "out_bytes": out, "itemsize": itemsize,
           "axis_len": 1000, "n_indices": 5000}
    rec.update(extra)
    return score(rec)


def test_why_launch_bound():
    r = _why_rec(cg_ms=0.02, peer_ms=LAUNCH_BOUND_MS * 0.7)
    assert why(r).startswith("launch-bound: best peer 7.0 us, cugather 20.0 us")
    assert not why(_why_rec(cg_ms=0.02, peer_ms=LAUNCH_BOUND_MS * 1.5)).startswith("launch")


def test_why_awkward_rows_and_units():
    assert "row bytes not a multiple of 16 (24 B, unit 8 B)" in why(_why_rec(unit=8, row=24))
    assert "row bytes not a multiple of 16" not in why(_why_rec(unit=16, row=48))
    assert "unit 4 B on 64 B rows" in why(_why_rec(unit=4, row=64))


def test_why_kernel_kinds():
    assert why(_why_rec(kind="scalar", unit=4, row=4, table=GiB)).startswith(
        "scalar picks: one 4 B unit per index, random 32 B sectors from DRAM")
    assert "from DRAM" not in why(_why_rec(kind="scalar", unit=4, row=4, table=MiB))
    assert "multiple of 16" not in why(_why_rec(kind="scalar", unit=4, row=4, table=MiB))
    assert why(_why_rec(kind="inner", unit=2, row=2)).startswith(
        "staging: a 1.95 KiB axis row per block for 5000 picks")
    assert why(_why_rec(kind="strided", unit=2, row=6)).startswith("strided fallback")
    assert why(_why_rec(kind="window", unit=16, row=40)).startswith("window: 40 B rows")


def test_why_dram_bursts_blocks_and_the_plain_case():
    assert "40 B rows from a table larger than L2 (1 GiB)" in why(
        _why_rec(unit=8, row=40, table=GiB))
    assert "larger than L2" not in why(_why_rec(unit=8, row=40, table=MiB))
    assert "larger than L2" not in why(_why_rec(unit=8, row=40, table=GiB), {"l2_bytes": 2 * GiB})
    assert "12 blocks for 132 SMs" in why(_why_rec(grid=(6, 2, 1)))
    assert "12 blocks for 200 SMs" in why(_why_rec(grid=(6, 2, 1)), {"sm_count": 200})
    assert why(_why_rec()) == "cugather 25% of copy, torch.index_select 31%"


def test_why_puts_wrong_results_and_failures_first():
    r = _why_rec(cg_ms=0.02, peer_ms=0.001)
    r["checked"]["cupy.take"] = False
    score(r)
    assert why(r) == "WRONG RESULT: differs from cugather in cupy.take"
    failed = {"errors": {"cugather": "OutOfMemoryError: 1 GB"}, "impl": {}, "row_bytes": 4,
              "table_bytes": 4, "itemsize": 4}
    assert why(failed) == "cugather failed: OutOfMemoryError: 1 GB"
    failed["errors"] = {"setup": "OutOfMemoryError: 16 GB"}
    assert why(failed) == "setup failed: OutOfMemoryError: 16 GB"


# ---------------------------------------------------------------- report
def _results(recs):
    return {"gpu": "G", "seed": 4, "elapsed_s": 12.0, "jax_compile_s": 3.0, "notes": ["n1"],
            "records": recs, "summary": summarize(recs)}


def _full_rec(i, ratio, kind="rows"):
    r = _rec(i, ratio, kind)
    r.update(row_bytes=24, out_bytes=3 * MiB, table_bytes=GiB, shape=[10, 6], dtype="float32",
             axis=0, indices=[7], index_dtype="int32", why=f"because {i}")
    return r


def test_sweep_text_lists_summary_and_worst():
    recs = [_full_rec(i, r) for i, r in enumerate([1.5, 0.4, 2.0, 0.95, 1.0])]
    text = sweep_text(_results(recs))
    assert "sweep: 5 shapes (seed 4) on G" in text
    assert ">= 1.0x best peer     60.0%" in text and ">= 0.9x best peer     80.0%" in text
    assert "minimum               0.40x" in text
    geomean = math.exp(np.log([1.5, 0.4, 2.0, 0.95, 1.0]).mean())
    assert f"geometric mean        {geomean:.2f}x" in text
    assert "note: n1" in text and "every result bit-exact" in text
    worst = [ln for ln in text.splitlines() if ln.startswith("  #")]
    assert [ln.split()[0] for ln in worst] == ["#1", "#3", "#4", "#0", "#2"]
    assert "(10x6) float32 axis 0, idx (7) int32" in worst[0] and "because 1" in text


def test_the_worst_shapes_say_whether_the_table_or_the_rules_chose_the_kernel(monkeypatch):
    """Each worst shape names what chose its kernel: the table's leaf, or the rules
    and why the table left the geometry to them (from the planner's own words)."""
    from cugather.bench.sweep_report import chooser
    from cugather.plan import table
    from cugather.plan.core import DeviceLimits, Operand
    from cugather.plan.gather import plan_gather

    monkeypatch.delenv("CUGATHER_TUNING", raising=False)
    table.clear_tables()

    def by(shape, itemsize, picks, axis, arch="sm_90", idt="int64"):
        p = plan_gather(Operand.contiguous(shape, itemsize), (picks,), idt, axis, "wrap",
                        limits=DeviceLimits(arch=arch))
        return chooser(p.chosen_by)

    tab = table.table_for("sm_90")
    feats = table.features(560, 16, 1, 642685, 283, 4)
    assert tab.leaf_of(feats)["choice"] == "rule"
    leaf = tab.leaf_of(feats)["leaf"]
    assert by((283, 1, 5, 7), 16, 642685, 0, idt="int32") == f"rules: its leaf {leaf} keeps them"
    feats = table.features(512, 16, 1, 4096, 1000000, 8)
    choice = tab.choose(feats)
    assert by((1000000, 128), 4, 4096, 0) == f"sm_90 table leaf {choice.leaf}"
    assert by((16, 268, 3), 2, 1215976, 1, arch="sm_80") == "rules"
    assert chooser("") == ""
    assert chooser("rule: rows that are not contiguous") == "rules"
    import cugather
    from cugather.bench.sweep_run import _plan

    rec = _plan(cugather.GatherOp(axis=0, mode="wrap"), ((283, 1, 5, 7), "complex128"),
                ((642685,), "int32"))  # the sweep's record of a plan, without a GPU
    assert chooser(rec["chosen_by"]) == f"rules: its leaf {leaf} keeps them"
    recs = [_full_rec(i, r) for i, r in enumerate([1.5, 0.4])]
    recs[1]["plan"]["chosen_by"] = "sm_90 tuning table, leaf 7 (flat): log2_rows <= 3"
    text = sweep_text(_results(recs))
    assert "cugather_rows (sm_90 table leaf 7): because 1" in text
    assert "cugather_rows: because 0" in text  # a record without chosen_by
    table.clear_tables()


def test_sweep_chart(tmp_path):
    pytest.importorskip("matplotlib")
    recs = [_full_rec(i, r, k) for i, (r, k) in enumerate([(1.5, "rows"), (0.4, "scalar")])]
    path = sweep_chart(_results(recs), str(tmp_path / "s.png"))
    assert path and (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------- command line
def _cli(*args):
    return subprocess.run([sys.executable, "-m", "cugather", "bench", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_flags():
    p = _cli("--help")
    assert p.returncode == 0 and "--sweep N" in p.stdout and "--seed SEED" in p.stdout
    for bad in ("0", "-3", "x"):
        p = _cli("--sweep", bad)
        assert p.returncode == 2 and "N must be a positive integer" in p.stderr


def test_cli_without_gpu_says_so():
    from cugather.env import no_gpu_reason

    if no_gpu_reason() is None:
        pytest.skip("a GPU is present: the message is for machines without one")
    p = _cli("--sweep", "5")
    assert p.returncode == 2 and "cugather bench needs a CUDA GPU" in p.stderr
