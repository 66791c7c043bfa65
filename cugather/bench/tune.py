"""``python -m cugather tune``: time every candidate Gather plan of random geometries
and fit the tuning table the planner consults (:mod:`cugather.plan.table`).

    python -m cugather tune [--op gather|elements] [--geometries 2000] [--seed 1000]
                            [--out FILE] [--records FILE] [--time-limit S] [--only KIND]
    python -m cugather tune --fit RECORDS [RECORDS ...] --out FILE   # no GPU needed
                            [--min-leaf N] [--penalty P] [--base TABLE]
    python -m cugather tune --thin --fit RECORDS [...] [--table TABLE] # no GPU needed
    python -m cugather tune --leaf N [--leaf M ...] [--table TABLE] [--geometries 12]

``--where "FEATURE OP VALUE"`` (repeatable; OP one of ``<= >= < > ==``, FEATURE
one of :data:`cugather.plan.table.FEATURES`) times only the geometries of the
seed's draw whose features satisfy every condition, ``--geometries`` of them,
each recorded under its index in the draw: more timings where a region of the
distribution is too sparse for the fit to separate (Gather only).

``--op elements`` does the same for GatherElements / take_along_axis: its
geometries are :func:`cugather.bench.tune_elements.draw_elements_shapes`, its
candidates :data:`cugather.plan.table.ELEMENTS_CANDIDATES`, checked against
``cupy.take_along_axis``, its default table ``<kernel cache
folder>/tuning/<arch>.elements.json``; ``--fit`` takes the op from the records.
The shipped ``cugather/plan/tables/sm_90.elements.json`` is the ``--fit`` of
``benchmarks/tune-sm_90-elements-seed1000.jsonl.gz`` (``--op elements
--geometries 1500 --seed 1000``).

``--thin --fit RECORDS`` (no GPU) lists the leaves of a table (``--table``, or
the one cugather uses for the records' GPU) where a candidate runs the
records it applies to 1.05x or more faster than what the planner runs there,
on fewer of them than :data:`~cugather.plan.table.MIN_SUPPORT` (so the fit
could not rank it): :func:`thin_leaves`.  ``--leaf N`` (repeatable) then times
``--geometries`` draws in each leaf named, so that a fit with the new records
can decide there.

The shipped H200 table (``cugather/plan/tables/sm_90.json``) keeps the command
that fitted it in ``meta["command"]``: the ``--fit`` of record files in
``benchmarks/`` (2000 geometries of each of the seeds 1000-1002, 300
``--where`` geometries of seed 1003, and the ``--only`` / ``--partial``
records of each kernel added since, in the order they were timed) with
``--min-leaf 6 --penalty 4``, under the splits of the table before it
(``--base``).  BENCHMARKS.md, section "Kernel choice by measurement", gives
each step and what it measured.

Geometries are the sweep's (:func:`cugather.bench.sweep.draw_shapes`, the
distribution its docstring documents), in wrap mode.  Per geometry, every
candidate of :data:`cugather.plan.table.CANDIDATES` that applies is planned
with the device's limits, bound once, checked byte for byte against
``cupy.take`` and timed with CUDA events behind a holding kernel (two
warm-up calls, then samples until about :data:`TARGET_MS` are timed, at
least :data:`MIN_SAMPLES`), median kept.  One JSON line per geometry goes to
``--records`` as it is timed, so a run cut short keeps what it measured.
``--only KIND`` times only the geometries that kernel kind applies to (a new
kernel's geometries, timed again with every candidate); ``--fit`` then takes
the old records and the new ones, and a later record of the same seed and
geometry index replaces an earlier one.  With ``--partial`` only KIND's
candidate is timed (and nothing fitted): ``--fit`` adds those times to the
earlier record of the same geometry if that was timed on a GPU of the same
name, and drops them with a warning otherwise.  ``--only KIND,OTHER,...`` takes KIND's
geometries and, with ``--partial``, times the other kinds' candidates there
too, on the same machine in the same run (a new kernel beside the ones it
competes with).

The fit scores each geometry against today's rules (their choice for its
shape computed again, where that candidate was timed), so records stay good
when a rule changes.  It holds out every fifth geometry first and reports, on
those, the mean slowdown against the fastest candidate of the table's choice
and of the rules'; then it fits the table on every geometry and writes it to ``--out``
(default: ``<kernel cache folder>/tuning/<arch>.json``, where cugather finds
it; ``CUGATHER_TUNING=FILE`` names another).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy

from ..plan.table import MIN_SUPPORT
from .tune_fit import MIN_LEAF, PENALTY, fit_records, print_thin, thin_leaves
from .tune_records import read_records, usable_records

__all__ = ["add_arguments", "run", "tune_shape", "timed_candidates", "fit_records", "parse_where",
           "draw_where", "thin_leaves",
           "shape_features", "TARGET_MS", "MIN_SAMPLES", "MAX_SAMPLES"]

TARGET_MS = 6.0
MIN_SAMPLES, MAX_SAMPLES, WARMUP = 3, 15, 2


def _at_least(low, kind=int):
    """An argparse type: a ``kind`` number of at least ``low``."""
    import argparse

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not math.isfinite(v) or v < low:
            raise argparse.ArgumentTypeError(
                f"must be {'an integer' if kind is int else 'a number'} of at least {low:g}, "
                f"got {text!r}")
        return v
    return parse


def add_arguments(p) -> None:
    p.add_argument("--geometries", type=_at_least(1), default=2000, metavar="N",
                   help="random geometries to time (default 2000)")
    p.add_argument("--seed", type=int, default=1000,
                   help="seed of the geometries (default 1000; the sweep's held-out seeds "
                        "are others)")
    p.add_argument("--start", type=_at_least(0), default=0, metavar="I",
                   help="skip the first I geometries of the seed (split a run in parts)")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="the fitted table (default <kernel cache folder>/tuning/<arch>.json)")
    p.add_argument("--records", default=None, metavar="FILE",
                   help="JSON lines of the timings (default: FILE.records.jsonl beside --out)")
    p.add_argument("--time-limit", type=_at_least(0.0, float), default=None, metavar="S",
                   help="stop timing after S seconds and fit what was timed")
    p.add_argument("--fit", nargs="+", default=None, metavar="RECORDS",
                   help="fit from these record files only (JSON lines, or .gz of them; no GPU "
                        "needed)")
    p.add_argument("--base", default=None, metavar="TABLE",
                   help="with --fit: keep this table's splits and fit each of its leaves "
                        "again from the records that fall in it (a leaf no new record falls "
                        "in comes out as it was, if the records include the table's own)")
    p.add_argument("--min-leaf", type=_at_least(1), default=MIN_LEAF,
                   help="fewest geometries per leaf")
    p.add_argument("--penalty", type=_at_least(0.0, float), default=PENALTY,
                   help=f"extra cost per log2 of slowdown beyond 2**0.25 (default {PENALTY:g})")
    p.add_argument("--only", default=None, metavar="KIND[,OTHER...]",
                   help="time only the geometries kernel kind KIND applies to (Gather); with "
                        "--partial, the OTHER kinds' candidates there too")
    p.add_argument("--where", action="append", default=None, metavar="COND",
                   help='time only geometries whose features meet COND, "FEATURE OP VALUE" '
                        "(OP one of <= >= < > ==; repeatable; Gather only)")
    p.add_argument("--leaf", action="append", type=_at_least(0), default=None, metavar="N",
                   help="time only geometries that fall in leaf N of the table (--table, or "
                        "the one cugather uses on this GPU), --geometries of them in each "
                        "leaf named; repeatable; Gather only")
    p.add_argument("--table", default=None, metavar="TABLE",
                   help="the table --leaf and --thin read (default: the one cugather uses)")
    p.add_argument("--thin", action="store_true",
                   help="with --fit RECORDS: fit nothing; list the table's leaves where a "
                        "candidate beats the leaf's choice on too few of their geometries "
                        f"(under {MIN_SUPPORT}) to be ranked, and how to time more there")
    p.add_argument("--partial", action="store_true",
                   help="with --only: time only KIND's candidate there; --fit adds its times "
                        "to the earlier record of the same seed and geometry, if that was "
                        "timed on the same GPU")
    p.add_argument("--op", default="gather", choices=("gather", "elements"),
                   help="the op whose kernels are timed: gather (Gather / take, the "
                        "default) or elements (GatherElements / take_along_axis)")


def _label(plan) -> Optional[str]:
    """The candidate label of a plan (None for plans no candidate makes)."""
    from ..plan.table import CANDIDATES

    kind = plan.kind
    if kind == "rows":
        return f"rows/{plan.fields['row_unroll']}"
    return kind if any(c[0] == kind for c in CANDIDATES) else None


def rules_plan(operand, indices, index_dtype: str, axis: int, limits):
    """The plan the hand-written rules make for this geometry on a GPU of
    ``limits``' SM count and shared memory, without a table: the candidate a
    tuning record scores the table against.  A length-1 axis is asked in fill
    mode, as wrap mode takes bcast there before any rule (the rules do not
    depend on the mode)."""
    from ..plan.core import DeviceLimits
    from ..plan.gather import plan_gather

    mode = "fill" if operand.shape[axis] == 1 else "wrap"
    return plan_gather(operand, indices, index_dtype, axis, mode,
                       limits=DeviceLimits(limits.sm_count, limits.max_shared_mem, ""))


def tune_shape(cp, s, seed: int, device: int, only: Optional[str] = None,
               partial: bool = False) -> Optional[Dict[str, Any]]:
    """Check and time every applicable candidate of sweep shape ``s``; its record
    (None when ``only``, kinds separated by commas, is given and its first kind
    does not apply).  ``partial``: time those kinds' candidates alone (a record
    marked ``"partial"``)."""
    from ..plan.core import Operand, alignment
    from ..plan.gather import plan_gather
    from ..runtime.launch import CUDA
    from .sweep_run import make_indices, make_table

    limits = CUDA.limits(device)
    if only is not None:  # on the layout make_table gives: C-contiguous, 256-byte aligned
        try:
            plan_gather(Operand.contiguous(s.shape, s.itemsize), s.indices, s.index_dtype,
                        s.axis, "wrap", limits=limits, kind=only.split(",")[0])
        except ValueError:
            return None
    rec: Dict[str, Any] = {"shape": s.as_dict(), "times": {}, "errors": {}}
    if partial:
        rec["partial"] = True
    try:
        data = make_table(cp, s, seed)
        n = s.axis_len
        idx = make_indices(cp, s, seed)
        ref = cp.take(data, cp.where(idx < 0, idx + n, idx), axis=s.axis)
    except Exception as e:  # out of memory, most likely
        rec["errors"]["setup"] = f"{type(e).__name__}: {str(e)[:200]}"
        return rec
    ptr = data.data.ptr
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(ptr))
    args = (operand, s.indices, s.index_dtype, s.axis, "wrap")
    rule_plan = rules_plan(*args[:4], limits)
    rec["rule"] = _label(rule_plan)
    if rule_plan.main is None or rec["rule"] is None:
        rec["errors"]["plan"] = f"no candidate plan ({rule_plan.kind})"
        return rec
    rec["features"] = shape_features(s, operand)
    ref_bytes = ref.view(numpy.uint8).reshape(-1)
    for label, kind, ru in timed_candidates(only, partial):
        try:
            plan = plan_gather(*args, limits=limits, kind=kind, row_unroll=ru)
        except ValueError:
            continue  # does not apply to this geometry
        if plan.main is None or plan.copy_data:
            continue
        time_candidate(cp, rec, label, plan, data, ptr, idx, ref_bytes, device, "cupy.take")
    if not partial and rec["rule"] not in rec["times"]:
        rec["errors"]["rule"] = f"the rules' choice {rec['rule']} was not timed"
        rec["times"] = {}
    return rec


def timed_candidates(only: Optional[str], partial: bool) -> list:
    """The candidates (label, kind, rows per thread) that ``tune_shape`` times: all
    of them, or with ``partial`` those of the kinds in ``only`` (separated by
    commas)."""
    from ..plan.table import CANDIDATES

    if not partial or only is None:
        return list(CANDIDATES)
    kinds = only.split(",")
    return [c for c in CANDIDATES if c[1] in kinds]


def time_candidate(cp, rec: Dict[str, Any], label: str, plan, data, ptr: int, idx, ref_bytes,
                   device: int, reference: str) -> None:
    """Run ``plan`` once, check its bytes against ``ref_bytes`` (the output of
    ``reference``), then time it: its median ms goes to ``rec["times"][label]``, or
    what went wrong to ``rec["errors"][label]``."""
    from ..runtime.binding import bind
    from ..runtime.launch import CUDA, execute
    from .peers import time_cupy
    from .sweep_run import adaptive

    try:
        bound = bind(plan, device, None, CUDA, data.dtype)
        got = execute(bound, data, ptr, idx, None, None, device)
        if not bool((got.view(numpy.uint8).reshape(-1) == ref_bytes).all()):
            rec["errors"][label] = f"result differs from {reference}"
            return
        del got
        times = adaptive(lambda f, r, w: time_cupy(cp, f, r, w),
                         lambda: execute(bound, data, ptr, idx, None, None, device),
                         TARGET_MS, MIN_SAMPLES, MAX_SAMPLES, WARMUP)
        rec["times"][label] = float(numpy.median(times))
    except Exception as e:
        rec["errors"][label] = f"{type(e).__name__}: {str(e)[:200]}"


_OPS = {"<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b, "==": lambda a, b: a == b,
        "<": lambda a, b: a < b, ">": lambda a, b: a > b}


def parse_where(conds) -> list:
    """``--where`` conditions as ``(feature, op, value)``; ValueError names a bad one."""
    import re

    from ..plan.table import FEATURES

    out = []
    for c in conds or ():
        m = re.fullmatch(r"\s*([a-z0-9_]+)\s*(<=|>=|==|<|>)\s*(\S+)\s*", c)
        try:
            value = float(m.group(3)) if m else None
        except ValueError:
            value = None
        if m is None or value is None:
            raise ValueError(f"--where must be 'FEATURE OP VALUE' with OP one of "
                             f"{' '.join(_OPS)}, got {c!r}")
        if m.group(1) not in FEATURES:
            raise ValueError(f"--where feature must be one of {', '.join(FEATURES)}, got "
                             f"{m.group(1)!r}")
        out.append((m.group(1), m.group(2), value))
    return out


def draw_where(n: int, seed: int, start: int = 0, where=(), max_draws: int = 1_000_000,
               keep=None) -> list:
    """``(index, shape)`` of the first ``n`` sweep geometries of ``seed`` from draw
    ``start`` on whose features meet every ``(feature, op, value)`` of ``where``
    (:func:`parse_where`) and, if given, ``keep(features)``; fewer when
    ``max_draws`` draws hold no more."""
    from .sweep import draw_shape

    rng = numpy.random.default_rng(seed)
    out = []
    for i in range(start + max_draws):
        s = draw_shape(rng)
        if i < start:
            continue
        if where or keep is not None:
            f = shape_features(s)
            if not all(_OPS[op](f[name], value) for name, op, value in where):
                continue
            if keep is not None and not keep(f):
                continue
        out.append((i, s))
        if len(out) == n:
            break
    return out


def shape_features(s, operand=None) -> Dict[str, float]:
    """The table features of sweep geometry ``s`` laid out as ``operand`` (default:
    C-contiguous and 256-byte aligned, as the tuner allocates it)."""
    from ..plan.core import Operand
    from ..plan.table import features

    operand = operand or Operand.contiguous(s.shape, s.itemsize)
    return features(s.row_bytes, _unit(operand, s), s.outer, s.n_indices, s.axis_len,
                    4 if s.index_dtype == "int32" else 8)


def _unit(operand, s) -> int:
    """The unit plan_gather computes for C-contiguous ``s`` (its ``unit`` feature)."""
    from ..plan.core import unit_for

    s_outer = s.axis_len * s.row_bytes if s.outer > 1 else 0
    return unit_for(s.row_bytes, operand.align, 256, s_outer, s.row_bytes if s.axis_len > 1 else 0)


def run(args) -> int:
    from ..plan.table import user_table_path

    if args.fit and args.leaf:
        print("--leaf names where to time; --fit times nothing", file=sys.stderr)
        return 2
    if args.fit:
        try:
            records = read_records(args.fit)
        except (OSError, ValueError) as e:
            print(f"--fit: {e}", file=sys.stderr)
            return 2
        ops = {r.get("op", "gather") for r in records}
        if len(ops) > 1:
            print(f"--fit takes the records of one op; these hold {', '.join(sorted(ops))}",
                  file=sys.stderr)
            return 2
        op = ops.pop() if ops else args.op
        arch = next((r.get("arch") for r in records if r.get("arch")), "sm_90")
        if args.thin:
            table = _table_arg(args.table, arch, op)
            if table is None:
                return 2
            usable = usable_records(records, op)
            if not usable:
                print(f"--thin: no timed {op} geometries in {' '.join(args.fit)}",
                      file=sys.stderr)
                return 2
            print_thin(table, thin_leaves(table, usable), records, args.table)
            return 0
        meta = {"arch": arch, "device": next((r.get("device") for r in records
                                              if r.get("device")), ""),
                "command": ("python -m cugather tune --fit " + " ".join(args.fit)
                            + (f" --min-leaf {args.min_leaf}"
                               if args.min_leaf != MIN_LEAF else "")
                            + (f" --penalty {args.penalty:g}" if args.penalty != PENALTY else "")
                            + (f" --base {args.base}" if args.base else "")),
                "fitted": time.strftime("%Y-%m-%d"),
                "seeds": sorted({r["seed"] for r in records if "seed" in r})}
        base = None
        if args.base:
            base = _named_table("--base", args.base, arch, op, "the records are")
            if base is None:
                return 2
        return _write(records, meta, args.out or str(user_table_path(arch, op)), args.min_leaf,
                      op, args.penalty, base)

    if args.base:
        print("--base takes --fit RECORDS (it fits under a table's splits; it times nothing)",
              file=sys.stderr)
        return 2
    if args.thin:
        print("--thin takes --fit RECORDS (it reads timings; it times nothing)", file=sys.stderr)
        return 2
    from .. import validate
    from ..plan.gather import GATHER_KINDS
    from ..runtime.launch import CUDA

    if args.only is not None and (any(k not in GATHER_KINDS for k in args.only.split(","))
                                  or args.op != "gather"):
        print(f"--only takes kinds of {', '.join(GATHER_KINDS)}, separated by commas (with "
              f"--op gather), got {args.only!r}", file=sys.stderr)
        return 2
    if args.only is not None and "," in args.only and not args.partial:
        print(f"--only {args.only}: several kinds need --partial (without it every candidate "
              f"of the first kind's geometries is timed)", file=sys.stderr)
        return 2
    if args.partial and args.only is None:
        print("--partial needs --only KIND", file=sys.stderr)
        return 2
    try:
        where = parse_where(args.where)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if (where or args.leaf) and args.op != "gather":
        print(f"{'--where' if where else '--leaf'} takes Gather's features (--op gather)",
              file=sys.stderr)
        return 2

    cp = validate.cupy_module()
    device = cp.cuda.Device().id
    limits = CUDA.limits(device)
    arch = limits.arch
    name = cp.cuda.runtime.getDeviceProperties(device)["name"]
    name = name.decode() if isinstance(name, bytes) else str(name)
    out = args.out or str(user_table_path(arch, args.op))
    rec_path = Path(args.records or out + ".records.jsonl")
    rec_path.parent.mkdir(parents=True, exist_ok=True)
    if args.op == "elements":
        from .tune_elements import draw_elements_shapes, tune_elements_shape

        shapes = list(enumerate(draw_elements_shapes(args.start + args.geometries,
                                                     args.seed)))[args.start:]
    else:
        keep, wanted = None, args.geometries
        if args.leaf:
            table = _table_arg(args.table, arch, "gather")
            if table is None:
                return 2
            try:
                keep = _leaf_quota(table, args.leaf, args.geometries)
            except ValueError as e:
                print(f"--leaf: {e}", file=sys.stderr)
                return 2
            wanted = args.geometries * len(set(args.leaf))
        shapes = draw_where(wanted, args.seed, args.start, where, keep=keep)
        if len(shapes) < wanted:
            print(f"{'--leaf' if args.leaf else '--where'}: {len(shapes)} of the seed's draws "
                  f"qualify", flush=True)
    t0 = time.perf_counter()
    records: List[Dict[str, Any]] = []
    pool = cp.get_default_memory_pool()
    with open(rec_path, "a") as f:
        for i, (index, s) in enumerate(shapes):
            if args.time_limit is not None and time.perf_counter() - t0 > args.time_limit:
                print(f"time limit reached after {i} geometries", flush=True)
                break
            gseed = args.seed * 1_000_003 + index
            rec = (tune_elements_shape(cp, s, gseed, device) if args.op == "elements"
                   else tune_shape(cp, s, gseed, device, args.only, args.partial))
            if rec is None:
                continue
            rec.update(arch=arch, device=name, seed=args.seed, index=index,
                       limits=[limits.sm_count, limits.max_shared_mem])
            records.append(rec)
            f.write(json.dumps(rec) + "\n")
            f.flush()
            pool.free_all_blocks()
            if i % 50 == 0:
                best = min(rec["times"], key=rec["times"].get) if rec["times"] else "-"
                print(f"[{i + 1}/{len(shapes)}] {time.perf_counter() - t0:6.1f} s  "
                      f"{s.label()}: best {best}, rules {rec.get('rule')}", flush=True)
    if args.partial:
        print(f"{len(records)} partial records in {rec_path}; fit them after the full records "
              f"of the same seed: python -m cugather tune --fit FULL... {rec_path}")
        return 0
    meta = {"arch": arch, "device": name, "fitted": time.strftime("%Y-%m-%d"),
            "command": " ".join(["python -m cugather tune"] + sys.argv[2:]),
            "seeds": [args.seed], "tune_seconds": round(time.perf_counter() - t0, 1)}
    return _write(records, meta, out, args.min_leaf, args.op, args.penalty)


def _table_arg(path: Optional[str], arch: str, op: str):
    """The table ``--table`` names, or the one cugather uses for ``arch`` and ``op``;
    None (the reason printed) where there is none."""
    from ..plan.table import table_for

    if path is None:
        table = table_for(arch, op)
        if table is None:
            print(f"no {op} tuning table serves {arch}; name one with --table", file=sys.stderr)
        return table
    return _named_table("--table", path, arch, op, "not")


def _named_table(flag: str, path: str, arch: str, op: str, other: str):
    """The table at ``path`` (given as ``flag``) if it is ``op``'s on ``arch``; else
    None, the reason printed (``other``: how the message names what was wanted)."""
    from ..plan.table import TableError, load_table

    try:
        table = load_table(path)
    except (OSError, TableError) as e:
        print(f"{flag} {path}: {e}", file=sys.stderr)
        return None
    if (table.op, table.arch) != (op, arch):
        print(f"{flag} {path}: a table of {table.op} on {table.arch}, {other} of {op} on {arch}",
              file=sys.stderr)
        return None
    return table


def _leaf_quota(table, leaves, per_leaf: int):
    """``keep(features)`` for :func:`draw_where`: a geometry of one of ``leaves``
    whose leaf has fewer than ``per_leaf`` geometries so far."""
    for leaf in leaves:
        table.conditions(leaf)  # ValueError names a leaf the table lacks
    count = {leaf: 0 for leaf in leaves}

    def keep(feats: Dict[str, float]) -> bool:
        leaf = int(table.leaf_of(feats)["leaf"])
        if count.get(leaf, per_leaf) >= per_leaf:
            return False
        count[leaf] += 1
        return True
    return keep


def _write(records, meta, out: str, min_leaf: int, op: str = "gather",
           penalty: float = PENALTY, base=None) -> int:
    try:
        table, report = fit_records(records, meta, min_leaf, penalty, op=op, base=base)
    except ValueError as e:  # no usable record
        print(f"nothing fitted: {e}", file=sys.stderr)
        return 2
    path = Path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(table.to_dict(), indent=1) + "\n")
    except OSError as e:
        print(f"--out {out}: the table cannot be written ({e}); the records stay where they "
              f"are, fit them again with --fit", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    print(f"{len(table.leaves())} leaves; wrote {path}")
    return 0
