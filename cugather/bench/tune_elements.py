"""``python -m cugather tune --op elements``: random GatherElements geometries, and
the timing of every candidate plan of one (:data:`cugather.plan.table.ELEMENTS_CANDIDATES`).

Geometries come from :func:`draw_elements_shapes`, pure Python over
``numpy.random.default_rng(seed)`` (only its ``random()`` doubles), so a seed
gives the same geometries on any machine.  The distribution, one geometry per
draw:

- **dtype**: item width 1, 2, 4, 8 or 16 bytes, equally likely, then a dtype
  of that width (the sweep's :data:`~cugather.bench.sweep.WIDTH_DTYPES`);
  **index dtype** int32 or int64, equally likely.
- **rank** uniform in 1..4, the **axis** uniform among the dims.
- **data**: inside L2 (p = 1/2; bytes log-uniform in [4 KiB, 40 MiB]) or far
  beyond it (bytes log-uniform in [200 MiB, 4 GiB]); its element count is
  split over the dims by cutting its log2 at rank - 1 uniform points.
- **indices** (ONNX GatherElements: data's rank, no larger off the axis):
  each other dim is data's (p = 3/4) or uniform in [1, data's]; the axis
  extent is the axis length (p = 1/4: the sort / top-k pattern) or
  log-uniform in [1, 4 x axis length].  Values uniform in
  ``[-axis_len, axis_len)`` (wrap mode).

A draw is discarded whole and drawn again unless the output holds 4 KiB to
1 GiB, the axis length is below 2**31 and the GPU footprint (data, indices
twice, three output-sized arrays) is at most the sweep's MEMORY_CAP.
Broadcast operands (take_along_axis) are not drawn: their geometries lie
outside the fitted ranges (feature ``broadcast``) and keep the rules.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

import numpy

from .sweep import (_WIDTH_OF, MEMORY_CAP, WIDTH_DTYPES, _choice, _log_uniform,
                    _log_uniform_int, _uniform_int)

__all__ = ["ElementsShape", "draw_elements_shapes", "tune_elements_shape"]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
L2_DATA = (4 * KiB, 40 * MiB)
BEYOND_DATA = (200 * MiB, 4 * GiB)
MIN_OUT, MAX_OUT = 4 * KiB, 1 * GiB
P_SAME_DIM, P_FULL_AXIS = 0.75, 0.25
OUTPUT_COPIES = 3


@dataclass(frozen=True)
class ElementsShape:
    """One GatherElements geometry with C-contiguous operands."""

    shape: tuple        # data shape
    dtype: str
    axis: int
    indices: tuple      # indices shape (the output's)
    index_dtype: str
    table_class: str    # "l2" or "beyond"

    @property
    def itemsize(self) -> int:
        return _WIDTH_OF[self.dtype]

    @property
    def axis_len(self) -> int:
        return self.shape[self.axis]

    @property
    def table_bytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def out_bytes(self) -> int:
        return math.prod(self.indices) * self.itemsize

    @property
    def index_bytes(self) -> int:
        return math.prod(self.indices) * (4 if self.index_dtype == "int32" else 8)

    @property
    def footprint_bytes(self) -> int:
        return self.table_bytes + 2 * self.index_bytes + OUTPUT_COPIES * self.out_bytes

    def label(self) -> str:
        return (f"({'x'.join(map(str, self.shape))}) {self.dtype} axis {self.axis}, idx "
                f"({'x'.join(map(str, self.indices))}) {self.index_dtype}")

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(shape=list(self.shape), indices=list(self.indices), itemsize=self.itemsize,
                 out_bytes=self.out_bytes, table_bytes=self.table_bytes)
        return d


def _ok(s: ElementsShape) -> bool:
    return (MIN_OUT <= s.out_bytes <= MAX_OUT and 1 <= s.axis_len < (1 << 31)
            and s.footprint_bytes <= MEMORY_CAP)


def _candidate(rng) -> ElementsShape:
    width = _choice(rng, list(WIDTH_DTYPES))
    dtype = _choice(rng, WIDTH_DTYPES[width])
    index_dtype = _choice(rng, ("int32", "int64"))
    rank = _uniform_int(rng, 1, 4)
    axis = _uniform_int(rng, 0, rank - 1)
    table_class = "l2" if rng.random() < 0.5 else "beyond"
    lo, hi = L2_DATA if table_class == "l2" else BEYOND_DATA
    log_n = math.log2(max(_log_uniform(rng, lo, hi) / width, 1.0))
    cuts = sorted(rng.random() * log_n for _ in range(rank - 1))
    edges = [0.0] + cuts + [log_n]
    shape = tuple(max(1, int(round(2 ** (b - a)))) for a, b in zip(edges, edges[1:]))
    idx = []
    for d, n in enumerate(shape):
        if d == axis:
            idx.append(n if rng.random() < P_FULL_AXIS else _log_uniform_int(rng, 1, 4 * n))
        else:
            idx.append(n if rng.random() < P_SAME_DIM else _uniform_int(rng, 1, n))
    return ElementsShape(shape, dtype, axis, tuple(idx), index_dtype, table_class)


def draw_elements_shapes(n: int, seed: int = 0) -> list:
    """The first ``n`` geometries of ``seed`` (see the module docstring).

    Parameters
    ----------
    n : int
        Number of geometries.
    seed : int
        Seed of ``numpy.random.default_rng``; geometry ``i`` does not depend on ``n``.

    Returns
    -------
    list of ElementsShape
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = numpy.random.default_rng(seed)
    out = []
    while len(out) < n:
        for _ in range(10000):
            s = _candidate(rng)
            if _ok(s):
                out.append(s)
                break
        else:
            raise RuntimeError("no valid GatherElements geometry in 10000 draws")
    return out


