"""Tuning tables: fitting, validation, where they are found, and the planner's use
of them (cugather/plan/table.py, plan_gather).  Pure: no GPU."""

from __future__ import annotations

import json
import math
import os
import re
import warnings

import numpy as np
import pytest

from cugather.plan import table as tt
from cugather.plan.core import DeviceLimits, Operand
from cugather.plan.gather import BCAST_KINDS, plan_gather

SM90 = DeviceLimits(arch="sm_90")


@pytest.fixture(autouse=True)
def _fresh_tables(monkeypatch, tmp_path):
    """No user table and no CUGATHER_TUNING unless a test sets one; forget tables read."""
    monkeypatch.delenv("CUGATHER_TUNING", raising=False)
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cache"))
    tt.clear_tables()
    yield
    tt.clear_tables()


def _record(rng, best_of):
    """A synthetic timed geometry: times of every candidate, the fastest chosen by
    ``best_of(features)``, the rules always picking rows/1."""
    feats = tt.features(int(rng.integers(1, 4096)), int(rng.choice([1, 2, 4, 8, 16])),
                        int(rng.integers(1, 1000)), int(rng.integers(1, 1 << 20)),
                        int(rng.integers(1, 1 << 16)), int(rng.choice([4, 8])))
    best = best_of(feats)
    # 64 draws whatever the number of candidates: the next record's features stay
    noise = rng.random(64)
    times = {c[0]: 1.0 + noise[i] * 0.05 for i, c in enumerate(tt.CANDIDATES)}
    times = {k: v * (1.0 if k == best else 2.0) for k, v in times.items()}
    return {"features": feats, "times": times, "rule": "rows/1"}


def _staging_pays(r):
    """``r`` with enough picks that staging an axis row pays (tt.declines)."""
    f = r["features"]
    f["log2_picks"] = max(f["log2_picks"], f["log2_axis_len"] + f["log2_row_bytes"])
    return r


def _synthetic(n, seed=1):
    rng = np.random.default_rng(seed)
    rule = lambda f: "window" if f["row_mod16"] and f["log2_row_bytes"] < 9 else "rows/4"  # noqa: E731
    return [_record(rng, rule) for _ in range(n)], rule


def _table_dict(tree, arch="sm_90", ranges=None):
    ranges = ranges or {f: [-1e9, 1e9] for f in tt.FEATURES}
    return {"format": tt.FORMAT, "meta": {"arch": arch}, "ranges": ranges, "tree": tree}


# ---------------------------------------------------------------- fitting
def test_fit_recovers_the_rule_that_made_the_timings_on_unseen_geometries():
    records, rule = _synthetic(600)
    table = tt.fit(records, {"arch": "sm_90"}, min_leaf=10)
    held, _ = _synthetic(300, seed=2)
    chosen = [table.choose(r["features"]) for r in held]
    outside = sum(c is None for c in chosen)  # beyond the fitted ranges: the rules decide
    right = sum(c is not None and c.label == rule(r["features"]) for c, r in zip(chosen, held))
    assert outside <= 0.06 * len(held)
    assert right / (len(held) - outside) >= 0.97
    used = set()

    def walk(node):
        if "choice" not in node:
            used.add(node["feature"])
            walk(node["le"])
            walk(node["gt"])
    walk(table.tree)
    assert used <= {"row_mod16", "log2_row_bytes"} and used  # no spurious splits


def test_a_leaf_keeps_the_rules_where_they_are_already_best():
    rng = np.random.default_rng(3)
    records = [_record(rng, lambda f: "rows/1") for _ in range(100)]
    table = tt.fit(records, {"arch": "sm_90"})
    assert table.choose(records[0]["features"]) is None  # "rule": the planner's own choice
    assert [leaf["choice"] for leaf in table.leaves()] == ["rule"]


def test_a_candidate_that_applies_to_few_geometries_leads_and_the_next_takes_the_rest():
    # slab is fastest where it applies (a tenth of the geometries); a leaf naming
    # it alone would send the others to the rules, which here are 2x slower: the
    # leaf ranks rows/4 after it instead.
    rng = np.random.default_rng(4)
    records = []
    for k in range(200):
        r = _staging_pays(_record(rng, lambda f: "rows/4"))
        if k % 10 == 0:
            r["times"]["slab"] = 0.5
        else:
            r["times"].pop("slab")
        records.append(r)
    table = tt.fit(records, {"arch": "sm_90"})
    choice = table.choose(records[1]["features"])
    assert [c[0] for c in choice.ranked] == ["slab", "rows/4"]
    assert all(leaf["mean_slowdown"] < 1.04 for leaf in table.leaves())


def test_a_candidate_a_leaf_saw_too_rarely_is_not_ranked():
    # slab applies to 3 geometries of one leaf (fewer than MIN_SUPPORT) and is
    # fastest there: that is no evidence for the other geometries it applies to.
    rng = np.random.default_rng(6)
    records = []
    for k in range(100):
        r = _staging_pays(_record(rng, lambda f: "rows/4"))
        if k < tt.MIN_SUPPORT - 1:
            r["times"]["slab"] = 0.1
        else:
            r["times"].pop("slab")
        records.append(r)
    (leaf,) = tt.fit(records, {"arch": "sm_90"}, min_gain=1e9).leaves()
    assert leaf["choice"] == "rows/4" and "slab" not in leaf.get("then", [])
    records[tt.MIN_SUPPORT - 1]["times"]["slab"] = 0.1    # now it is seen often enough
    (leaf,) = tt.fit(records, {"arch": "sm_90"}, min_gain=1e9).leaves()
    assert (leaf["choice"], leaf["then"]) == ("slab", ["rows/4"])


def test_staging_is_declined_where_the_picks_touch_fewer_bytes_than_the_row():
    """inner and slab read the whole axis row: with fewer picks than the row has
    32-byte sectors the fit treats them as not applying, and the planner skips
    them where a leaf names them."""
    few = tt.features(2, 2, 50000, 93, 3586, 4)       # 93 picks of a 7172-byte row
    many = tt.features(2, 2, 50000, 4000, 3586, 4)
    assert tt.declines("slab", few) and tt.declines("inner", few)
    assert not tt.declines("slab", many) and not tt.declines("rows/1", few)
    leaf = _one_leaf_declined_on_half("slab", few, many, "rows/2", seed=7)
    assert (leaf["choice"], leaf["then"]) == ("slab", ["rows/2"])


def _one_leaf_declined_on_half(label, declined, kept, fastest_else, seed):
    """The leaf of a one-leaf fit where ``label`` is fastest everywhere but
    declined on half the geometries (features ``declined``), ``fastest_else``
    the fastest of the rest."""
    rng = np.random.default_rng(seed)
    records = []
    for k in range(100):
        r = _record(rng, lambda f: fastest_else)
        r["features"] = declined if k % 2 else kept
        r["times"][label] = 0.1
        records.append(r)
    (leaf,) = tt.fit(records, {"arch": "sm_90"}, min_gain=1e9).leaves()
    return leaf


def test_pack_is_declined_for_rows_of_wide_units(monkeypatch, tmp_path):
    """pack merges rows of 1- and 2-byte units into 16-byte chunks; a row with a
    4- or 8-byte unit is declined, in the fit and in the planner: a leaf naming
    pack plans the next kernel it ranks there."""
    eight = tt.features(8, 8, 4, 2307, 6, 4)      # one float64 per row
    seven = tt.features(7, 1, 202, 168986, 248, 4)  # 7 int8 per row
    assert tt.declines("pack", eight) and not tt.declines("pack", seven)
    assert not tt.declines("flat", eight)
    leaf = _one_leaf_declined_on_half("pack", eight, seven, "flat", seed=11)
    assert (leaf["choice"], leaf["then"]) == ("pack", ["flat"])
    monkeypatch.setenv("CUGATHER_TUNING", str(_write(
        tmp_path / "t.json", {"choice": "pack", "leaf": 0, "then": ["flat"]})))
    p = _plan((2, 2, 14024, 6), "float64", 3, 2307, index_dtype="int32")
    assert p.kind == "flat" and "as pack does not apply" in p.chosen_by
    p = _plan((202, 1, 248, 7), "int8", 2, 168986, index_dtype="int32")
    assert p.kind == "pack"


def test_a_leaf_ranks_by_where_each_candidate_applies():
    """Three families of geometries, each with its own fastest candidate, where
    the candidates apply to nested sets: the leaf's list is the order in which
    each one, taken where it applies, costs least; the rules only where none
    beats them."""
    rng = np.random.default_rng(5)
    records = []
    for k in range(400):
        # family 0 twice as common: ranked first, inner then saves more than window
        # (with equal families the greedy look-ahead ties the two orders)
        fam = (0, 0, 1, 2)[k % 4]
        r = _staging_pays(_record(rng, lambda f: ("inner", "window", "rows/2")[fam]))
        if fam != 0:
            r["times"].pop("inner")      # inner applies to family 0 alone
        if fam == 2:
            r["times"].pop("window")     # window to families 0 and 1
        records.append(r)
    table = tt.fit(records, {"arch": "sm_90"}, min_gain=1e9)   # one leaf
    (leaf,) = table.leaves()
    assert (leaf["choice"], leaf["then"]) == ("inner", ["window", "rows/2"])
    assert leaf["mean_slowdown"] < 1.04 < 1.9 < leaf["rule_slowdown"]
    # the same families where rows/1 (the rules) is as fast as anything on family 2
    for r in records[3::4]:
        r["times"]["rows/1"] = min(r["times"].values())
    (leaf,) = tt.fit(records, {"arch": "sm_90"}, min_gain=1e9).leaves()
    assert (leaf["choice"], leaf["then"]) == ("inner", ["window"])


def test_the_fitted_table_round_trips_through_json_and_validation():
    records, _ = _synthetic(200)
    table = tt.fit(records, {"arch": "sm_90", "device": "test"})
    again = tt.TuningTable.from_dict(json.loads(json.dumps(table.to_dict())))
    for r in records[:50]:
        a, b = table.choose(r["features"]), again.choose(r["features"])
        assert (a and (a.ranked, a.leaf)) == (b and (b.ranked, b.leaf))
    assert table.meta["geometries"] == 200


