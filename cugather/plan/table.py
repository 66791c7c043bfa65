"""Tuning tables: the kernel a measurement chose, by geometry.  Pure Python.

``python -m cugather tune`` times every candidate plan of thousands of random
geometries on a GPU and fits a decision tree over the features the planner
sees: each leaf names the candidate with the least total slowdown against
the fastest candidate over the geometries that reached it.  There is one
kind of table per op (:class:`TableSpec`): :data:`GATHER` (Gather / take on
contiguous rows: :data:`CANDIDATES`, :func:`features`, consulted by
``plan_gather``) and :data:`ELEMENTS` (GatherElements / take_along_axis:
:data:`ELEMENTS_CANDIDATES`, :func:`elements_features`, consulted by
``plan_elements``).  A planner consults the table of the device's
architecture (:func:`table_for`), and keeps its hand-written rules where
there is no table, where the geometry lies outside the ranges the table was
fitted on, or where the leaf's candidate does not apply to the geometry.  A
plan stays a pure function of the geometry and the table: nothing is timed
during a call.

Where tables come from, first found wins:

1. ``CUGATHER_TUNING=FILE`` (a table written by ``cugather tune --out FILE``;
   it serves the op and the architecture it was fitted on), or several files
   joined by ``os.pathsep`` (one per op); ``CUGATHER_TUNING=none`` uses no
   table at all (the rules alone);
2. ``<kernel cache folder>/tuning/<arch>.json`` (Gather) and
   ``<arch>.elements.json`` (GatherElements), where ``cugather tune`` writes
   by default (``$CUPY_CACHE_DIR/cugather/tuning``; the kernel cache folder
   defaults to ``~/.cupy/kernel_cache/cugather``);
3. the tables shipped in the package (``cugather/plan/tables/``, the same
   names).

A table that cannot be read (a missing file, a FIFO, a file over 8 MiB) or
fails validation is ignored with a warning.
"""

from __future__ import annotations

import json
import math
import os
import stat
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["CANDIDATES", "REFERENCE_ONLY", "FEATURES", "FORMAT", "TuningTable", "Choice",
           "features", "fit", "table_for", "load_table", "clear_tables", "TableError", "SHIPPED",
           "TableSpec", "GATHER", "ELEMENTS", "ELEMENTS_CANDIDATES", "ELEMENTS_FEATURES",
           "elements_features", "spec_of", "BOX_FEATURES"]

#: Version of the table format this code reads and writes.
FORMAT = 3

#: Candidate plans of a contiguous-row Gather: (label, kind, rows per thread).
CANDIDATES: Tuple[Tuple[str, str, Optional[int]], ...] = (
    ("rows/1", "rows", 1), ("rows/2", "rows", 2), ("rows/4", "rows", 4),
    ("chunks", "chunks", None), ("chunks16", "chunks16", None), ("scalar", "scalar", None),
    ("inner", "inner", None),
    ("slab", "slab", None), ("slabw", "slabw", None), ("window", "window", None),
    ("pack", "pack", None), ("weave", "weave", None), ("slabr", "slabr", None),
    ("flat", "flat", None), ("slabf", "slabf", None), ("flatv", "flatv", None),
    ("span", "span", None),
    ("lean", "lean", None),
    ("strided", "strided", None),
)
#: Candidates timed (each geometry's fastest time counts them) but never named by
#: a fitted leaf.  The strided kernel, the fallback for any strides, moves a
#: contiguous row one unit per thread like rows/1: over the 4000 H200 geometries
#: it was fastest on 338 by a median 2%, and a tree free to name it put
#: 128- and 256-byte rows from DRAM on it, 10-15% slower than rows.  A table
#: that names it (an older fit) still loads and is followed.
REFERENCE_ONLY = ("strided",)

#: Features a table splits on (log2 of counts and byte sizes, so thresholds read
#: as powers of two).
FEATURES = ("log2_row_bytes", "unit", "log2_units", "row_mod16", "log2_outer", "log2_picks",
            "log2_rows", "log2_out_bytes", "log2_axis_len", "log2_table_bytes", "index_bytes",
            "log2_picks_per_axis")