def _label(plan) -> str:
    if plan.kind == "elements_row":
        return "row"
    return "tiles" if plan.fields["col_tiles"] else "elements"


def rules_plan(operand, indices, index_dtype: str, axis: int, limits):
    """The plan the hand-written GatherElements rules make for this geometry on a
    GPU of ``limits``' SM count and shared memory, without a table."""
    from ..plan.core import DeviceLimits
    from ..plan.elements import plan_elements

    return plan_elements(operand, indices, index_dtype, axis, "wrap",
                         limits=DeviceLimits(limits.sm_count, limits.max_shared_mem, ""))


def tune_elements_shape(cp, s: ElementsShape, seed: int, device: int
                        ) -> Optional[Dict[str, Any]]:
    """Check and time every applicable GatherElements candidate of ``s``; its record."""
    from ..plan.core import Operand, alignment
    from ..plan.elements import elements_features_of, plan_elements
    from ..plan.table import ELEMENTS_CANDIDATES
    from ..runtime.launch import CUDA
    from .sweep_run import make_table
    from .tune import time_candidate

    limits = CUDA.limits(device)
    rec: Dict[str, Any] = {"op": "elements", "shape": s.as_dict(), "times": {}, "errors": {}}
    try:
        data = make_table(cp, s, seed)
        n = s.axis_len
        idx = cp.random.default_rng(seed).integers(-n, n, size=math.prod(s.indices),
                                                   dtype=numpy.int64)
        idx = idx.astype(s.index_dtype).reshape(s.indices)
        corner = data[tuple(slice(None) if d == s.axis else slice(0, k)
                            for d, k in enumerate(s.indices))]
        ref = cp.take_along_axis(corner, cp.where(idx < 0, idx + n, idx), axis=s.axis)
        ref_bytes = cp.ascontiguousarray(ref).view(numpy.uint8).reshape(-1)
        del ref, corner
    except Exception as e:  # out of memory, most likely
        rec["errors"]["setup"] = f"{type(e).__name__}: {str(e)[:200]}"
        return rec
    ptr = data.data.ptr
    operand = Operand(data.shape, data.strides, data.itemsize, alignment(ptr))
    args = (operand, s.indices, s.index_dtype, s.axis, "wrap")
    rule_plan = rules_plan(*args[:4], limits)
    if rule_plan.main is None:
        rec["errors"]["plan"] = f"no kernel plan ({rule_plan.kind})"
        return rec
    rec["rule"] = _label(rule_plan)
    rec["features"] = elements_features_of(*args[:4])
    for label, kind, tiles in ELEMENTS_CANDIDATES:
        try:
            plan = plan_elements(*args, limits=limits, kind=kind, column_tiles=tiles)
        except ValueError:
            continue  # does not apply to this geometry
        f = plan.main.fields
        if tiles and not (f["cols"] > 1 and f["total"] > f["cols"]):
            continue  # no run of columns to tile
        time_candidate(cp, rec, label, plan, data, ptr, idx, ref_bytes, device,
                       "cupy.take_along_axis")
    if rec["rule"] not in rec["times"]:
        rec["errors"]["rule"] = f"the rules' choice {rec['rule']} was not timed"
        rec["times"] = {}
    return rec