def _leaf(table, feats):
    node = table.tree
    while "choice" not in node:
        node = node["le"] if feats[node["feature"]] <= node["threshold"] else node["gt"]
    return node


def test_a_fitted_leaf_stores_the_row_sizes_and_units_of_its_geometries():
    records, _ = _synthetic(600)
    table = tt.fit(records, {"arch": "sm_90"}, min_leaf=10)
    members = {}
    for r in records:
        members.setdefault(_leaf(table, r["features"])["leaf"], []).append(r["features"])
    ranking = 0
    for leaf in table.leaves():
        feats = members[leaf["leaf"]]
        if leaf["choice"] == "rule":
            assert "box" not in leaf
            continue
        ranking += 1
        assert leaf["box"] == {f: [min(x[f] for x in feats), max(x[f] for x in feats)]
                               for f in tt.BOX_FEATURES}
        # every geometry a leaf was fitted on lies inside its box
        assert all(table.choose(x) is not None for x in feats)
    assert ranking >= 2
    rng = np.random.default_rng(9)
    tiles = lambda f: "tiles" if f["log2_cols"] >= 2 else "elements"  # noqa: E731
    elements = tt.fit([_elements_record(rng, tiles) for _ in range(120)], {"arch": "sm_90"},
                      min_leaf=10, spec=tt.ELEMENTS)
    assert any(leaf["choice"] != "rule" for leaf in elements.leaves())
    assert not any("box" in leaf for leaf in elements.leaves())  # no box for GatherElements


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(format=99), "format must be"),
    (lambda d: d["meta"].update(arch=90), "meta.arch"),
    (lambda d: d["ranges"].pop("unit"), "ranges must give"),
    (lambda d: d["ranges"].update(unit=[3, 1]), "ranges.unit"),
    (lambda d: d.update(tree={"choice": "fastest", "leaf": 0}), "unknown candidate"),
    (lambda d: d.update(tree={"choice": "rows/4"}), "integer 'leaf'"),
    (lambda d: d.update(tree={"feature": "colour", "threshold": 1, "le": {}, "gt": {}}),
     "a split names"),
    (lambda d: d.update(tree={"feature": "unit", "threshold": float("nan"),
                              "le": {"choice": "rule", "leaf": 0},
                              "gt": {"choice": "rule", "leaf": 1}}), "finite threshold"),
    (lambda d: d.update(tree=[]), "JSON object"),
    (lambda d: d["tree"].update(then=["fastest"]), "'then' lists"),
    (lambda d: d["tree"].update(then=["rows/4"]), "'then' lists"),
    (lambda d: d["tree"].update(then=["pack", "pack"]), "'then' lists"),
    (lambda d: d["tree"].update(then="pack"), "'then' lists"),
    (lambda d: d["tree"].update(choice="rule", then=["pack"]), "'then' lists"),
    (lambda d: d["tree"].update(box={"colour": [0, 1]}), "'box' gives"),
    (lambda d: d["tree"].update(box={"unit": [2, 1]}), "'box' gives"),
    (lambda d: d["tree"].update(box={"unit": [0, "16"]}), "'box' gives"),
    (lambda d: d["tree"].update(box={"unit": [0, float("inf")]}), "'box' gives"),
    (lambda d: d["tree"].update(box=[1, 2]), "'box' gives"),
])
def test_a_bad_table_is_refused_with_the_reason(mutate, match):
    d = _table_dict({"choice": "rows/4", "leaf": 0})
    mutate(d)
    with pytest.raises(tt.TableError, match=match):
        tt.TuningTable.from_dict(d)


def test_a_deep_tree_is_refused():
    node = {"choice": "rule", "leaf": 0}
    for _ in range(40):
        node = {"feature": "unit", "threshold": 1.0, "le": node, "gt": {"choice": "rule",
                                                                         "leaf": 1}}
    with pytest.raises(tt.TableError, match="deeper"):
        tt.TuningTable.from_dict(_table_dict(node))


# ---------------------------------------------------------------- where tables come from
def _write(path, tree, arch="sm_90", ranges=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_table_dict(tree, arch, ranges)))
    return path


def test_cugather_tuning_names_the_table(monkeypatch, tmp_path):
    p = _write(tmp_path / "mine.json", {"choice": "strided", "leaf": 0})
    monkeypatch.setenv("CUGATHER_TUNING", str(p))
    table = tt.table_for("sm_90")
    assert table is not None and table.source == str(p)


