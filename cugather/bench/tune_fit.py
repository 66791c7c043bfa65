"""Fitting a tuning table to timed records, and reading a table against them:
its slowdown against the fastest candidate, the leaves where it rests on too
few timings.  Pure Python (no GPU); :mod:`cugather.plan.table` holds the fit
itself."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from ..plan.table import MIN_SUPPORT
from .tune_records import usable_records

__all__ = ["fit_records", "thin_leaves", "print_thin", "MIN_LEAF", "PENALTY", "HOLDOUT_EVERY"]

#: The fit's report scores a table fitted without every fifth record on those.
HOLDOUT_EVERY = 5
#: ``--min-leaf``'s default: the fewest geometries per leaf of a fit.
MIN_LEAF = 12
#: The fit's extra cost per log2 of slowdown beyond 2**0.25 (see plan.table.fit):
#: across two seeds 3 halved the worst held-out slowdown at no cost in the mean.
#: 8 costs as little (H200 records: fitted on one seed, scored on the other,
#: 1.0195x and 1.0245x the fastest plan, against 1.0205x and 1.0209x at 3) and
#: keeps two fixed-suite cases off leaves whose average misleads them: one-unit
#: rows of a 256 MiB table with 8192 outer rows stay on the staging kernel (1.7x
#: faster there than flatv, where 3 put them), 64-byte rows with 4M picks on
#: rows/4 (1.09x faster than rows/2, where 4 put them).
PENALTY = 8.0


def fit_records(records: List[Dict[str, Any]], meta: Dict[str, Any], min_leaf: int = MIN_LEAF,
                penalty: float = PENALTY, op: str = "gather", base=None):
    """(table fitted on every record, held-out report) of ``op``'s records; with
    ``base`` (a table), under its splits (:func:`cugather.plan.table.fit`)."""
    from ..plan.table import fit, spec_of

    spec = spec_of(op)
    usable = usable_records(records, op)
    train = [r for i, r in enumerate(usable) if i % HOLDOUT_EVERY]
    held = [r for i, r in enumerate(usable) if not i % HOLDOUT_EVERY]
    report: Dict[str, Any] = {"geometries": len(usable), "held_out": len(held)}
    if base is not None:  # the base's splits may have seen the held-out fifth
        report["under_base"] = True
    if train and held:
        trial = fit(train, meta, min_leaf=min_leaf, penalty=penalty, spec=spec, base=base)
        report.update(_slowdowns(trial, held))
    table = fit(usable, meta, min_leaf=min_leaf, penalty=penalty, spec=spec, base=base)
    report["fitted_on_all"] = _slowdowns(table, usable)
    table.meta["held_out"] = report
    return table, report


def _runs(table, r: Dict[str, Any]) -> str:
    """The candidate the planner runs on record ``r`` under ``table``: the leaf's
    first that was timed there and applies, else the rules'."""
    choice = table.choose(r["features"])
    return next((c[0] for c in (choice.ranked if choice else ())
                 if c[0] in r["times"] and not table.spec.declines(c[0], r["features"])),
                r["rule"])


def _slowdowns(table, records) -> Dict[str, Any]:
    """Geometric-mean and worst slowdown against the fastest candidate, of the
    table's choices and of the rules', over ``records``."""
    mine, rule = [], []
    for r in records:
        times = r["times"]
        best = min(times.values())
        mine.append(times[_runs(table, r)] / best)
        rule.append(times[r["rule"]] / best)
    gm = lambda xs: float(math.exp(sum(math.log(x) for x in xs) / len(xs)))  # noqa: E731
    return {"table_geomean_slowdown": round(gm(mine), 4), "rules_geomean_slowdown": round(gm(rule), 4),
            "table_worst": round(max(mine), 3), "rules_worst": round(max(rule), 3),
            "table_within_5pct": round(sum(x <= 1.05 for x in mine) / len(mine), 4),
            "rules_within_5pct": round(sum(x <= 1.05 for x in rule) / len(rule), 4)}


