"""Tuning records: reading the JSON lines ``python -m cugather tune`` writes,
merging runs of the same geometries, and keeping the records a fit can use
(their features computed again from their shapes).  Pure Python (no GPU)."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any, Dict, List, Optional

__all__ = ["read_records", "usable_records", "refeature", "refeature_elements", "rule_limits"]


def read_records(paths) -> List[Dict[str, Any]]:
    """The records of ``paths`` in order; a record of the same seed and geometry
    index as an earlier one (a run with ``--only``) takes that one's place, or,
    marked ``"partial"`` (``--only KIND --partial``), adds its times and errors
    to it.  A partial record with no earlier one is dropped: the fastest
    candidate of a geometry is known only where every candidate was timed.  So
    is one timed on another GPU than the record it would add to (their
    ``"device"`` names differ), with a warning: times of two GPUs do not rank
    candidates against each other.

    A line that is not a record (a run cut short leaves its last line
    incomplete) and the rest of a gzip file that ends early are skipped with a
    warning; OSError or ValueError names a file that cannot be read at all."""
    import gzip

    out: List[Dict[str, Any]] = []
    where: Dict[Any, int] = {}
    for p in paths:
        skipped: List[int] = []
        foreign: Dict[str, int] = {}
        try:
            with (gzip.open(p, "rt") if str(p).endswith(".gz") else open(p)) as f:
                for lineno, line in enumerate(f, 1):
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        rec = None
                    if not _well_formed(rec):
                        skipped.append(lineno)
                        continue
                    other = _add_record(out, where, rec)
                    if other is not None:
                        foreign[other] = foreign.get(other, 0) + 1
        except EOFError:
            warnings.warn(f"cugather tune: {p} ends early (a gzip file cut short); its "
                          f"records up to there are used", stacklevel=2)
        except UnicodeDecodeError as e:
            raise ValueError(f"{p} is not a file of JSON lines ({e})") from None
        if skipped:
            warnings.warn(f"cugather tune: skipped {len(skipped)} line(s) of {p} that are not "
                          f"records (line {', '.join(map(str, skipped[:5]))}"
                          f"{', ...' if len(skipped) > 5 else ''}); a run cut short leaves "
                          f"its last line incomplete", stacklevel=2)
        for pair, n in foreign.items():
            warnings.warn(f"cugather tune: dropped {n} partial record(s) of {p} timed on "
                          f"{pair}: a partial record adds to a record of the same GPU only; "
                          f"time every candidate there (--only KIND without --partial)",
                          stacklevel=2)
    return out


def _well_formed(rec: Any) -> bool:
    """Whether ``rec`` (a parsed line) is a record :func:`read_records` can merge."""
    return (isinstance(rec, dict)
            and all(isinstance(rec.get(k), (int, type(None))) for k in ("seed", "index"))
            and all(isinstance(rec.get(k, {}), dict) for k in ("times", "errors"))
            and (not rec.get("partial") or "times" in rec))


def _add_record(out: List[Dict[str, Any]], where: Dict[Any, int],
                rec: Dict[str, Any]) -> Optional[str]:
    """Merge ``rec`` into ``out``; where a partial record is dropped because its
    GPU is not its base record's, "X, the record's Y" (else None)."""
    key = (rec.get("seed"), rec.get("index"))
    if rec.pop("partial", False):
        if None not in key and key in where:
            base = out[where[key]]
            mine, theirs = rec.get("device"), base.get("device")
            if mine and theirs and mine != theirs:
                return f"{mine}, the record's {theirs}"
            errors = {k: v for k, v in base.get("errors", {}).items() if k not in rec["times"]}
            errors.update(rec.get("errors", {}))
            out[where[key]] = dict(base, times={**base.get("times", {}), **rec["times"]},
                                   errors=errors)
        return None
    if None not in key and key in where:
        out[where[key]] = rec
        return None
    if None not in key:
        where[key] = len(out)
    out.append(rec)
    return None