def test_the_kernel_cache_folder_holds_the_user_table(tmp_path):
    p = _write(tmp_path / "cache" / "cugather" / "tuning" / "sm_80.json",
               {"choice": "chunks", "leaf": 0}, arch="sm_80")
    assert tt.user_table_path("sm_80") == p
    assert tt.table_for("sm_80").source == str(p)


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 1}), "\xff\xfe"])
def test_a_damaged_table_is_ignored_with_a_warning(monkeypatch, tmp_path, content):
    p = tmp_path / "bad.json"
    p.write_bytes(content.encode("utf-8", "surrogateescape") if content != "\xff\xfe"
                  else b"\xff\xfe")
    monkeypatch.setenv("CUGATHER_TUNING", str(p))
    with pytest.warns(RuntimeWarning, match="ignores the tuning table"):
        table = tt.table_for("sm_75")
    assert table is None  # no shipped sm_75 table: the rules decide


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_or_an_oversized_file_is_refused_without_blocking(monkeypatch, tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # open() on it would wait for a writer forever
    monkeypatch.setenv("CUGATHER_TUNING", str(fifo))
    with pytest.warns(RuntimeWarning, match="not a regular file"):
        assert tt.table_for("sm_75") is None
    tt.clear_tables()
    big = tmp_path / "big.json"
    big.write_bytes(b" " * ((8 << 20) + 1))
    monkeypatch.setenv("CUGATHER_TUNING", str(big))
    with pytest.warns(RuntimeWarning, match="more than a table"):
        assert tt.table_for("sm_75") is None


def test_a_missing_named_table_warns_and_a_table_of_another_gpu_is_not_used(monkeypatch,
                                                                             tmp_path):
    monkeypatch.setenv("CUGATHER_TUNING", str(tmp_path / "nowhere.json"))
    with pytest.warns(RuntimeWarning, match="ignores the tuning table"):
        tt.table_for("sm_75")
    tt.clear_tables()
    p = _write(tmp_path / "a100.json", {"choice": "strided", "leaf": 0}, arch="sm_80")
    monkeypatch.setenv("CUGATHER_TUNING", str(p))
    with pytest.warns(RuntimeWarning, match="fitted on sm_80"):
        assert tt.table_for("sm_75") is None


def test_the_shipped_tables_validate():
    shipped = sorted(tt.SHIPPED.glob("*.json"))
    for path in shipped:
        table = tt.load_table(path)
        assert path.name == table.spec.file_name(table.arch)
        assert table.meta.get("geometries", 0) >= (2000 if table.op == "gather" else 1000), path
    names = {p.name for p in shipped}
    assert "sm_90.json" in names, "the H200's Gather table ships with the package"
    assert "sm_90.elements.json" in names, "the H200's GatherElements table ships too"


def test_the_shipped_gather_table_fits_again_from_its_records(tmp_path, monkeypatch):
    """The shipped Gather table's ``meta.command``, run on the records it names,
    gives the same tree: a table ships only if it can be fitted again.  (The
    GatherElements table predates the fitter's later rules and range slack.)"""
    import shlex
    from pathlib import Path
    from cugather.cli.main import main

    root = Path(__file__).resolve().parents[2]
    ships = json.loads((tt.SHIPPED / "sm_90.json").read_text())
    argv = shlex.split(ships["meta"]["command"])
    assert argv[:3] == ["python", "-m", "cugather"], argv
    named = [a for a in argv[3:] if a.startswith("benchmarks/")]
    missing = [a for a in named if not (root / a).is_file()]
    if missing and not (root / "benchmarks").is_dir():
        pytest.skip("benchmarks/ (the tuning records) is not in this tree")
    assert not missing, f"sm_90.json names files the repository lacks: {missing}"
    monkeypatch.chdir(root)
    out = tmp_path / "sm_90.json"
    assert main(argv[3:] + ["--out", str(out)]) == 0
    again = json.loads(out.read_text())
    assert again["ranges"] == ships["ranges"]
    assert again["tree"] == ships["tree"]


# ---------------------------------------------------------------- the planner
def _plan(shape, dtype, axis, n_idx, limits=SM90, index_dtype="int64"):
    itemsize = np.dtype(dtype).itemsize
    return plan_gather(Operand.contiguous(shape, itemsize), (n_idx,), index_dtype, axis, "wrap",
                       limits=limits)


def test_the_planner_takes_the_table_s_choice_and_says_so(monkeypatch, tmp_path):
    tree = {"feature": "log2_row_bytes", "threshold": 2.5,
            "le": {"choice": "slab", "leaf": 0}, "gt": {"choice": "strided", "leaf": 1}}
    monkeypatch.setenv("CUGATHER_TUNING", str(_write(tmp_path / "t.json", tree)))
    p = _plan((64, 100), "float32", 1, 5000)          # 4-byte rows: leaf 0
    assert p.kind == "slab"
    assert p.chosen_by.startswith("sm_90 tuning table, leaf 0 (slab): log2_row_bytes <= 2.5")
    assert "chosen by   sm_90 tuning table, leaf 0" in p.describe()
    p = _plan((1000, 16), "float32", 0, 5000)         # 64-byte rows: leaf 1
    assert p.kind == "strided" and "leaf 1 (strided)" in p.chosen_by


def test_a_leaf_speaks_only_for_the_row_sizes_and_units_it_was_fitted_on(monkeypatch, tmp_path):
    tree = {"choice": "rows/2", "leaf": 4,
            "box": {"log2_row_bytes": [1.5, 4.2], "unit": [1.0, 2.0]}}
    monkeypatch.setenv("CUGATHER_TUNING", str(_write(tmp_path / "t.json", tree)))
    p = _plan((1000, 10), "uint8", 0, 5000)           # 10-byte rows of 2-byte units: inside
    assert (p.kind, p.main.fields["row_unroll"]) == ("rows", 2)
    assert p.chosen_by.startswith("sm_90 tuning table, leaf 4 (rows/2)")
    p = _plan((1000, 75), "uint8", 0, 50000)          # 75-byte rows: beyond the leaf's rows
    assert p.kind == "window"
    assert p.chosen_by.endswith("(the sm_90 tuning table leaves this geometry to them: "
                                "log2_row_bytes 6.22882 outside the 1.5 to 4.2 of the geometries "
                                "its leaf 4 was fitted on, by more than 1)")
    # rows up to twice the leaf's longest (2**4.2 = 18.4 B) are its own (table.BOX_SLACK)
    assert tt.BOX_SLACK == {"log2_row_bytes": 1.0}
    p = _plan((1000, 34), "uint8", 0, 50000)          # 34 B: log2 5.09 <= 4.2 + 1
    assert (p.kind, p.main.fields["row_unroll"]) == ("rows", 2)
    assert p.chosen_by.startswith("sm_90 tuning table, leaf 4 (rows/2)")
    p = _plan((1000, 38), "uint8", 0, 50000)          # 38 B: log2 5.25
    assert p.kind == "window" and "log2_row_bytes 5.24793 outside the 1.5" in p.chosen_by
    p = _plan((1000, 3), "float32", 0, 100000)        # 12-byte rows of 4-byte units
    assert p.kind == "flat" and "unit 4 outside the 1 to 2" in p.chosen_by
    assert p.chosen_by.startswith("rule: rows of several units, under 16 B")
    p = _plan((1000, 75), "uint8", 0, 5000)           # a short call beyond the leaf's rows
    assert p.kind == "chunks" and p.chosen_by.startswith("rule: a short call")


def test_the_shipped_table_leaves_rows_its_leaf_never_saw_to_the_rules():
    table = tt.table_for("sm_90")
    assert all("box" in leaf for leaf in table.leaves() if leaf["choice"] != "rule")
    # held-out seed 3141's worst shape: a leaf of rows under 19 bytes once ran these
    # 75-byte rows as rows/2 at 0.53 TB/s; window moves 1.60 (H200), and the table
    # refitted with the faster flat kernel names it
    p = plan_gather(Operand.contiguous((6, 6854604, 75), 1), (65616,), "int32", 1, "wrap",
                    limits=SM90)
    assert p.kind == "window"
    # 416-byte rows of 1-byte units (held-out seed 3907), 32 MB out: the rules say
    # rows; the leaf of 16-byte units fitted again with lean's records of 1-64 MiB
    # out (-lean3) has them in its box and names lean
    p = plan_gather(Operand.contiguous((2277, 41, 4, 104), 1), (34,), "int64", 1, "wrap",
                    limits=SM90)
    assert p.kind == "lean" and p.chosen_by.startswith("sm_90 tuning table, leaf ")
    assert plan_gather(Operand.contiguous((2277, 41, 4, 104), 1), (34,), "int64", 1, "wrap",
                       limits=DeviceLimits(132, 227 * 1024, "")).kind == "rows"
    # 3-byte rows (held-out seed 9241), shorter than the rows of every geometry of
    # their leaf but within table.BOX_SLACK of them: the leaf's own choice (weave
    # since the table was fitted with weave's records; H200 probe: weave 1291 us,
    # pack 1204, flat 1264, slabf 991: the slack's cost, BENCHMARKS.md's weave section)
    p = plan_gather(Operand.contiguous((15, 70, 575, 3), 1), (210366,), "int32", 2, "wrap",
                    limits=SM90)
    leaf = next(lf for lf in table.leaves()
                if p.chosen_by.startswith(f"sm_90 tuning table, leaf {lf['leaf']} "))
    lo = leaf["box"]["log2_row_bytes"][0]
    assert lo - 1.0 <= math.log2(3) < lo, p.chosen_by
    assert p.kind == table.spec.kind_of[leaf["choice"]][0], (p.kind, leaf["choice"])


def test_the_shipped_table_names_slabr_for_held_out_seed_3863_s_minimum():
    # (4, 4, 337, 3) int8 on axis 2 with 9 x 1.6M int32 indices: weave at 34% of
    # the copy was the sweep's minimum (0.61x jax.numpy.take); the H100 probe has
    # slabr at 52%, jax.numpy.take 53%, slabf 42%
    def plan(limits):
        return plan_gather(Operand.contiguous((4, 4, 337, 3), 1), (9, 1595651), "int32", 2,
                           "wrap", limits=limits)

    p = plan(SM90)
    assert p.kind == "slabr" and p.chosen_by.startswith("sm_90 tuning table, leaf "), p.chosen_by
    p = plan(DeviceLimits(132, 227 * 1024, ""))
    assert p.kind != "slabr" and p.chosen_by.startswith("rule"), p.chosen_by


def test_the_shipped_table_names_weave_for_held_out_seed_6619_s_minimum():
    # (13019, 7) int8 with 2 x 6.7M int32 indices: flat at 35% of the copy was the
    # sweep's minimum; the H200 probe has weave at 95.6 us, pack 135.8, flat 183.5
    def plan(limits):
        return plan_gather(Operand.contiguous((13019, 7), 1), (2, 6719042), "int32", 0, "wrap",
                           limits=limits)

    p = plan(SM90)
    assert p.kind == "weave" and p.chosen_by.startswith("sm_90 tuning table, leaf "), p.chosen_by
    # without a table for the arch, the rules decide and name another kernel
    p = plan(DeviceLimits(132, 227 * 1024, ""))
    assert p.kind != "weave" and p.chosen_by.startswith("rule"), p.chosen_by


def test_the_rules_decide_where_the_table_cannot(monkeypatch, tmp_path):
    ranges = {f: [-1e9, 1e9] for f in tt.FEATURES}
    ranges["log2_picks"] = [0.0, 10.0]
    monkeypatch.setenv("CUGATHER_TUNING", str(_write(
        tmp_path / "t.json", {"choice": "inner", "leaf": 0}, ranges=ranges)))
    p = _plan((1000, 16), "float32", 0, 1000)         # inner needs one-unit rows
    assert p.kind == "lean"                           # a short call: 64000 B out
    assert "names inner, which does not apply" in p.chosen_by
    p = _plan((1000, 16), "float32", 0, 50000)        # picks beyond the fitted range
    assert p.kind == "rows" and "leaves this geometry to them" in p.chosen_by
    p = _plan((1000, 16), "float32", 0, 50000, limits=DeviceLimits())  # no arch: rules only
    assert p.kind == "rows" and p.chosen_by == "rule: rows of several units"


def test_the_planner_takes_the_leafs_first_candidate_that_applies(monkeypatch, tmp_path):
    tree = {"choice": "slab", "leaf": 3, "then": ["pack", "rows/2"]}
    monkeypatch.setenv("CUGATHER_TUNING", str(_write(tmp_path / "t.json", tree)))
    p = _plan((64, 100), "float32", 1, 5000)          # 4-byte rows from a 400-byte axis
    assert p.kind == "slab" and p.chosen_by.startswith("sm_90 tuning table, leaf 3 (slab): ")
    p = _plan((64, 100, 3), "uint8", 1, 5000)         # 3-byte rows: no slab
    assert p.kind == "pack"
    assert p.chosen_by.startswith("sm_90 tuning table, leaf 3 (pack, as slab does not apply)")
    p = _plan((64, 100, 5), "float32", 1, 5000)       # 20-byte rows: neither slab nor pack
    assert (p.kind, p.main.fields["row_unroll"]) == ("rows", 2)
    assert "leaf 3 (rows/2, as slab and pack do not apply)" in p.chosen_by
    tree = {"choice": "slab", "leaf": 0, "then": ["pack"]}
    monkeypatch.setenv("CUGATHER_TUNING", str(_write(tmp_path / "u.json", tree)))
    tt.clear_tables()
    p = _plan((64, 100, 5), "float32", 1, 5000)
    assert p.kind == "flat"
    assert p.chosen_by == ("rule: rows of several 4- or 8-byte units, at most 512 B (sm_90 "
                           "table leaf 0 names slab, pack, none of which applies)")


def test_a_reference_only_candidate_is_never_a_leafs_choice():
    """A candidate of REFERENCE_ONLY fastest everywhere by 10%: the fit names the
    next fastest, and reports its slowdown against the reference's time."""
    rng = np.random.default_rng(3)
    ref = tt.REFERENCE_ONLY[0]
    records = [_record(rng, lambda f: "rows/2") for _ in range(200)]
    for r in records:
        r["times"][ref] = r["times"]["rows/2"] / 1.1
    table = tt.fit(records, {"arch": "sm_90"}, min_leaf=10)
    assert {leaf["choice"] for leaf in table.leaves()} == {"rows/2"}
    assert all(leaf["mean_slowdown"] == pytest.approx(1.1, rel=1e-3) for leaf in table.leaves())


def test_a_forced_kind_bypasses_the_table(monkeypatch, tmp_path):
    monkeypatch.setenv("CUGATHER_TUNING", str(_write(tmp_path / "t.json",
                                                     {"choice": "strided", "leaf": 0})))
    p = plan_gather(Operand.contiguous((1000, 16), 4), (50,), "int64", 0, "wrap", limits=SM90,
                    kind="chunks")
    assert p.kind == "chunks" and p.chosen_by == ""


def test_every_candidate_the_table_may_name_plans_and_covers_the_output(monkeypatch, tmp_path):
    """Each candidate label maps to a kind plan_gather accepts, and on geometries it
    applies to the plan's grid covers every output row."""
    for label, kind, ru in tt.CANDIDATES:
        monkeypatch.setenv("CUGATHER_TUNING", str(_write(tmp_path / f"{kind}{ru}.json",
                                                         {"choice": label, "leaf": 0})))
        tt.clear_tables()
        shape, axis = (((9, 300), 1) if kind in ("scalar", "inner", "slab", "slabw", "flatv") else
                       ((300, 7), 0) if kind in ("pack", "weave", "slabr", "flat", "slabf",
                                                 "lean") else
                       ((300, 70), 0) if kind == "span" else
                       ((300, 25), 0) if kind == "chunks16" else ((300, 24), 0))
        # pack takes rows of 1- and 2-byte units (table.declines)
        p = _plan(shape, "int8" if kind in ("pack", "weave", "slabr") else "float32", axis,
                  776 if kind == "flatv" else 777)
        assert p.kind == kind, label
        if ru is not None:
            assert p.fields["row_unroll"] == ru
        assert math.prod(p.grid) >= 1


def test_features_are_log2_of_counts_and_bytes():
    f = tt.features(48, 16, 1, 1 << 20, 1000, 8)
    assert f["log2_row_bytes"] == pytest.approx(math.log2(48))
    assert f["row_mod16"] == 0 and f["unit"] == 16 and f["index_bytes"] == 8
    assert f["log2_rows"] == 20 and f["log2_outer"] == 0
    assert f["log2_table_bytes"] == pytest.approx(math.log2(48 * 1000))


def test_no_warning_when_no_table_is_anywhere():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tt.table_for("sm_61") is None


def test_tune_fit_writes_a_table_the_planner_reads(tmp_path, monkeypatch):
    """``cugather tune --fit RECORDS --out FILE`` (no GPU): held-out report, a valid
    table, and CUGATHER_TUNING=FILE makes the planner use it."""
    from cugather.cli.main import main

    records, rule = _synthetic(400)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(dict(r, arch="sm_90", seed=5)) + "\n" for r in records))
    out = tmp_path / "table.json"
    assert main(["tune", "--fit", str(path), "--out", str(out)]) == 0
    table = tt.load_table(out)
    report = table.meta["held_out"]
    assert report["geometries"] == 400 and report["held_out"] == 80
    assert report["table_geomean_slowdown"] < report["rules_geomean_slowdown"]
    assert table.meta["seeds"] == [5]
    monkeypatch.setenv("CUGATHER_TUNING", str(out))
    p = _plan((200, 60000, 40), "int8", 1, 1 << 18)    # 40-byte rows: the synthetic window
    assert p.kind == "window" and "tuning table" in p.chosen_by
    assert table.meta["command"] == f"python -m cugather tune --fit {path}"
    small = tmp_path / "small.json"  # smaller leaves: more of them, and the command says so
    assert main(["tune", "--fit", str(path), "--min-leaf", "4", "--out", str(small)]) == 0
    finer = tt.load_table(small)
    assert finer.meta["command"] == f"python -m cugather tune --fit {path} --min-leaf 4"
    assert len(finer.leaves()) >= len(table.leaves())
    assert min(leaf["n"] for leaf in finer.leaves()) >= 4
    soft = tmp_path / "soft.json"  # another penalty: the command says so
    assert main(["tune", "--fit", str(path), "--min-leaf", "4", "--penalty", "0.5",
                 "--out", str(soft)]) == 0
    assert (tt.load_table(soft).meta["command"]
            == f"python -m cugather tune --fit {path} --min-leaf 4 --penalty 0.5")