#: Candidates that stage a whole axis row in shared memory: they read every byte
#: of it, so the planner takes them only where staging pays (:func:`declines`).
STAGING = ("inner", "slab", "slabw", "slabf", "slabr")
#: Fewest geometries of a leaf a candidate must apply to before the leaf may rank
#: it: a kernel that applies to one geometry of a leaf and is fastest there says
#: little about the others it applies to (H200 seed 6211: a leaf ranked slab on
#: such evidence and ran 21 KB axis rows of one-byte picks at 0.48x the best peer).
MIN_SUPPORT = 4

#: How far past the fitted geometries (in log2 units: about 19%) a table's ranges
#: reach on counts and byte sizes.  Random draws leave the extremes of their
#: distribution unseen: the 4000 H200 geometries stop at outputs of 2**29.997
#: bytes, the sweep's bound is 2**30, and a 1 GiB output of one-unit rows fell to
#: the rules' staging kernel at 0.37x the best peer (seed 5923).
RANGE_SLACK = 0.25

SHIPPED = Path(__file__).with_name("tables")
_MAX_BYTES = 8 << 20
_MAX_DEPTH = 32
_MAX_NODES = 4096


class TableError(ValueError):
    """A tuning table that does not validate."""


def features(row_bytes: int, unit: int, n_outer: int, n_idx: int, axis_len: int,
             index_bytes: int) -> Dict[str, float]:
    """The features of a contiguous-row gather geometry, by name (:data:`FEATURES`)."""
    def lg(x: int) -> float:
        return math.log2(max(x, 1))

    return {"log2_row_bytes": lg(row_bytes), "unit": float(unit),
            "log2_units": lg(row_bytes // max(unit, 1)), "row_mod16": float(row_bytes % 16),
            "log2_outer": lg(n_outer),
            "log2_picks": lg(n_idx), "log2_rows": lg(n_outer * n_idx),
            "log2_out_bytes": lg(n_outer * n_idx * row_bytes),
            "log2_axis_len": lg(axis_len), "log2_table_bytes": lg(n_outer * axis_len * row_bytes),
            "index_bytes": float(index_bytes),
            "log2_picks_per_axis": lg(n_idx) - lg(axis_len)}


def declines(label: str, feats: Dict[str, float]) -> bool:
    """Whether the planner leaves candidate ``label`` out of a geometry with
    features ``feats`` even where its kernel could run it.

    A staging candidate (:data:`STAGING`) reads the whole axis row, where direct
    picks read at most one 32-byte sector each: with fewer picks than the row
    has 32-byte sectors, staging moves more bytes than it saves (H200 seed 6211:
    93 picks from 7 KB axis rows staged at 0.42x the best peer).  ``pack``
    (rows of 3 to 15 bytes merged into 16-byte chunks) is for rows of 1- and
    2-byte units: where a row has a 4- or 8-byte unit, the flat kinds load it
    whole, and over 1007 such H200 tuning geometries pack was never the fastest
    (1.42x-1.62x the fastest in geometric mean; 8-byte rows of held-out seed
    6793 went to pack at 0.42x the best peer).  The fit treats a declined
    candidate like one that does not apply.
    """
    if label == "pack":
        return feats["unit"] >= 4
    if label not in STAGING:
        return False
    return feats["log2_picks"] + 5 < feats["log2_axis_len"] + feats["log2_row_bytes"]


#: Candidate plans of GatherElements / take_along_axis: (label, kind, column tiles).
#: ``elements`` visits the output slots in flat order, ``tiles`` in column tiles,
#: ``row`` stages a data row in shared memory per output row (kernels/elements.cuh).
ELEMENTS_CANDIDATES: Tuple[Tuple[str, str, Optional[bool]], ...] = (
    ("elements", "elements", False), ("tiles", "elements", True), ("row", "elements_row", None),
)

#: Features of a GatherElements table.  ``log2_cols``: output units inside the
#: gathered dimension (a run that moves with data); ``log2_picks``: the output's
#: extent on the gathered axis; ``log2_rows``: the output units over both (the
#: rows of picks: data rows the elements_row kernel stages, one block each);
#: ``log2_axis_bytes``: the bytes one gathered
#: column spans in data (axis length x byte step); ``broadcast``: 1 where
#: indices or data broadcast over an output dimension (take_along_axis), which
#: the tuner does not draw, so such geometries lie outside every fitted range.
ELEMENTS_FEATURES = ("unit", "log2_total", "log2_out_bytes", "log2_cols", "log2_rows",
                     "log2_picks", "log2_axis_len", "log2_axis_bytes", "log2_data_bytes",
                     "log2_picks_per_axis", "index_bytes", "ndim", "broadcast")


def elements_features(unit: int, total: int, cols: int, picks: int, axis_len: int,
                      s_axis: int, data_bytes: int, index_bytes: int, ndim: int,
                      broadcast: bool) -> Dict[str, float]:
    """The features of a GatherElements geometry, by name (:data:`ELEMENTS_FEATURES`):
    ``total`` output units of ``unit`` bytes, ``cols`` of them inside the gathered
    dimension, ``picks`` the output's extent on the gathered axis, ``ndim`` the
    merged dimensions of the plan."""
    def lg(x: int) -> float:
        return math.log2(max(x, 1))

    return {"unit": float(unit), "log2_total": lg(total), "log2_out_bytes": lg(total * unit),
            "log2_cols": lg(cols), "log2_rows": lg(total // max(cols * picks, 1)),
            "log2_picks": lg(picks), "log2_axis_len": lg(axis_len),
            "log2_axis_bytes": lg(axis_len * abs(s_axis)), "log2_data_bytes": lg(data_bytes),
            "log2_picks_per_axis": lg(picks) - lg(axis_len), "index_bytes": float(index_bytes),
            "ndim": float(ndim), "broadcast": float(bool(broadcast))}


def _elements_declines(label: str, feats: Dict[str, float]) -> bool:
    """``row`` reads the whole data row per output row: declined where the row's
    picks touch fewer bytes than the row (as :func:`declines` for Gather)."""
    return label == "row" and feats["log2_picks"] + 5 < feats["log2_axis_bytes"]


@dataclass(frozen=True)
class TableSpec:
    """What one op's tables hold: its candidates ``(label, kind, variant)`` (the
    variant is rows per thread for Gather, column tiles for GatherElements), the
    features a split may name, candidates timed but never chosen, which
    candidates a geometry declines (``declines(label, feats)``), and the file
    name's suffix after the architecture."""

    op: str
    candidates: Tuple[Tuple[str, str, Any], ...]
    features: Tuple[str, ...]
    reference_only: Tuple[str, ...]
    declines: Any
    suffix: str
    #: Thresholds per feature a fit tries two levels deep where no single split
    #: pays (0: greedy splits only).
    lookahead: int = 0
    #: Features whose range over a leaf's geometries the fit stores in the leaf
    #: (``"box"``): a geometry outside it keeps the rules, as one outside the
    #: table's ranges does.
    box: Tuple[str, ...] = ()

    @property
    def kind_of(self) -> Dict[str, Tuple[str, Any]]:
        return {label: (kind, v) for label, kind, v in self.candidates}

    def file_name(self, arch: str) -> str:
        return f"{arch}{self.suffix}.json"


#: A leaf speaks for the row sizes and units of the geometries it was fitted on,
#: not beyond: leaves are cut on whatever separates their geometries best, and a
#: leaf of rows under 17 bytes (where the window kernel does not apply) ranked
#: rows/2 for 75-byte rows: 0.53 TB/s where the window kernel the rules choose
#: moves 1.60 (H200, a shape of held-out seed 3141).
BOX_FEATURES = ("log2_row_bytes", "unit")
#: How far past its box, by feature, a geometry may lie and still take its
#: leaf's choice: rows up to twice as long or half as short as the leaf's
#: (75-byte rows stay out of a leaf of rows under 17 bytes).  With tables
#: fitted on two H200 tuning seeds and scored on the third, the planner took
#: 1.0152x, 1.0178x and 1.0137x the fastest candidate's time with this
#: slack, 1.0171x, 1.0185x and 1.0145x with none.
BOX_SLACK = {"log2_row_bytes": 1.0}
GATHER = TableSpec("gather", CANDIDATES, FEATURES, REFERENCE_ONLY, declines, "",
                   box=BOX_FEATURES)
ELEMENTS = TableSpec("elements", ELEMENTS_CANDIDATES, ELEMENTS_FEATURES, (),
                     _elements_declines, ".elements", lookahead=16)
_SPECS = {spec.op: spec for spec in (GATHER, ELEMENTS)}


def spec_of(op: str) -> TableSpec:
    """The :class:`TableSpec` of ``op`` (``"gather"`` or ``"elements"``)."""
    try:
        return _SPECS[op]
    except KeyError:
        raise ValueError(f"op must be one of {', '.join(_SPECS)}, got {op!r}") from None


@dataclass(frozen=True)
class Choice:
    """A table's answer: the candidate, its kind and variant (rows per thread for
    Gather, column tiles for GatherElements), and why; ``then``, the leaf's next
    candidates in order, as (label, kind, variant), for geometries the first one
    does not apply to."""

    label: str
    kind: str
    variant: Any
    leaf: int
    why: str       # the path of conditions to the leaf
    then: Tuple[Tuple[str, str, Any], ...] = ()

    @property
    def ranked(self) -> Tuple[Tuple[str, str, Any], ...]:
        """Every candidate of the leaf, first choice first."""
        return ((self.label, self.kind, self.variant),) + self.then


class TuningTable:
    """A fitted decision tree over the features of one op (``spec``, named by
    ``meta["op"]``, Gather where absent; see the module docstring).

    Build with :meth:`from_dict` (validates) or :func:`fit`; :meth:`choose`
    answers a geometry, :meth:`to_dict` is the JSON form.
    """

    def __init__(self, meta: Dict[str, Any], tree: Dict[str, Any], ranges: Dict[str, list],
                 source: str = "") -> None:
        self.meta, self.tree, self.ranges, self.source = meta, tree, ranges, source
        self.spec = _SPECS[str(meta.get("op", "gather"))]

    @property
    def op(self) -> str:
        return self.spec.op

    @property
    def arch(self) -> str:
        return str(self.meta["arch"])

    @classmethod
    def from_dict(cls, d: Any, source: str = "") -> "TuningTable":
        """Validate ``d`` (a parsed JSON table); TableError names what is wrong."""
        if not isinstance(d, dict):
            raise TableError(f"a tuning table is a JSON object, got {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise TableError(f"format must be {FORMAT}, got {d.get('format')!r}")
        meta = d.get("meta")
        if not isinstance(meta, dict) or not isinstance(meta.get("arch"), str) \
                or not meta["arch"].startswith("sm_"):
            raise TableError("meta.arch must be a string like 'sm_90'")
        op = meta.get("op", "gather")
        if op not in _SPECS:
            raise TableError(f"meta.op must be one of {', '.join(_SPECS)}, got {op!r:.40}")
        spec = _SPECS[op]
        ranges = d.get("ranges")
        if not isinstance(ranges, dict) or set(ranges) != set(spec.features):
            raise TableError(f"ranges must give [low, high] for each of {spec.features}")
        for name, r in ranges.items():
            if not (isinstance(r, list) and len(r) == 2 and all(_is_number(v) for v in r)
                    and r[0] <= r[1]):
                raise TableError(f"ranges.{name} must be [low, high], got {r!r:.60}")
        count = [0]
        _check_node(d.get("tree"), 0, count, spec)
        return cls(meta, d["tree"], {k: [float(v[0]), float(v[1])] for k, v in ranges.items()},
                   source)

    def to_dict(self) -> Dict[str, Any]:
        return {"format": FORMAT, "meta": self.meta, "ranges": self.ranges, "tree": self.tree}

    def leaves(self) -> List[Dict[str, Any]]:
        """Every leaf, in order of its id."""
        out: List[Dict[str, Any]] = []

        def walk(node: Dict[str, Any]) -> None:
            if "choice" in node:
                out.append(node)
            else:
                walk(node["le"])
                walk(node["gt"])
        walk(self.tree)
        return sorted(out, key=lambda n: n["leaf"])

    def leaf_of(self, feats: Dict[str, float]) -> Dict[str, Any]:
        """The leaf ``feats`` reach (its ranges and box not asked)."""
        return self._walk(feats)[0]

    def conditions(self, leaf: int) -> List[Tuple[str, str, float]]:
        """The splits on the way to leaf ``leaf`` as ``(feature, "<=" or ">",
        threshold)``; ValueError where the table has no such leaf."""
        def walk(node: Dict[str, Any], path: list) -> Optional[list]:
            if "choice" in node:
                return path if node["leaf"] == leaf else None
            name, t = node["feature"], float(node["threshold"])
            return (walk(node["le"], path + [(name, "<=", t)])
                    or walk(node["gt"], path + [(name, ">", t)]))

        found = walk(self.tree, [])
        if found is None:
            raise ValueError(f"leaf must be one of the table's {len(self.leaves())} leaves "
                             f"(0 to {max(n['leaf'] for n in self.leaves())}), got {leaf!r}")
        return found

    def _walk(self, feats: Dict[str, float]) -> Tuple[Dict[str, Any], List[Tuple[str, str, float]]]:
        node, path = self.tree, []
        while "choice" not in node:
            name, t = node["feature"], node["threshold"]
            if feats[name] <= t:
                node, op = node["le"], "<="
            else:
                node, op = node["gt"], ">"
            path.append((name, op, t))
        return node, path

    def choose(self, feats: Dict[str, float]) -> Optional[Choice]:
        """The leaf's candidate for ``feats``; None where :meth:`lookup` gives none."""
        return self.lookup(feats)[0]

    def lookup(self, feats: Dict[str, float]) -> Tuple[Optional[Choice], str]:
        """(the leaf's candidate for ``feats``, "") or (None, why the rules decide):
        outside the fitted ranges, outside the leaf's ``box`` (the range of some
        features over its geometries), or a leaf that keeps the rules."""
        for name, (lo, hi) in self.ranges.items():
            if not lo <= feats[name] <= hi:
                return None, f"{name} {feats[name]:g} outside the fitted {lo:g} to {hi:g}"
        node, conds = self._walk(feats)
        path = [f"{name} {op} {t:g}" for name, op, t in conds]
        label = node["choice"]
        if label == "rule":
            return None, f"its leaf {node['leaf']} keeps them"
        for name, (lo, hi) in node.get("box", {}).items():
            slack = BOX_SLACK.get(name, 0.0)
            if not lo - slack <= feats[name] <= hi + slack:
                return None, (f"{name} {feats[name]:g} outside the {lo:g} to {hi:g} of the "
                              f"geometries its leaf {node['leaf']} was fitted on"
                              + (f", by more than {slack:g}" if slack else ""))
        kind_of = self.spec.kind_of
        kind, variant = kind_of[label]
        then = tuple((t,) + kind_of[t] for t in node.get("then", ()))
        return Choice(label, kind, variant, int(node["leaf"]),
                      " and ".join(path) or "every geometry", then), ""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_node(node: Any, depth: int, count: list, spec: TableSpec) -> None:
    count[0] += 1
    if depth > _MAX_DEPTH or count[0] > _MAX_NODES:
        raise TableError(f"the tree is deeper than {_MAX_DEPTH} or has more than {_MAX_NODES} "
                         f"nodes")
    if not isinstance(node, dict):
        raise TableError(f"a tree node is a JSON object, got {type(node).__name__}")
    known = spec.kind_of
    if "choice" in node:
        if node["choice"] != "rule" and node["choice"] not in known:
            raise TableError(f"unknown candidate {node['choice']!r:.40} (known: "
                             f"{', '.join(known)}, rule)")
        if not isinstance(node.get("leaf"), int) or isinstance(node.get("leaf"), bool):
            raise TableError("every leaf carries an integer 'leaf' id")
        then = node.get("then", [])
        if not (isinstance(then, list) and len(then) < len(known)
                and all(isinstance(t, str) and t in known for t in then)
                and len(set(then) | {node["choice"]}) == len(then) + 1
                and (not then or node["choice"] != "rule")):
            raise TableError(f"a leaf's 'then' lists other candidates than its choice, each "
                             f"once, after a choice that is not 'rule'; got {then!r:.60}")
        box = node.get("box", {})
        if not isinstance(box, dict) or not all(
                name in spec.features and isinstance(r, list) and len(r) == 2
                and all(_is_number(v) for v in r) and r[0] <= r[1] for name, r in box.items()):
            raise TableError(f"a leaf's 'box' gives [low, high] for some of {spec.features}; "
                             f"got {box!r:.80}")
        return
    if node.get("feature") not in spec.features or not _is_number(node.get("threshold")):
        raise TableError(f"a split names one of {spec.features} and a finite threshold, got "
                         f"{node.get('feature')!r:.40} / {node.get('threshold')!r:.40}")
    _check_node(node.get("le"), depth + 1, count, spec)
    _check_node(node.get("gt"), depth + 1, count, spec)


# ---------------------------------------------------------------- where tables come from
_tables: Dict[Tuple[str, str], Optional[TuningTable]] = {}
_warned: set = set()
_tables_lock = threading.Lock()


def clear_tables() -> None:
    """Forget the tables read so far (the next plan reads them again)."""
    with _tables_lock:
        _tables.clear()
        _warned.clear()


def load_table(path: Any) -> TuningTable:
    """Read and validate the table at ``path`` (TableError or OSError on failure).

    Only a regular file of at most 8 MiB is read, opened without blocking, so
    a FIFO or a device named by mistake is refused instead of waited on.
    """
    p = Path(path)
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TableError("not a regular file")
        if st.st_size > _MAX_BYTES:
            raise TableError(f"{st.st_size} bytes, more than a table's {_MAX_BYTES}")
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read(_MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        d = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise TableError(f"not JSON: {e}") from None
    return TuningTable.from_dict(d, str(p))


def user_table_path(arch: str, op: str = "gather") -> Path:
    """``<kernel cache folder>/tuning/<arch>.json`` (``<arch>.elements.json`` for
    GatherElements): ``cugather tune``'s default output."""
    from ..compile.diskcache import cache_dir

    return Path(cache_dir()) / "tuning" / spec_of(op).file_name(arch)


def table_for(arch: str, op: str = "gather") -> Optional[TuningTable]:
    """The ``op`` tuning table serving ``arch`` (``"sm_90"``), or None (the rules
    decide)."""
    try:
        return _tables[(op, arch)]
    except KeyError:
        pass
    with _tables_lock:
        if (op, arch) not in _tables:
            _tables[(op, arch)] = _find(arch, spec_of(op))
        return _tables[(op, arch)]


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _find(arch: str, spec: TableSpec) -> Optional[TuningTable]:
    env = os.environ.get("CUGATHER_TUNING")
    if env == "none":
        return None
    places: List[Tuple[Path, bool]] = []
    if env:
        places.extend((Path(p), True) for p in env.split(os.pathsep) if p)
    places.append((user_table_path(arch, spec.op), False))
    places.append((SHIPPED / spec.file_name(arch), False))
    for path, named in places:
        if not named and not path.is_file():
            continue
        try:
            table = load_table(path)
        except (OSError, TableError) as e:
            _warn_once(f"cugather ignores the tuning table {path}: {e}")
            continue
        if table.op != spec.op:  # a table of the other op: it serves that one
            continue
        if table.arch == arch:
            return table
        if named:  # CUGATHER_TUNING for another GPU: say so once, then look further
            _warn_once(f"cugather: the tuning table {path} (CUGATHER_TUNING) was fitted on "
                       f"{table.arch}; this GPU is {arch}, so it is not used here")
    return None


# ---------------------------------------------------------------- fitting
def fit(records: Sequence[Dict[str, Any]], meta: Dict[str, Any], *, min_leaf: int = 12,
        max_depth: int = 12, min_gain: float = 0.02, penalty: float = 0.0,
        tolerance: float = 0.25, spec: TableSpec = GATHER,
        base: Optional[TuningTable] = None) -> TuningTable:
    """Fit a table to timed geometries.

    Parameters
    ----------
    records : sequence of dict
        One per geometry: ``"features"`` (:func:`features`), ``"times"`` (median
        ms by candidate label, only the candidates that apply) and ``"rule"``
        (the label the rules choose).
    meta : dict
        Stored as the table's ``meta`` (``arch`` required; ``op`` is set from
        ``spec``).
    min_leaf : int
        Fewest geometries per leaf.
    max_depth : int
        Deepest split.
    min_gain : float
        Least reduction of the summed log2 slowdown a split must bring.
    penalty, tolerance : float
        A slowdown beyond ``2**tolerance`` costs ``penalty`` times its excess
        (in log2) on top: a leaf then avoids a candidate that is best on
        average but far off on some of its geometries.
    spec : TableSpec
        The op whose candidates and features the records carry.
    base : TuningTable, optional
        Keep this table's splits and grow each of its leaves again from the
        records that fall in it; a leaf no record falls in is kept as it is.
        Refitted on the records it was fitted on plus new ones, the table
        changes only where the new records lie (a full fit moves splits
        everywhere).

    Each geometry's cost of a candidate is ``log2(time / fastest time)``; a
    candidate that does not apply costs what the rule's choice costs (the
    planner falls back to it).  :data:`REFERENCE_ONLY` candidates count in the
    fastest time but are never a leaf's choice.  Splits are chosen greedily,
    the best threshold of the best feature first.  A leaf ranks candidates
    (:func:`_rank`): its ``choice``, then under ``then`` the candidates for
    the geometries where the earlier ones do not apply; the planner takes the
    first that applies, and the rules where none does.  For the features of
    ``spec.box`` a leaf that ranks candidates stores their range over its
    geometries (``"box"``); the table keeps the rules outside it.
    """
    import numpy

    if base is not None and base.op != spec.op:
        raise ValueError(f"base is a table of {base.op!r}, the records are of {spec.op!r}")
    features_ = spec.features
    labels = [c[0] for c in spec.candidates if c[0] not in spec.reference_only] + ["rule"]
    rows = [r for r in records if r.get("times")]
    if not rows:
        raise ValueError("no timed geometries to fit")
    X = numpy.array([[r["features"][f] for f in features_] for r in rows], dtype=float)
    cost = numpy.empty((len(rows), len(labels)))
    def loss(slowdown: float) -> float:
        x = math.log2(slowdown)
        return x + penalty * max(0.0, x - tolerance)

    for g, r in enumerate(rows):
        times = r["times"]
        best = min(times.values())
        rule = loss(times[r["rule"]] / best)
        for c, label in enumerate(labels[:-1]):
            cost[g, c] = loss(times[label] / best) if label in times else rule
        cost[g, -1] = rule
    ids = [0]

    applies = numpy.array([[label in r["times"] and not spec.declines(label, r["features"])
                            for label in labels[:-1]] for r in rows])
    cost[:, :-1] = numpy.where(applies, cost[:, :-1], cost[:, -1:])

    def leaf(idx: Any) -> Dict[str, Any]:
        ranked, spent = _rank(cost, applies, idx)
        ids[0] += 1
        n = len(idx)
        node = {"choice": labels[ranked[0]] if ranked else "rule", "leaf": ids[0] - 1, "n": n,
                "mean_slowdown": round(2 ** (spent / n), 4),
                "rule_slowdown": round(2 ** (cost[idx, -1].sum() / n), 4)}
        if len(ranked) > 1:
            node["then"] = [labels[c] for c in ranked[1:]]
        if ranked and spec.box:
            node["box"] = {f: [float(X[idx, fi].min()), float(X[idx, fi].max())]
                           for fi, f in enumerate(features_) if f in spec.box}
        return node

    def best_split(idx: Any, thresholds: Optional[int] = None) -> List[Tuple[float, int, float]]:
        """(score, feature, threshold) of the best split of ``idx`` on each feature
        (each side's best single candidate); with ``thresholds``, every feature's
        splits at that many quantiles instead of its best one."""
        out: List[Tuple[float, int, float]] = []
        if len(idx) < 2 * min_leaf:
            return out
        for fi in range(len(features_)):
            order = idx[numpy.argsort(X[idx, fi], kind="stable")]
            vals = X[order, fi]
            csum = numpy.cumsum(cost[order], axis=0)
            # a split after position k: cost[:k+1] to the left, the rest right
            ks = numpy.arange(min_leaf - 1, len(order) - min_leaf)
            ks = ks[vals[ks] != vals[ks + 1]]
            if not len(ks):
                continue
            if thresholds is not None:
                ks = numpy.unique(ks[numpy.linspace(0, len(ks) - 1, thresholds).astype(int)])
                out.extend((0.0, fi, float(vals[k] + vals[k + 1]) / 2) for k in ks)
                continue
            split = csum[ks].min(axis=1) + (csum[-1] - csum[ks]).min(axis=1)
            j = int(numpy.argmin(split))
            k = int(ks[j])
            out.append((float(split[j]), fi, float(vals[k] + vals[k + 1]) / 2))
        return out

    def settle(idx: Any) -> float:
        """The least cost of ``idx`` with one more split at most."""
        one = cost[idx].sum(axis=0).min()
        return min([one] + [sc for sc, _, _ in best_split(idx)])

    def grow(idx: Any, depth: int) -> Dict[str, Any]:
        here = cost[idx].sum(axis=0).min()
        best = None
        if depth < max_depth:
            splits = best_split(idx)
            best = min(splits) if splits else None
            if spec.lookahead and (best is None or here - best[0] < min_gain) and depth + 1 < max_depth:
                # Two levels at once: a region where a kernel wins may show only
                # after a second split (GatherElements: the rows kernel on the last
                # axis, where its data rows are many and short).
                for _, fi, t in best_split(idx, thresholds=spec.lookahead):
                    le, gt = idx[X[idx, fi] <= t], idx[X[idx, fi] > t]
                    score = settle(le) + settle(gt)
                    if best is None or score < best[0]:
                        best = (score, fi, t)
        if best is None or here - best[0] < min_gain:
            return leaf(idx)
        _, fi, t = best
        le = idx[X[idx, fi] <= t]
        gt = idx[X[idx, fi] > t]
        return {"feature": features_[fi], "threshold": round(float(t), 6),
                "n": len(idx), "le": grow(le, depth + 1), "gt": grow(gt, depth + 1)}

    def renumber(node: Dict[str, Any]) -> Dict[str, Any]:
        if "feature" in node:
            return dict(node, le=renumber(node["le"]), gt=renumber(node["gt"]))
        ids[0] += 1
        return dict(node, leaf=ids[0] - 1)

    def grow_under(node: Dict[str, Any], idx: Any, depth: int) -> Dict[str, Any]:
        if not len(idx):
            return renumber(node)
        if "feature" not in node:
            return grow(idx, depth)
        fi = features_.index(node["feature"])
        le, gt = idx[X[idx, fi] <= node["threshold"]], idx[X[idx, fi] > node["threshold"]]
        return dict(node, n=len(idx), le=grow_under(node["le"], le, depth + 1),
                    gt=grow_under(node["gt"], gt, depth + 1))

    tree = (grow(numpy.arange(len(rows)), 0) if base is None
            else grow_under(base.to_dict()["tree"], numpy.arange(len(rows)), 0))
    ranges = {f: [float(X[:, i].min()) - (RANGE_SLACK if f.startswith("log2_") else 0.0),
                  float(X[:, i].max()) + (RANGE_SLACK if f.startswith("log2_") else 0.0)]
              for i, f in enumerate(features_)}
    return TuningTable.from_dict({"format": FORMAT,
                                  "meta": dict(meta, op=spec.op, geometries=len(rows)),
                                  "ranges": ranges, "tree": tree}, "fitted")


def _rank(cost: Any, applies: Any, idx: Any) -> Tuple[List[int], float]:
    """(ranked candidate columns, summed cost) of the geometries ``idx`` of a leaf.

    ``cost[g, c]`` is the cost of candidate ``c`` on geometry ``g`` (the rules'
    cost where it does not apply; the last column is the rules'), ``applies[g, c]``
    whether it applies.  Greedily, with one step of look-ahead: the first
    candidate is the one whose cost where it applies, plus the best single
    choice for the geometries where it does not, is least; the rest is ranked
    the same way over those geometries.  A candidate is ranked only where it
    applies to :data:`MIN_SUPPORT` of them or more.  An empty list keeps the
    rules (also on a tie).
    """
    import numpy

    rule = cost.shape[1] - 1
    ranked: List[int] = []
    spent = 0.0
    rest = numpy.asarray(idx)
    while len(rest):
        free = [c for c in range(rule) if c not in ranked]
        keep = float(cost[rest, rule].sum())
        best, best_c = keep, None
        for c in free:
            app = applies[rest, c]
            if app.sum() < min(MIN_SUPPORT, len(rest)):
                continue
            left = rest[~app]
            after = min(float(cost[left, d].sum()) for d in free + [rule] if d != c) \
                if len(left) else 0.0
            total = float(cost[rest[app], c].sum()) + after
            if total < best - 1e-9:
                best, best_c = total, c
        if best_c is None:  # nothing beats the rules here
            spent += keep
            break
        app = applies[rest, best_c]
        spent += float(cost[rest[app], best_c].sum())
        ranked.append(best_c)
        rest = rest[~app]
    return ranked, spent