def thin_leaves(table, records: List[Dict[str, Any]], min_speedup: float = 1.05
                ) -> List[Dict[str, Any]]:
    """Where ``table`` rests on too few timings: per leaf, each candidate that
    applies to fewer than :data:`~cugather.plan.table.MIN_SUPPORT` of the
    ``records`` falling in it (so the fit could not rank it) and runs them
    ``min_speedup`` or more faster (geometric mean) than what the planner runs
    there now.  Most promising first (the summed log2 gain).

    Each entry: ``leaf``, ``n`` (records in the leaf), ``choice`` (the leaf's),
    ``candidate``, ``support`` (records it applies to), ``speedup`` (over what
    runs there now, on those), ``leaf_slowdown`` (geometric mean against the
    fastest candidate over the leaf's records, as the planner runs them) and
    ``conditions`` (the splits to the leaf, as ``--where`` takes them).
    """
    from collections import defaultdict

    spec = table.spec
    known = {c[0] for c in spec.candidates} - set(spec.reference_only)
    in_leaf: Dict[int, List[Dict[str, Any]]] = defaultdict(list)
    nodes: Dict[int, Dict[str, Any]] = {}
    for r in records:
        if r.get("times") and r.get("features") and r.get("op", "gather") == table.op:
            node = table.leaf_of(r["features"])
            nodes[int(node["leaf"])] = node
            in_leaf[int(node["leaf"])].append(r)
    out = []
    for leaf, rs in sorted(in_leaf.items()):
        node = nodes[leaf]
        spent = 0.0
        gain: Dict[str, List[float]] = defaultdict(list)
        for r in rs:
            times = r["times"]
            now = times[_runs(table, r)]
            spent += math.log2(now / min(times.values()))
            for label, t in times.items():
                if label in known and not spec.declines(label, r["features"]):
                    gain[label].append(math.log2(now / t))
        for label, gs in gain.items():
            speedup = 2 ** (sum(gs) / len(gs))
            if len(gs) < MIN_SUPPORT and speedup >= min_speedup:
                out.append({"leaf": leaf, "n": len(rs), "choice": node["choice"],
                            "candidate": label, "support": len(gs),
                            "speedup": round(speedup, 3), "gain": sum(gs),
                            "leaf_slowdown": round(2 ** (spent / len(rs)), 3),
                            "conditions": table.conditions(leaf)})
    out.sort(key=lambda e: -e["gain"])
    for e in out:
        e["gain"] = round(e["gain"], 3)
    return out


def print_thin(table, thin: List[Dict[str, Any]], records: List[Dict[str, Any]],
                table_arg: Optional[str]) -> None:
    """Print :func:`thin_leaves`' entries as a table, and the ``tune --leaf``
    command that times more geometries there (``--table table_arg`` if given)."""
    if not thin:
        print(f"no leaf of {table.source or 'the table'} has a candidate that beats its choice "
              f"on fewer than {MIN_SUPPORT} of its geometries")
        return
    print(f"{len(thin)} candidates beat their leaf's choice on fewer than {MIN_SUPPORT} of its "
          f"geometries ({table.source or 'the table'}):")
    print(f"{'leaf':>5} {'n':>4} {'choice':>9} {'candidate':>9} {'on':>3} {'speedup':>8} "
          f"{'leaf now':>9}")
    for e in thin:
        print(f"{e['leaf']:>5} {e['n']:>4} {e['choice']:>9} {e['candidate']:>9} "
              f"{e['support']:>3} {e['speedup']:>7.3f}x {e['leaf_slowdown']:>8.3f}x")
    seeds = sorted({r["seed"] for r in records if isinstance(r.get("seed"), int)})
    leaves = " ".join(f"--leaf {n}" for n in dict.fromkeys(e["leaf"] for e in thin))
    if table.op == "gather":
        print("time every candidate on more geometries of these leaves (S: a seed the records "
              f"do not hold; they hold {', '.join(map(str, seeds)) or 'none'}), then fit again "
              "with the new records:")
        print(f"  python -m cugather tune {leaves}"
              + (f" --table {table_arg}" if table_arg else "")
              + " --geometries 12 --seed S --records FILE --out FILE")