def _long_rows(n, seed):
    """Records of rows of 8-64 KB (longer than any of _synthetic's), chunks fastest."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        r = _record(rng, lambda f: "chunks")
        r["features"] = tt.features(int(rng.integers(8192, 65536)), 16,
                                    int(rng.integers(1, 1000)), int(rng.integers(1, 1 << 20)),
                                    int(rng.integers(1, 1 << 16)), 8)
        out.append(r)
    return out


def test_a_fit_under_a_base_table_changes_only_the_leaves_new_records_fall_in():
    """fit(..., base=T): T's splits kept; a leaf no new record falls in comes out as
    it was (fitted again on the same records), the others are grown again."""
    records, rule = _synthetic(600)
    base = tt.fit(records, {"arch": "sm_90"}, min_leaf=10)
    assert tt.fit(records, {"arch": "sm_90"}, min_leaf=10, base=base).tree == base.tree
    new = _long_rows(150, seed=3)
    refined = tt.fit(records + new, {"arch": "sm_90"}, min_leaf=10, base=base)
    X = [r["features"] for r in new]
    kept = grown = 0

    def walk(b, r, feats):
        nonlocal kept, grown
        if "feature" in b:
            assert (r["feature"], r["threshold"]) == (b["feature"], b["threshold"])
            walk(b["le"], r["le"], [f for f in feats if f[b["feature"]] <= b["threshold"]])
            walk(b["gt"], r["gt"], [f for f in feats if f[b["feature"]] > b["threshold"]])
        elif not feats:
            assert {k: v for k, v in r.items() if k != "leaf"} == \
                {k: v for k, v in b.items() if k != "leaf"}
            kept += 1
        else:
            grown += 1

    walk(base.tree, refined.tree, X)
    assert kept >= 1 and grown >= 1  # the window leaf kept, the rows/4 leaf grown again
    held = _long_rows(100, seed=4)
    chosen = [refined.choose(r["features"]) for r in held]
    assert sum(c is not None and c.label == "chunks" for c in chosen) >= 0.9 * len(held)
    assert sum(c is not None and c.label == "chunks" for c in
               (base.choose(r["features"]) for r in held)) <= 0.1 * len(held)
    leaves = [leaf["leaf"] for leaf in refined.leaves()]
    assert sorted(leaves) == list(range(len(leaves)))
    # a base no fit would make: its root split stays, a leaf beyond every record too
    hand = tt.TuningTable.from_dict(_table_dict(
        {"feature": "log2_outer", "threshold": 5.0,
         "le": {"choice": "rows/4", "leaf": 0},
         "gt": {"feature": "log2_row_bytes", "threshold": 20.0,
                "le": {"choice": "rows/4", "leaf": 1}, "gt": {"choice": "scalar", "leaf": 7}}}))
    under = tt.fit(records + new, {"arch": "sm_90"}, min_leaf=10, base=hand).tree
    assert (under["feature"], under["threshold"]) == ("log2_outer", 5.0)
    assert (under["gt"]["feature"], under["gt"]["threshold"]) == ("log2_row_bytes", 20.0)
    assert under["gt"]["gt"]["choice"] == "scalar"
    assert "feature" in under["le"] and "feature" in under["gt"]["le"]  # grown again
    assert tt.fit(records + new, {"arch": "sm_90"}, min_leaf=10).tree["feature"] != "log2_outer"
    with pytest.raises(ValueError, match="base is a table of 'elements', the records are of "
                                         "'gather'"):
        tt.fit(records, {"arch": "sm_90"}, base=tt.TuningTable.from_dict(
            _elements_table({"choice": "rule", "leaf": 0})))


def test_tune_fit_under_a_base_table(tmp_path, capsys):
    """``cugather tune --fit RECORDS --base TABLE``: the command says so; a base that
    cannot be read is refused with the reason and exit status 2."""
    from cugather.cli.main import main

    records, _ = _synthetic(400)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(dict(r, arch="sm_90", seed=5)) + "\n" for r in records))
    base = tmp_path / "base.json"
    assert main(["tune", "--fit", str(path), "--out", str(base)]) == 0
    out = tmp_path / "again.json"
    assert main(["tune", "--fit", str(path), "--base", str(base), "--out", str(out)]) == 0
    again = tt.load_table(out)
    assert again.tree == tt.load_table(base).tree
    assert again.meta["command"] == f"python -m cugather tune --fit {path} --base {base}"
    capsys.readouterr()
    assert main(["tune", "--fit", str(path), "--base", str(tmp_path / "none.json"),
                 "--out", str(out)]) == 2
    assert f"--base {tmp_path / 'none.json'}: " in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert main(["tune", "--fit", str(path), "--base", str(tmp_path / "bad.json"),
                 "--out", str(out)]) == 2
    assert "not JSON" in capsys.readouterr().err
    other = _write(tmp_path / "sm_80.json", {"choice": "rule", "leaf": 0}, arch="sm_80")
    assert main(["tune", "--fit", str(path), "--base", str(other), "--out", str(out)]) == 2
    assert "a table of gather on sm_80, the records are of gather on sm_90" in \
        capsys.readouterr().err
    elements = _write_elements(tmp_path / "el.json", {"choice": "rule", "leaf": 0})
    assert main(["tune", "--fit", str(path), "--base", str(elements), "--out", str(out)]) == 2
    assert "a table of elements on sm_90, the records are of gather" in capsys.readouterr().err
    assert main(["tune", "--base", str(base), "--out", str(out)]) == 2
    assert "--base takes --fit RECORDS" in capsys.readouterr().err


def test_a_later_record_of_the_same_geometry_replaces_the_earlier_one(tmp_path):
    """``--fit OLD NEW`` of a run with ``--only``: NEW's records of a seed and index
    take the place of OLD's, records of other geometries stay, in OLD's order."""
    from cugather.bench.tune_records import read_records

    def line(seed, index, t):
        return json.dumps({"seed": seed, "index": index, "times": {"rows/1": t}}) + "\n"

    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text(line(1, 0, 1.0) + line(1, 1, 2.0) + line(2, 1, 3.0) + "\n")
    new.write_text(line(1, 1, 9.0) + line(1, 7, 4.0))
    got = [(r["seed"], r["index"], r["times"]["rows/1"]) for r in read_records([old, new])]
    assert got == [(1, 0, 1.0), (1, 1, 9.0), (2, 1, 3.0), (1, 7, 4.0)]


def test_a_partial_record_adds_its_times_to_the_earlier_one(tmp_path):
    """``--only KIND --partial`` records carry KIND's times alone: ``--fit`` adds them
    to the earlier record of the same geometry (a timing replaces that label's time
    and error), and drops a partial record with no earlier one."""
    from cugather.bench.tune_records import read_records

    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text(json.dumps({"seed": 1, "index": 0, "times": {"rows/1": 2.0, "lean": 5.0},
                               "errors": {"flatv": "does not apply"}, "rule": "rows/1"}) + "\n"
                   + json.dumps({"seed": 1, "index": 1, "times": {"rows/1": 3.0}}) + "\n")
    new.write_text(json.dumps({"seed": 1, "index": 0, "partial": True,
                               "times": {"flatv": 1.5, "lean": 4.0}, "errors": {}}) + "\n"
                   + json.dumps({"seed": 1, "index": 9, "partial": True,
                                 "times": {"flatv": 1.0}}) + "\n")
    got = read_records([old, new])
    assert [(r["seed"], r["index"]) for r in got] == [(1, 0), (1, 1)]
    assert got[0]["times"] == {"rows/1": 2.0, "lean": 4.0, "flatv": 1.5}
    assert got[0]["errors"] == {} and got[0]["rule"] == "rows/1" and "partial" not in got[0]
    assert got[1]["times"] == {"rows/1": 3.0}


def test_a_partial_record_of_another_gpu_is_dropped_with_a_warning(tmp_path):
    """Times of two GPUs do not rank candidates against each other: a partial
    record adds to a record of the same device name only; the others are dropped
    and the warning names the file, both GPUs and the count."""
    from cugather.bench.tune_records import read_records

    def rec(index, device, times, partial=False):
        r = {"seed": 1, "index": index, "device": device, "times": times}
        return json.dumps(dict(r, partial=True) if partial else r) + "\n"

    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text(rec(0, "NVIDIA H200", {"rows/1": 2.0, "span": 3.0})
                   + rec(1, "NVIDIA H200", {"rows/1": 2.0, "span": 3.0})
                   + rec(2, "NVIDIA H100 80GB HBM3", {"rows/1": 2.5, "span": 3.0}))
    new.write_text(rec(0, "NVIDIA H100 80GB HBM3", {"span": 1.0}, partial=True)
                   + rec(1, "NVIDIA H100 80GB HBM3", {"span": 1.0}, partial=True)
                   + rec(2, "NVIDIA H100 80GB HBM3", {"span": 1.0}, partial=True))
    with pytest.warns(UserWarning) as caught:
        got = read_records([old, new])
    assert [r["times"]["span"] for r in got] == [3.0, 3.0, 1.0]
    assert [r["device"] for r in got] == ["NVIDIA H200"] * 2 + ["NVIDIA H100 80GB HBM3"]
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1 and "dropped 2 partial record(s)" in msgs[0]
    assert str(new) in msgs[0] and "NVIDIA H100 80GB HBM3, the record's NVIDIA H200" in msgs[0]
    # Records without a device name (older files) still merge.
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"seed": 1, "index": 0, "partial": True,
                                "times": {"span": 0.5}}) + "\n")
    assert read_records([old, bare])[0]["times"]["span"] == 0.5


def test_cugather_tuning_none_leaves_every_plan_to_the_rules(monkeypatch):
    monkeypatch.setenv("CUGATHER_TUNING", "none")
    assert tt.table_for("sm_90") is None
    p = _plan((1000, 16), "float32", 0, 50000)
    assert p.chosen_by == "rule: rows of several units (no tuning table for sm_90)"
    p = _plan((1000, 16), "float32", 0, 500)
    assert p.chosen_by == ("rule: a short call (at most 1048576 B out) (no tuning table for "
                           "sm_90)") and p.kind == "lean"


def test_the_tuner_records_the_features_the_planner_computes(monkeypatch):
    """``cugather tune`` records features from the sweep shape; the planner computes
    them from the operands.  They must agree, or the table would be read with other
    features than it was fitted on: checked on 300 sweep shapes (C-contiguous data
    at 256-byte aligned addresses, as the tuner allocates it)."""
    from cugather.bench import tune
    from cugather.bench.sweep import draw_shapes
    from cugather.plan import gather as plan_module

    seen = []

    def spy(limits, row_bytes, unit, n_outer, n_idx, axis_len, s_axis, index_dtype, out_align):
        seen.append(tt.features(row_bytes, unit, n_outer, n_idx, axis_len,
                                4 if index_dtype == "int32" else 8))
        return "rows", None, "spy"

    monkeypatch.setattr(plan_module, "_choose", spy)
    for s in draw_shapes(300, seed=12):
        op = Operand.contiguous(s.shape, s.itemsize)
        seen.clear()
        plan = plan_gather(op, s.indices, s.index_dtype, s.axis, "wrap", limits=SM90)
        if s.axis_len == 1:  # the bcast rule, before any table
            assert plan.key.kind in BCAST_KINDS and not seen, s.label()
            continue
        assert len(seen) == 1, s.label()
        recorded = tt.features(s.row_bytes, tune._unit(op, s), s.outer, s.n_indices, s.axis_len,
                               4 if s.index_dtype == "int32" else 8)
        assert recorded == seen[0], s.label()


# ---------------------------------------------------------------- GatherElements tables
def _elements_table(tree, arch="sm_90", ranges=None):
    ranges = ranges or {f: [-1e9, 1e9] for f in tt.ELEMENTS_FEATURES}
    return {"format": tt.FORMAT, "meta": {"arch": arch, "op": "elements"}, "ranges": ranges,
            "tree": tree}


def _write_elements(path, tree, ranges=None):
    path.write_text(json.dumps(_elements_table(tree, ranges=ranges)))
    return path


def _plan_el(shape, idx_shape, axis, itemsize=4, limits=SM90, index_dtype="int64"):
    from cugather.plan.elements import plan_elements

    return plan_elements(Operand.contiguous(shape, itemsize), idx_shape, index_dtype, axis,
                         "wrap", limits=limits)


def _el_label(p):
    return "row" if p.kind == "elements_row" else (
        "tiles" if p.main.fields["col_tiles"] else "elements")


def test_the_elements_planner_takes_its_table_s_choice_and_says_so(monkeypatch, tmp_path):
    tree = {"feature": "log2_cols", "threshold": 3.0,
            "le": {"choice": "row", "leaf": 0, "then": ["tiles"]},
            "gt": {"choice": "elements", "leaf": 1}}
    monkeypatch.setenv("CUGATHER_TUNING", str(_write_elements(tmp_path / "e.json", tree)))
    p = _plan_el((64, 4096), (64, 4096), 1)          # the last axis, one column: row applies
    assert _el_label(p) == "row"
    assert p.chosen_by.startswith("sm_90 tuning table, leaf 0 (row): log2_cols <= 3")
    assert "chosen by   sm_90 tuning table, leaf 0" in p.describe()
    p = _plan_el((4096, 4), (512, 4), 0)              # 4 columns: leaf 0, row does not apply
    assert _el_label(p) == "tiles"
    assert "leaf 0 (tiles, as row does not apply)" in p.chosen_by
    p = _plan_el((4096, 64), (512, 64), 0)            # 64 columns: leaf 1, flat order
    assert _el_label(p) == "elements" and "leaf 1 (elements)" in p.chosen_by
    # the Gather planner does not read a GatherElements table
    assert tt.table_for("sm_90", "gather") is None or tt.table_for("sm_90").op == "gather"


def test_the_elements_rules_decide_without_a_table_or_outside_its_ranges(monkeypatch, tmp_path):
    monkeypatch.setenv("CUGATHER_TUNING", "none")
    p = _plan_el((300, 4096), (300, 4096), 1)
    assert _el_label(p) == "row" and p.chosen_by.startswith("rule: the gathered axis innermost")
    p = _plan_el((4096, 64), (512, 64), 0)
    assert _el_label(p) == "tiles" and p.chosen_by.startswith("rule: 32 columns or more")
    p = _plan_el((4096, 4), (512, 4), 0)
    assert _el_label(p) == "elements" and p.chosen_by.startswith("rule: flat order")
    tt.clear_tables()
    ranges = {f: [-1e9, 1e9] for f in tt.ELEMENTS_FEATURES}
    ranges["broadcast"] = [0.0, 0.0]
    monkeypatch.setenv("CUGATHER_TUNING", str(_write_elements(
        tmp_path / "e.json", {"choice": "elements", "leaf": 0}, ranges)))
    from cugather.plan.elements import plan_elements

    # take_along_axis with indices broadcast over dimension 0: outside the fitted ranges
    p = plan_elements(Operand.contiguous((4096, 64), 4), (1, 64), "int64", 1, "wrap",
                      out_shape=(4096, 64), limits=SM90)
    assert "leaves this geometry to them" in p.chosen_by
    p = _plan_el((4096, 64), (512, 64), 0)
    assert _el_label(p) == "elements" and "leaf 0 (elements)" in p.chosen_by


def test_cugather_tuning_names_a_table_per_op(monkeypatch, tmp_path):
    g = _write(tmp_path / "g.json", {"choice": "chunks", "leaf": 0})
    e = _write_elements(tmp_path / "e.json", {"choice": "tiles", "leaf": 0})
    monkeypatch.setenv("CUGATHER_TUNING", os.pathsep.join([str(e), str(g)]))
    assert tt.table_for("sm_90").source == str(g)
    assert tt.table_for("sm_90", "elements").source == str(e)
    assert tt.user_table_path("sm_90", "elements").name == "sm_90.elements.json"
    with pytest.raises(ValueError, match="op must be one of gather, elements"):
        tt.table_for("sm_90", "nd")


def test_an_elements_table_validates_against_its_own_candidates(monkeypatch, tmp_path):
    with pytest.raises(tt.TableError, match="unknown candidate 'chunks'"):
        tt.TuningTable.from_dict(_elements_table({"choice": "chunks", "leaf": 0}))
    d = _elements_table({"feature": "log2_row_bytes", "threshold": 1.0,
                         "le": {"choice": "row", "leaf": 0},
                         "gt": {"choice": "tiles", "leaf": 1}})
    with pytest.raises(tt.TableError, match="a split names one of"):
        tt.TuningTable.from_dict(d)
    d = _elements_table({"choice": "row", "leaf": 0})
    d["meta"]["op"] = "scatter"
    with pytest.raises(tt.TableError, match="meta.op must be one of"):
        tt.TuningTable.from_dict(d)
    with pytest.raises(tt.TableError, match="ranges must give"):
        tt.TuningTable.from_dict(dict(_elements_table({"choice": "row", "leaf": 0}),
                                      ranges={f: [0, 1] for f in tt.FEATURES}))


def _elements_record(rng, best_of):
    from cugather.bench.tune_elements import draw_elements_shapes
    from cugather.plan.elements import elements_features_of

    s = draw_elements_shapes(1, int(rng.integers(1 << 30)))[0]
    feats = elements_features_of(Operand.contiguous(s.shape, s.itemsize), s.indices,
                                 s.index_dtype, s.axis)
    best = best_of(feats)
    times = {label: (1.0 if label == best else 2.0) + rng.random() * 0.05
             for label, _, _ in tt.ELEMENTS_CANDIDATES}
    return {"op": "elements", "features": feats, "times": times, "rule": "elements"}


def test_tune_fit_of_elements_records_writes_an_elements_table(tmp_path, monkeypatch):
    """Records of ``cugather tune --op elements`` fit an elements table (the op comes
    from the records), its held-out choices beat the rules, and the planner uses it."""
    from cugather.cli.main import main

    rng = np.random.default_rng(8)
    rule = lambda f: "tiles" if f["log2_cols"] >= 2 else "elements"  # noqa: E731
    records = [_elements_record(rng, rule) for _ in range(300)]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(dict(r, arch="sm_90", seed=7)) + "\n" for r in records))
    out = tmp_path / "elements.json"
    assert main(["tune", "--fit", str(path), "--out", str(out)]) == 0
    table = tt.load_table(out)
    assert table.op == "elements" and table.meta["op"] == "elements"
    report = table.meta["held_out"]
    assert report["table_geomean_slowdown"] < report["rules_geomean_slowdown"]
    assert report["table_within_5pct"] > 0.9
    monkeypatch.setenv("CUGATHER_TUNING", str(out))
    p = _plan_el((4096, 8), (512, 8), 0)              # 8 columns: the synthetic tiles
    assert _el_label(p) == "tiles" and "tuning table" in p.chosen_by
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(path.read_text() + json.dumps(dict(_synthetic(1)[0][0], arch="sm_90")))
    assert main(["tune", "--fit", str(mixed), "--out", str(tmp_path / "m.json")]) == 2


def test_the_elements_tuner_records_the_features_the_planner_computes(monkeypatch):
    """What ``tune --op elements`` records (elements_features_of) is what
    plan_elements hands the table, on 300 drawn geometries."""
    from cugather.bench.tune_elements import draw_elements_shapes
    from cugather.plan import elements as plan_module
    from cugather.plan.elements import elements_features_of

    seen = []

    def spy(limits, feats, unmet, picks, row_bytes, cols, total):
        seen.append(feats)
        return "elements", False, "spy"

    monkeypatch.setattr(plan_module, "_choose", spy)
    for s in draw_elements_shapes(300, seed=12):
        op = Operand.contiguous(s.shape, s.itemsize)
        seen.clear()
        plan_module.plan_elements(op, s.indices, s.index_dtype, s.axis, "wrap", limits=SM90)
        assert len(seen) == 1, s.label()
        assert elements_features_of(op, s.indices, s.index_dtype, s.axis) == seen[0], s.label()


def test_elements_geometries_follow_their_distribution():
    from cugather.bench.tune_elements import MAX_OUT, MIN_OUT, draw_elements_shapes

    a = draw_elements_shapes(400, seed=3)
    assert [s.label() for s in a[:50]] == [s.label() for s in draw_elements_shapes(50, seed=3)]
    for s in a:
        assert len(s.shape) == len(s.indices) and 0 <= s.axis < len(s.shape)
        assert all(k <= n for d, (n, k) in enumerate(zip(s.shape, s.indices)) if d != s.axis)
        assert MIN_OUT <= s.out_bytes <= MAX_OUT and s.axis_len < (1 << 31)
    assert {len(s.shape) for s in a} == {1, 2, 3, 4}
    assert {s.table_class for s in a} == {"l2", "beyond"}
    full = sum(s.indices[s.axis] == s.axis_len for s in a) / len(a)
    assert 0.15 < full < 0.5


def test_a_candidate_is_checked_byte_for_byte_before_it_is_timed(monkeypatch):
    """tune's time_candidate (shared by both ops): a wrong result is recorded as an
    error and never timed; a right one gets the median of its samples; a failure
    to run is recorded with its type.  The GPU calls are replaced by stand-ins."""
    from cugather.bench import sweep_run, tune
    from cugather.runtime import binding, launch

    ref = np.arange(12, dtype=np.float32)
    out = {"got": ref.copy()}
    calls = []

    def execute(bound, data, ptr, idx, a, b, device):
        calls.append(bound)
        if isinstance(out["got"], Exception):
            raise out["got"]
        return out["got"]

    monkeypatch.setattr(binding, "bind", lambda plan, *a: ("bound", plan))
    monkeypatch.setattr(launch, "execute", execute)
    monkeypatch.setattr(sweep_run, "adaptive",
                        lambda timer, fn, *a: [fn() is not None and t for t in (3.0, 1.0, 2.0)])
    ref_bytes = ref.view(np.uint8).reshape(-1)
    rec = {"times": {}, "errors": {}}
    tune.time_candidate(None, rec, "flat", "plan", ref, 0, None, ref_bytes, 0, "cupy.take")
    assert rec == {"times": {"flat": 2.0}, "errors": {}} and calls[0] == ("bound", "plan")
    out["got"] = ref.copy()
    out["got"][5] = -1
    tune.time_candidate(None, rec, "pack", "plan", ref, 0, None, ref_bytes, 0, "cupy.take")
    assert "pack" not in rec["times"] and rec["errors"]["pack"] == "result differs from cupy.take"
    out["got"] = RuntimeError("launch failed")
    tune.time_candidate(None, rec, "row", "plan", ref, 0, None, ref_bytes, 0,
                        "cupy.take_along_axis")
    assert rec["errors"]["row"] == "RuntimeError: launch failed" and "row" not in rec["times"]


def test_tune_where_draws_only_the_geometries_it_names():
    """``tune --where``: the seed's draws whose features meet every condition, each
    under its index in the draw (the sweep's shape of that index), so that a
    sparse region of the distribution can be timed more densely."""
    from cugather.bench.sweep import draw_shapes
    from cugather.bench.tune import draw_where, parse_where, shape_features

    where = parse_where(["unit == 4", "log2_out_bytes>=24", " log2_outer > 3 "])
    assert where == [("unit", "==", 4.0), ("log2_out_bytes", ">=", 24.0), ("log2_outer", ">", 3.0)]
    got = draw_where(12, 1000, 0, where)
    assert len(got) == 12
    indices = [i for i, _ in got]
    assert indices == sorted(set(indices)) and indices[-1] >= 12  # some draws were skipped
    every = draw_shapes(indices[-1] + 1, 1000)
    def meets(s):
        f = shape_features(s)
        return f["unit"] == 4 and f["log2_out_bytes"] >= 24 and f["log2_outer"] > 3

    for i, s in got:
        assert s == every[i] and meets(s)
    # each draw left out misses a condition
    assert not any(meets(every[j]) for j in range(indices[-1]) if j not in indices)
    s = every[indices[0]]
    assert shape_features(s) == tt.features(s.row_bytes, 4, s.outer, s.n_indices, s.axis_len,
                                            4 if s.index_dtype == "int32" else 8)
    # without conditions: the draws from --start on, in order
    assert [i for i, _ in draw_where(3, 1000, 5)] == [5, 6, 7]
    assert draw_where(2, 1000, 0, [("unit", ">", 99.0)], max_draws=50) == []


@pytest.mark.parametrize("cond,message", [
    ("unit = 4", "--where must be 'FEATURE OP VALUE'"),
    ("unit >= four", "--where must be 'FEATURE OP VALUE'"),
    ("rows >= 4", "--where feature must be one of log2_row_bytes"),
])
def test_tune_where_names_a_bad_condition(cond, message, capsys):
    from cugather.bench.tune import parse_where
    from cugather.cli.main import main

    with pytest.raises(ValueError, match=re.escape(message)):
        parse_where([cond])
    assert main(["tune", "--where", cond]) == 2
    assert message in capsys.readouterr().err


def _fake_gpu(monkeypatch):
    """An H200 as far as ``tune``'s timing loop asks (no device is touched)."""
    import types

    from cugather import validate
    from cugather.runtime.launch import CUDA

    fake_cp = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Device=lambda: types.SimpleNamespace(id=0),
                                   runtime=types.SimpleNamespace(
                                       getDeviceProperties=lambda d: {"name": b"NVIDIA H200"})),
        get_default_memory_pool=lambda: types.SimpleNamespace(free_all_blocks=lambda: None))
    monkeypatch.setattr(validate, "cupy_module", lambda: fake_cp)
    monkeypatch.setattr(CUDA, "limits", lambda device: SM90)