def usable_records(records: List[Dict[str, Any]], op: str) -> List[Dict[str, Any]]:
    """``op``'s records that carry times, with their features computed again from
    their shapes; a record whose times, rule, shape or features cannot be used
    is dropped with a warning."""
    from ..plan.table import spec_of

    spec = spec_of(op)
    recompute = refeature if op == "gather" else refeature_elements
    out: List[Dict[str, Any]] = []
    bad: List[Any] = []
    for r in records:
        if r.get("op", "gather") != op or not r.get("times"):
            continue
        why = _times_problem(r)
        if why is None:
            try:
                r = recompute(r)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
                why = f"its shape or features cannot be read ({type(e).__name__}: {e})"
            else:
                f = r.get("features")
                missing = [n for n in spec.features
                           if not isinstance(f, dict) or not _finite_number(f.get(n))]
                if missing:
                    why = f"its features lack {', '.join(missing[:3])}"
        if why is not None:
            bad.append((r.get("seed"), r.get("index"), why))
            continue
        out.append(r)
    if bad:
        seed, index, why = bad[0]
        warnings.warn(f"cugather tune: dropped {len(bad)} record(s) that cannot be used; the "
                      f"first (seed {seed}, index {index}): {why}", stacklevel=2)
    return out


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _times_problem(r: Dict[str, Any]) -> Optional[str]:
    times = r["times"]
    if not all(isinstance(k, str) and _finite_number(v) and v > 0 for k, v in times.items()):
        return "its times are not all positive numbers"
    if r.get("rule") not in times:
        return f"the rules' candidate {r.get('rule')!r:.40} has no time"
    return None


def rule_limits(rec: Dict[str, Any]) -> Any:
    """The limits the rules had, without a table, on the GPU that timed ``rec``:
    its SM count and shared memory per block, kept in records since they were
    added; for older records an H200's (they were timed on H200s and H100s,
    132 SMs both)."""
    from ..plan.core import DeviceLimits

    lim = rec.get("limits")
    if isinstance(lim, list) and len(lim) == 2 and all(type(x) is int and x > 0 for x in lim):
        return DeviceLimits(lim[0], lim[1], "")
    return DeviceLimits()


def refeature(rec: Dict[str, Any]) -> Dict[str, Any]:
    """``rec`` with its features and the rules' choice computed again from its
    shape (records written before a feature was added or a rule changed stay
    usable and are scored against today's rules; the unit is the one recorded).
    The rules' choice is the tuner's: a C-contiguous, 256-byte aligned operand,
    the limits of the GPU that timed it (:func:`rule_limits`), and a length-1
    axis asked in fill mode; a choice the record did not time keeps the
    recorded one."""
    from ..plan.core import Operand
    from ..plan.table import features
    from .tune import _label, rules_plan

    s = rec.get("shape")
    if s is None:
        return rec
    f = features(s["row_bytes"], int(rec["features"]["unit"]), s["outer"], s["n_indices"],
                 s["axis_len"], 4 if s["index_dtype"] == "int32" else 8)
    op = Operand.contiguous(tuple(s["shape"]), int(s["itemsize"]))
    rule = _label(rules_plan(op, tuple(s["indices"]), s["index_dtype"], int(s["axis"]),
                             rule_limits(rec)))
    return dict(rec, features=f, rule=rule if rule in rec["times"] else rec["rule"])


def refeature_elements(rec: Dict[str, Any]) -> Dict[str, Any]:
    """An elements record with its features and the rules' choice computed again
    from its shape (the tuner's C-contiguous, 256-byte aligned operands; the
    limits of the GPU that timed it, :func:`rule_limits`): records stay usable
    when a feature or a rule changes."""
    from ..plan.core import Operand
    from ..plan.elements import elements_features_of
    from .tune_elements import _label, rules_plan

    s = rec.get("shape")
    if s is None:
        return rec
    op = Operand.contiguous(tuple(s["shape"]), int(s["itemsize"]))
    args = (op, tuple(s["indices"]), s["index_dtype"], int(s["axis"]))
    rule = _label(rules_plan(*args, rule_limits(rec)))
    return dict(rec, features=elements_features_of(*args),
                rule=rule if rule in rec["times"] else rec["rule"])