def test_tune_where_records_each_geometry_under_its_draw_index(tmp_path, monkeypatch):
    """The timing loop of ``tune --where`` (a stand-in for the GPU and the timing):
    each record carries the seed and the geometry's index in the seed's draw, and
    its data seed follows that index, so a later run of the same draw replaces or
    completes it."""
    from cugather.bench import tune
    from cugather.cli.main import main

    _fake_gpu(monkeypatch)
    seen = []

    def fake_tune_shape(cp, s, gseed, device, only, partial):
        seen.append((s, gseed))
        return {"shape": s.as_dict(), "times": {"slab": 1e-3}, "errors": {}, "partial": True}

    monkeypatch.setattr(tune, "tune_shape", fake_tune_shape)
    rec = tmp_path / "r.jsonl"
    assert main(["tune", "--only", "slab", "--partial", "--geometries", "5", "--seed", "1000",
                 "--where", "unit <= 2", "--where", "log2_outer >= 2", "--records", str(rec),
                 "--out", str(tmp_path / "t.json")]) == 0
    want = tune.draw_where(5, 1000, 0, tune.parse_where(["unit <= 2", "log2_outer >= 2"]))
    lines = [json.loads(line) for line in rec.read_text().splitlines()]
    assert [(r["seed"], r["index"]) for r in lines] == [(1000, i) for i, _ in want]
    assert [s for s, _ in seen] == [s for _, s in want]
    assert [g for _, g in seen] == [1000 * 1_000_003 + i for i, _ in want]
    assert all(r["shape"] == s.as_dict() for r, (_, s) in zip(lines, want))
    assert all(r["limits"] == [SM90.sm_count, SM90.max_shared_mem] for r in lines)


def test_tune_only_several_kinds_times_them_on_the_first_kinds_geometries(capsys):
    """``--only slabf,flat --partial``: slabf's geometries, slabf's and flat's
    candidates timed there; several kinds without --partial, or an unknown kind,
    are refused with the reason."""
    from cugather.bench.tune import timed_candidates
    from cugather.cli.main import main

    assert [c[0] for c in timed_candidates("slabf,flat", True)] == ["flat", "slabf"]
    assert [c[0] for c in timed_candidates("rows", True)] == ["rows/1", "rows/2", "rows/4"]
    assert timed_candidates("slabf,flat", False) == list(tt.CANDIDATES)
    assert timed_candidates(None, False) == list(tt.CANDIDATES)
    assert main(["tune", "--only", "slabf,flat"]) == 2
    assert "several kinds need --partial" in capsys.readouterr().err
    assert main(["tune", "--only", "slabf,flot", "--partial"]) == 2
    assert "got 'slabf,flot'" in capsys.readouterr().err


# ---------------------------------------------------------------- thin leaves
def _meets(feats, conditions):
    return all(feats[name] <= t if op == "<=" else feats[name] > t for name, op, t in conditions)


def test_a_table_names_the_splits_to_each_leaf():
    """``conditions(leaf)``: the splits on the way to the leaf, which every geometry
    ``leaf_of`` puts there meets and no geometry of another leaf does."""
    from cugather.bench.sweep import draw_shapes
    from cugather.bench.tune import shape_features

    table = tt.load_table(tt.SHIPPED / "sm_90.json")
    feats = [shape_features(s) for s in draw_shapes(300, 4)]
    ids = [n["leaf"] for n in table.leaves()]
    paths = {leaf: table.conditions(leaf) for leaf in ids}
    for f in feats:
        (leaf,) = [leaf for leaf in ids if _meets(f, paths[leaf])]
        assert table.leaf_of(f)["leaf"] == leaf
    root = tt.TuningTable.from_dict(_table_dict({"choice": "rows/4", "leaf": 0, "n": 9}))
    assert root.conditions(0) == []
    with pytest.raises(ValueError, match=r"leaf must be one of the table's \d+ leaves .*got 99999"):
        table.conditions(99999)


def test_tune_leaf_draws_its_quota_of_geometries_in_each_leaf_named():
    """``tune --leaf A --leaf B --geometries 3``: the seed's first three draws that
    fall in leaf A and the first three in B, in draw order, nothing else."""
    from collections import Counter

    from cugather.bench import tune
    from cugather.bench.sweep import draw_shapes

    table = tt.load_table(tt.SHIPPED / "sm_90.json")
    every = draw_shapes(400, 1000)
    common = Counter(table.leaf_of(tune.shape_features(s))["leaf"] for s in every[:200])
    (a, _), (b, _) = common.most_common(2)
    got = tune.draw_where(6, 1000, 0, [], keep=tune._leaf_quota(table, [a, b], 3))
    want = []
    for leaf in (a, b):
        cond = table.conditions(leaf)
        want += [i for i, s in enumerate(every) if _meets(tune.shape_features(s), cond)][:3]
    assert len(want) == 6 and max(want) < len(every)
    assert [i for i, _ in got] == sorted(want)
    assert all(s == every[i] for i, s in got)
    with pytest.raises(ValueError, match="got 99999"):
        tune._leaf_quota(table, [a, 99999], 3)


def _thin_case():
    """A table of two leaves (rows of at most 64 bytes: rows/4; longer: the rules)
    and records where slab runs 2x faster than rows/4 on three geometries of the
    first leaf (fewer than MIN_SUPPORT), scalar 1.02x on the only two it is timed on,
    window 1.5x on five of the second's."""
    tree = {"feature": "log2_row_bytes", "threshold": 6.0, "n": 40,
            "le": {"choice": "rows/4", "leaf": 0, "n": 20},
            "gt": {"choice": "rule", "leaf": 1, "n": 20}}
    table = tt.TuningTable.from_dict(_table_dict(tree))
    rng = np.random.default_rng(11)
    records = []
    for k in range(40):
        r = _staging_pays(_record(rng, lambda f: "rows/4" if k < 20 else "rows/1"))
        r["features"]["log2_row_bytes"] = 5.0 if k < 20 else 8.0
        t = r["times"]
        t.pop("slab")
        if k < tt.MIN_SUPPORT - 1:
            t["slab"] = t["rows/4"] / 2
        t.pop("scalar")
        if k in (5, 6):
            t["scalar"] = t["rows/4"] / 1.02
        if 20 <= k < 25:
            t["window"] = t["rows/1"] / 1.5
        records.append(r)
    return table, records


def test_thin_leaves_names_a_candidate_faster_on_too_few_geometries_to_rank():
    from cugather.bench.tune_fit import thin_leaves

    table, records = _thin_case()
    (e,) = thin_leaves(table, records)
    assert (e["leaf"], e["n"], e["choice"], e["candidate"], e["support"]) == \
        (0, 20, "rows/4", "slab", tt.MIN_SUPPORT - 1)
    assert e["speedup"] == pytest.approx(2.0, abs=1e-3)
    assert e["gain"] == pytest.approx(tt.MIN_SUPPORT - 1, abs=1e-3)
    assert e["conditions"] == [("log2_row_bytes", "<=", 6.0)]
    # rows/4 runs there: 2x slab's time on three geometries, 1.02x scalar's on two
    spent = tt.MIN_SUPPORT - 1 + 2 * math.log2(1.02)
    assert e["leaf_slowdown"] == pytest.approx(2 ** (spent / 20), abs=1e-3)
    # a smaller bar takes scalar's 1.02x too; slab's fourth geometry makes it rankable
    assert [x["candidate"] for x in thin_leaves(table, records, 1.01)] == ["slab", "scalar"]
    records[tt.MIN_SUPPORT - 1]["times"]["slab"] = records[tt.MIN_SUPPORT - 1]["times"]["rows/4"]
    assert thin_leaves(table, records) == []


def test_tune_thin_reports_the_leaves_and_how_to_time_more(tmp_path, capsys, monkeypatch):
    from cugather.cli.main import main

    table, records = _thin_case()
    tab = tmp_path / "t.json"
    tab.write_text(json.dumps(table.to_dict()))
    rec = tmp_path / "r.jsonl"
    rec.write_text("".join(json.dumps(dict(r, arch="sm_90", seed=7, index=i)) + "\n"
                           for i, r in enumerate(records)))
    assert main(["tune", "--thin", "--fit", str(rec), "--table", str(tab)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s+0\s+20\s+rows/4\s+slab\s+3\s+2\.000x", out, re.M)
    assert f"python -m cugather tune --leaf 0 --table {tab} --geometries 12 --seed S" in out
    assert "they hold 7" in out
    assert not list(tmp_path.glob("*.records*"))  # nothing fitted, nothing written
    monkeypatch.setenv("CUGATHER_TUNING", str(tab))  # the table cugather uses, by default
    assert main(["tune", "--thin", "--fit", str(rec)]) == 0
    assert "--leaf 0 --geometries 12" in capsys.readouterr().out
    other = tmp_path / "o.json"
    other.write_text(json.dumps(_table_dict(table.to_dict()["tree"], arch="sm_80")))
    assert main(["tune", "--thin", "--fit", str(rec), "--table", str(other)]) == 2
    assert "a table of gather on sm_80, not of gather on sm_90" in capsys.readouterr().err
    assert main(["tune", "--thin"]) == 2
    assert "--thin takes --fit RECORDS" in capsys.readouterr().err
    assert main(["tune", "--fit", str(rec), "--leaf", "0"]) == 2
    assert "--fit times nothing" in capsys.readouterr().err


def test_tune_leaf_times_the_geometries_of_the_leaves_named(tmp_path, monkeypatch, capsys):
    """The timing loop of ``tune --leaf`` (a stand-in for the GPU and the timing)."""
    from cugather.bench import tune
    from cugather.cli.main import main

    _fake_gpu(monkeypatch)
    table = tt.load_table(tt.SHIPPED / "sm_90.json")
    seen = []
    monkeypatch.setattr(tune, "tune_shape", lambda cp, s, gseed, device, only, partial:
                        seen.append(s) or {"shape": s.as_dict(), "times": {"slab": 1.0},
                                           "errors": {}, "partial": True})
    leaf = table.leaf_of(tune.shape_features(tune.draw_where(1, 1000)[0][1]))["leaf"]
    rec = tmp_path / "r.jsonl"
    assert main(["tune", "--only", "slab", "--partial", "--leaf", str(leaf), "--geometries",
                 "4", "--seed", "1000", "--records", str(rec), "--table",
                 str(tt.SHIPPED / "sm_90.json"), "--out", str(tmp_path / "t.json")]) == 0
    assert len(seen) == 4
    assert all(table.leaf_of(tune.shape_features(s))["leaf"] == leaf for s in seen)
    assert main(["tune", "--leaf", "99999", "--table", str(tt.SHIPPED / "sm_90.json")]) == 2
    assert "--leaf: leaf must be one of the table's" in capsys.readouterr().err
    assert main(["tune", "--op", "elements", "--leaf", "0"]) == 2
    assert "--leaf takes Gather's features" in capsys.readouterr().err


# ---------------------------------------------------------------- damaged records
def _sweep_records(n, seed=21):
    """Gather records of real sweep shapes (their features as the tuner computes
    them), rows/4 fastest, the rules on rows/1."""
    from cugather.bench.sweep import draw_shapes
    from cugather.bench.tune import shape_features

    rng = np.random.default_rng(seed)
    out = []
    for i, s in enumerate(draw_shapes(n, seed)):
        times = {"rows/1": 2.0 + rng.random(), "rows/4": 1.0 + rng.random() / 10}
        out.append({"shape": s.as_dict(), "features": shape_features(s), "times": times,
                    "rule": "rows/1", "arch": "sm_90", "seed": seed, "index": i})
    return out


def test_a_damaged_record_file_is_read_up_to_the_damage(tmp_path):
    """A run cut short leaves an incomplete last line, a copy cut short a gzip
    file that ends early: the records before the damage are used, the rest is
    skipped with a warning that names the file and the lines."""
    import gzip

    from cugather.bench.tune_records import read_records

    records = _sweep_records(40)
    lines = [json.dumps(r) for r in records]
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:30]) + "\n" + lines[30][:77])
    with pytest.warns(UserWarning, match=r"skipped 1 line\(s\) of .*cut.jsonl .*\(line 31\)"):
        assert read_records([cut]) == records[:30]
    odd = tmp_path / "odd.jsonl"  # lines that parse but are no records
    odd.write_text("\n".join([lines[0], "[1, 2]", json.dumps(dict(records[1], times=[1.0])),
                              json.dumps(dict(records[2], index=[2])), lines[3]]) + "\n")
    with pytest.warns(UserWarning, match=r"skipped 3 line\(s\) of .*odd.jsonl .*\(line 2, 3, 4\)"):
        assert read_records([odd]) == [records[0], records[3]]
    whole = gzip.compress(("\n".join(lines) + "\n").encode())
    short = tmp_path / "short.jsonl.gz"
    short.write_bytes(whole[:len(whole) // 2])
    with pytest.warns(UserWarning, match="short.jsonl.gz ends early"):
        got = read_records([short])
    assert 0 < len(got) < 40 and got == records[:len(got)]


def test_a_record_that_cannot_be_used_is_dropped_with_a_warning():
    from cugather.bench.tune_records import usable_records

    records = _sweep_records(12)
    bad = [dict(records[0], times={"rows/1": -1.0, "rows/4": 1.0}),
           dict(records[1], times={"rows/1": "fast", "rows/4": 1.0}),
           dict(records[2], rule="rows/2"),
           dict(records[3], shape={"row_bytes": 8}),
           dict(records[4], shape=None, features={"unit": 4})]
    with pytest.warns(UserWarning, match=r"dropped 5 record\(s\) .*the first \(seed 21, index 0\): "
                                         r"its times are not all positive"):
        got = usable_records(bad + records[5:], "gather")
    assert [r["index"] for r in got] == list(range(5, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(usable_records(records, "gather")) == 12
        assert usable_records(records, "elements") == []  # another op's records are not dropped: skipped


def test_records_are_scored_against_todays_rules():
    """A record keeps the rules' label of the day it was timed; the fit scores it
    against the label today's rules give its shape (on the tuner's operand: C
    order, 256-byte aligned, an H200's limits), where that candidate was timed."""
    from cugather.bench.sweep import draw_shapes
    from cugather.bench.tune import _label, shape_features
    from cugather.bench.tune_records import usable_records
    from cugather.plan.core import DeviceLimits, Operand
    from cugather.plan.gather import plan_gather

    records, today = [], []
    for i, s in enumerate(draw_shapes(60, 23)):
        p = plan_gather(Operand.contiguous(s.shape, s.itemsize), s.indices, s.index_dtype,
                        s.axis, "fill" if s.axis_len == 1 else "wrap", limits=DeviceLimits())
        if _label(p) in (None, "window"):
            continue
        today.append(_label(p))
        records.append({"shape": s.as_dict(), "features": shape_features(s), "rule": "window",
                        "times": {"window": 2.0, today[-1]: 1.0}, "seed": 23, "index": i})
    assert len(set(today)) >= 3
    got = usable_records(records, "gather")
    assert [r["rule"] for r in got] == today
    assert [r["rule"] for r in records] == ["window"] * len(records)  # the records untouched
    untimed = [dict(r, times={"window": 2.0, "strided": 1.0})
               for r, t in zip(records, today) if t != "strided"]
    assert untimed and all(r["rule"] == "window" for r in usable_records(untimed, "gather"))


def test_elements_records_are_scored_against_todays_rules():
    """An elements record, like a Gather one, is scored against the label today's
    GatherElements rules give its shape, not the label it was timed with."""
    from cugather.bench.tune_elements import _label, draw_elements_shapes
    from cugather.bench.tune_records import usable_records
    from cugather.plan.core import DeviceLimits, Operand
    from cugather.plan.elements import plan_elements

    records, today = [], []
    for i, s in enumerate(draw_elements_shapes(80, 29)):
        p = plan_elements(Operand.contiguous(s.shape, s.itemsize), s.indices, s.index_dtype,
                          s.axis, "wrap", limits=DeviceLimits())
        if p.main is None:
            continue
        today.append(_label(p))
        other = "elements" if today[-1] == "tiles" else "tiles"
        records.append({"op": "elements", "shape": s.as_dict(), "features": {}, "rule": other,
                        "times": {other: 2.0, today[-1]: 1.0}, "seed": 29, "index": i})
    assert set(today) == {"tiles", "elements"}
    got = usable_records(records, "elements")
    assert [r["rule"] for r in got] == today
    assert all(r["features"] for r in got)          # features computed from the shape
    assert [r["rule"] for r in records] != today     # the records untouched


def test_records_are_scored_against_the_rules_of_the_gpu_that_timed_them():
    """The rules' rows kernel takes more rows a thread on a GPU of fewer SMs: a
    record that keeps its GPU's limits is scored against that GPU's rules, one
    without them (timed before they were kept) against an H200's."""
    from cugather.bench.sweep import draw_shapes
    from cugather.bench.tune import _label, shape_features
    from cugather.bench.tune_records import rule_limits, usable_records
    from cugather.plan.core import DeviceLimits, Operand
    from cugather.plan.gather import plan_gather

    small = DeviceLimits(16, 48 * 1024, "")
    records, want, h200 = [], [], []
    for i, s in enumerate(draw_shapes(120, 23)):
        op = Operand.contiguous(s.shape, s.itemsize)
        mode = "fill" if s.axis_len == 1 else "wrap"
        on_small = _label(plan_gather(op, s.indices, s.index_dtype, s.axis, mode, limits=small))
        on_h200 = _label(plan_gather(op, s.indices, s.index_dtype, s.axis, mode,
                                     limits=DeviceLimits()))
        if on_small == on_h200 or None in (on_small, on_h200):
            continue
        times = {on_small: 1.0, on_h200: 1.5, "strided": 3.0}
        records.append({"shape": s.as_dict(), "features": shape_features(s), "rule": "strided",
                        "times": times, "seed": 23, "index": i, "limits": [16, 48 * 1024]})
        want.append(on_small)
        h200.append(on_h200)
    assert len(records) >= 3
    assert rule_limits(records[0]) == small
    assert [r["rule"] for r in usable_records(records, "gather")] == want
    older = [{k: v for k, v in r.items() if k != "limits"} for r in records]
    assert [r["rule"] for r in usable_records(older, "gather")] == h200
    for bad in ([16], [16, 0], [16.0, 49152], "16,49152", [True, 49152]):
        assert rule_limits(dict(records[0], limits=bad)) == DeviceLimits()


def test_tune_fit_of_unreadable_or_useless_records_says_so(tmp_path, capsys):
    from cugather.cli.main import main

    out = tmp_path / "t.json"
    assert main(["tune", "--fit", str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2
    assert "--fit: " in capsys.readouterr().err
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(bytes(range(256)) * 4)
    assert main(["tune", "--fit", str(binary), "--out", str(out)]) == 2
    assert "is not a file of JSON lines" in capsys.readouterr().err
    useless = tmp_path / "u.jsonl"
    useless.write_text(json.dumps(dict(_sweep_records(1)[0], rule="scalar")) + "\n")
    with pytest.warns(UserWarning, match="the rules' candidate 'scalar' has no time"):
        assert main(["tune", "--fit", str(useless), "--out", str(out)]) == 2
    assert "nothing fitted: no timed geometries to fit" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("args,message", [
    (["--geometries", "-5"], "argument --geometries: must be an integer of at least 1, got '-5'"),
    (["--geometries", "many"], "argument --geometries: must be an integer of at least 1"),
    (["--start", "-1"], "argument --start: must be an integer of at least 0"),
    (["--leaf", "-1"], "argument --leaf: must be an integer of at least 0"),
    (["--min-leaf", "0", "--fit", "r.jsonl"],
     "argument --min-leaf: must be an integer of at least 1"),
    (["--penalty", "-3", "--fit", "r.jsonl"], "argument --penalty: must be a number of at least 0"),
    (["--penalty", "nan", "--fit", "r.jsonl"],
     "argument --penalty: must be a number of at least 0"),
    (["--time-limit", "-1"], "argument --time-limit: must be a number of at least 0"),
])
def test_tune_refuses_a_bad_number_before_it_touches_the_gpu(args, message, capsys):
    from cugather.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["tune"] + args)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_tune_fit_says_so_when_the_table_cannot_be_written(tmp_path, capsys):
    from cugather.cli.main import main

    rec = tmp_path / "r.jsonl"
    rec.write_text("".join(json.dumps(r) + "\n" for r in _sweep_records(30)))
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "t.json"  # under a file: no folder can be made there
    assert main(["tune", "--fit", str(rec), "--out", str(out)]) == 2
    assert f"--out {out}: the table cannot be written" in capsys.readouterr().err
    assert main(["tune", "--fit", str(rec), "--out", str(tmp_path / "t.json")]) == 0
    assert main(["tune", "--thin", "--fit", os.devnull]) == 2
    assert "--thin: no timed gather geometries" in capsys.readouterr().err
