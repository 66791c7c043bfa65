"""Plans for GatherElements (take_along_axis) and GatherND.  Pure Python.

From shapes, byte strides, item size and pointer alignments only (no CuPy,
no GPU), a plan merges the output's dimensions as far as the strides of data
and indices allow, picks the unit width, the index math (32-bit fast_divmod
below 2**31, 64-bit above), the grid, and lists the argument-block fields
other than the pointers -- for the gather kernel and for the bounds check
that raise mode runs first.  The argument blocks are those of
kernels/gather_family.cuh (elements, nd) and kernels/common.cuh (check).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from .fastdiv import MAX_OPERAND, make_divisor
from .keys import KernelKey
from .layout import MAX_DIMS
from .gather import GRID_X_MAX, GRID_YZ_MAX, MAX_THREADS, Operand, unit_for

__all__ = ["FamilyPlan", "plan_elements", "plan_nd", "elements_shape", "along_axis_shape",
           "nd_shape", "merge_dims", "ELEMENTS_ILP"]

ELEMENTS_ILP = 2   # CG_ELEMENTS_ILP
ELEMENTS_TILE_COLS = 32  # columns of a column tile: one warp
ND_SHORT_ROWS = 2  # CG_ND_SHORT_RU: rows per thread of the nd kernel, rows of <= MAX_THREADS units
ND_LONG_UNITS = 4  # units per thread of the nd kernel for longer rows
CHECK_GRID_MAX = 4096


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _math(largest: int, forced: Optional[str]) -> str:
    if forced is not None:
        return forced
    return "fast32" if largest < MAX_OPERAND[32] else "fast64"


def _divisors(sizes, math_name: str) -> list:
    bits = 32 if math_name == "fast32" else 64
    sizes = list(sizes) + [1] * (MAX_DIMS - len(sizes))
    return [make_divisor(max(n, 1), bits) for n in sizes]


def _pad(values, fill=0) -> list:
    return list(values) + [fill] * (MAX_DIMS - len(values))


def merge_dims(dims) -> list:
    """Merge ``(size, stride, ...)`` tuples, outermost first, that step as one.

    Size-1 dimensions are dropped; a dimension merges into the next inner one
    when every one of its strides equals that dimension's stride times its
    size (the same rule for data bytes and index elements).
    """
    out = []
    for size, *strides in dims:
        if size == 1:
            continue
        if out and all(o == s * size for o, s in zip(out[-1][1:], strides)):
            out[-1] = (out[-1][0] * size, *strides)
        else:
            out.append((size, *strides))
    return out


def _contiguous_strides(shape) -> list:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]


def _is_c_contiguous(op: Operand) -> bool:
    return all(n == 1 or s == c for n, s, c in
               zip(op.shape, op.strides, Operand.contiguous(op.shape, op.itemsize).strides))


# ---------------------------------------------------------------- shapes
def elements_shape(data_shape, indices_shape, axis: int) -> tuple:
    """Output shape of ONNX GatherElements (``axis`` normalised): the indices'.

    Same rank as data; on every other dimension indices may be smaller than
    data (they address its leading corner), never larger.
    """
    data_shape, indices_shape = tuple(data_shape), tuple(indices_shape)
    if len(indices_shape) != len(data_shape):
        raise ValueError(f"indices must have the rank of data ({len(data_shape)}); got indices "
                         f"of shape {indices_shape} for data of shape {data_shape}")
    for d, (n, k) in enumerate(zip(data_shape, indices_shape)):
        if d != axis and k > n:
            raise ValueError(f"indices of shape {indices_shape} exceed data of shape {data_shape} "
                             f"on dimension {d} ({k} > {n}); only the gather axis {axis} may differ")
    return indices_shape


def along_axis_shape(arr_shape, indices_shape, axis: int) -> tuple:
    """Output shape of ``numpy.take_along_axis`` (``axis`` normalised).

    Dimensions other than ``axis`` broadcast against each other as NumPy's
    fancy indexing does; the mismatch error is NumPy's IndexError.
    """
    arr_shape, indices_shape = tuple(arr_shape), tuple(indices_shape)
    if len(indices_shape) != len(arr_shape):
        raise ValueError(f"`indices` and `arr` must have the same number of dimensions; got "
                         f"indices of shape {indices_shape} for arr of shape {arr_shape}")
    out = []
    for d, (n, k) in enumerate(zip(arr_shape, indices_shape)):
        if d == axis or n == k or n == 1:
            out.append(k)
        elif k == 1:
            out.append(n)
        else:
            raise IndexError(f"shape mismatch: indices of shape {indices_shape} cannot be "
                             f"broadcast against arr of shape {arr_shape} on dimension {d} "
                             f"({k} vs {n})")
    return tuple(out)


def nd_shape(data_shape, indices_shape, batch_dims: int) -> tuple:
    """Output shape of ONNX GatherND: ``indices.shape[:-1] + data.shape[b + m:]``."""
    data_shape, indices_shape = tuple(data_shape), tuple(indices_shape)
    r, q, b = len(data_shape), len(indices_shape), batch_dims
    if r < 1:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    if q < 1:
        raise ValueError("indices must have at least one dimension (the last holds the index "
                         "tuples), got a 0-d array")
    if not 0 <= b < min(q, r):
        raise ValueError(f"batch_dims must be in [0, min(indices.ndim, data.ndim) - 1] = "
                         f"[0, {min(q, r) - 1}], got {b}")
    if indices_shape[:b] != data_shape[:b]:
        raise ValueError(f"the first batch_dims={b} dimensions of indices {indices_shape} and "
                         f"data {data_shape} must be equal")
    m = indices_shape[-1]
    if not 1 <= m <= r - b:
        raise ValueError(f"indices.shape[-1] (index tuple length) must be in [1, data.ndim - "
                         f"batch_dims] = [1, {r - b}], got {m} (indices of shape {indices_shape})")
    if m > MAX_DIMS:
        raise ValueError(f"index tuples of length {m} exceed the supported {MAX_DIMS}")
    return indices_shape[:-1] + data_shape[b + m:]


# ---------------------------------------------------------------- plan
@dataclass(frozen=True)
class FamilyPlan:
    """A GatherElements or GatherND launch, minus the pointers."""

    op: str                          # "elements" or "nd"
    key: Optional[KernelKey]         # None: nothing to launch (empty, or data copied first)
    check_key: Optional[KernelKey]   # bounds check run first in raise mode
    out_shape: tuple
    bound_axes: tuple                # data dimensions the index values address
    bounds: tuple                    # their sizes
    n_indices: int                   # index values in the indices array
    args_type: str = ""
    fields: dict = field(default_factory=dict)
    grid: tuple = (0, 0, 0)
    block: tuple = (0, 0, 0)
    check_args_type: str = ""
    check_fields: dict = field(default_factory=dict)
    check_grid: tuple = (0, 0, 0)
    copy_data: bool = False          # data must first be copied to a C-contiguous array
    reason: str = ""

    @property
    def kind(self) -> str:
        return self.key.kind if self.key else ("copy" if self.copy_data else "empty")

    def divisors(self) -> dict:
        """fast_divmod parameters in use, by argument name."""
        found = {}
        ndim = self.fields.get("ndim", 0)
        for i, d in enumerate(self.fields.get("dims", ())[:max(ndim - 1, 0)]):
            found[f"dims[{i}]"] = d
        return found

    def index_error(self, pos: int, value: int, indices_shape) -> IndexError:
        """The IndexError for index ``value`` at flat position ``pos`` of indices."""
        k = pos % len(self.bounds) if self.op == "nd" else 0
        axis, n = self.bound_axes[k], self.bounds[k]
        where = [int(i) for i in _unravel(pos, tuple(indices_shape))]
        return IndexError(f"index {value} is out of bounds for axis {axis} with size {n} "
                          f"(at indices{where}; valid range [{-n}, {n - 1}])")

    def describe(self) -> str:
        """A readable summary: kernel, unit, dimensions, grid and divisors."""
        lines = []
        if self.key is None:
            lines.append(f"output {self.out_shape}: " + (
                f"data is first copied ({self.reason})" if self.copy_data else "nothing to launch"))
        else:
            f = self.fields
            lines += [
                f"kernel      {self.key.entry}",
                f"variant     {self.key.kind} ({self.reason})",
                f"unit        {self.key.unit} B, index {self.key.index_dtype}, math "
                f"{self.key.math}, mode {self.key.mode}",
                f"output      {self.out_shape}; indexed axes {self.bound_axes} of sizes "
                f"{self.bounds}",
                f"dims        {[d.d for d in f['dims'][:f['ndim']]]} (innermost first), "
                f"strides {f['strides'][:f['ndim']]}",
                f"grid        {self.grid}  block {self.block}",
            ]
            for name, d in self.divisors().items():
                lines.append(f"fast_divmod {name}: d={d.d} M={d.m} l={d.l} ({d.bits}-bit)")
        if self.check_key is not None:
            lines.append(f"check       {self.check_key.entry} over {self.n_indices} index values "
                         f"(before the gather)")
        return "\n".join(lines)


def _unravel(pos: int, shape: tuple) -> tuple:
    out = []
    for n in reversed(shape):
        pos, c = divmod(pos, n) if n else (pos, 0)
        out.append(c)
    return tuple(reversed(out))


def _nd_split(units: int):
    """(block, rows per thread, units per thread, chunks per row) of the nd kernel.

    Short rows: TX = units threads per row, 256 // TX rows per block, each
    thread ND_SHORT_ROWS rows.  Long rows: ND_LONG_UNITS units per thread, up
    to 256 threads per row chunk, chunks over blockIdx.y.
    """
    if units <= MAX_THREADS:
        tx, ru, cu = units, ND_SHORT_ROWS, 1
    else:
        tx, ru, cu = min(MAX_THREADS, _cdiv(_cdiv(units, ND_LONG_UNITS), 32) * 32), 1, ND_LONG_UNITS
    return (tx, max(1, MAX_THREADS // tx), 1), ru, cu, _cdiv(units, tx * cu)


def _check_grid(n: int) -> tuple:
    return (max(1, min(_cdiv(n, MAX_THREADS), CHECK_GRID_MAX)), 1, 1)


def _split_run(dims, zero_strides: int) -> tuple:
    """Pop the innermost contiguous byte run (data stride 1, other strides 0)."""
    if dims and dims[-1][1] == 1 and all(s == 0 for s in dims[-1][2:2 + zero_strides]):
        return dims[:-1], dims[-1][0]
    return dims, 1  # a 1-byte element whose neighbour is not contiguous


def _no_empty_axis(mode: str, bounds, bound_axes, n_indices: int, out_size: int):
    if mode in ("wrap", "clip") and n_indices and out_size:
        for axis, n in zip(bound_axes, bounds):
            if n == 0:
                raise IndexError(f"cannot take indices from axis {axis} of size 0 (mode={mode!r})")


def plan_elements(data: Operand, indices_shape, index_dtype: str, axis: int, mode: str, *,
                  out_shape=None, out_align: int = 256, math_name: Optional[str] = None,
                  max_grid: Optional[int] = None,
                  column_tiles: Optional[bool] = None) -> FamilyPlan:
    """Plan ``out[c] = data[c with c[axis] replaced by indices[c]]``.

    ``axis`` must be normalised.  ``out_shape`` defaults to the indices' shape
    (GatherElements); take_along_axis passes the broadcast shape.  On other
    dimensions data may be larger than the output (read from its corner) or 1
    (broadcast), and indices equal to the output or 1 (broadcast).
    ``math_name``, ``max_grid`` and ``column_tiles`` force an index math, a
    smaller grid or the slot order (tests and benchmarks).
    """
    indices_shape = tuple(indices_shape)
    out_shape = tuple(indices_shape if out_shape is None else out_shape)
    axis_len = data.shape[axis]
    n_idx = math.prod(indices_shape)
    out_size = math.prod(out_shape)
    base = dict(op="elements", out_shape=out_shape, bound_axes=(axis,), bounds=(axis_len,),
                n_indices=n_idx)
    _no_empty_axis(mode, (axis_len,), (axis,), n_idx, out_size)
    check = check_fields = None
    if mode == "raise" and n_idx and out_size:
        check = KernelKey("check", 0, index_dtype, "fast64", "raise")
        check_fields = dict(n=n_idx, axis_len=axis_len)
    checks = dict(check_key=check, check_args_type="CheckArgs" if check else "",
                  check_fields=check_fields or {}, check_grid=_check_grid(n_idx) if check else (0, 0, 0))
    if out_size == 0:
        return FamilyPlan(key=None, **checks, **base)

    istrides = _contiguous_strides(indices_shape)
    dims = []
    for d, n in enumerate(out_shape):
        dn, k = data.shape[d], indices_shape[d]
        if d != axis and not (dn >= n or dn == 1):
            raise ValueError(f"data dimension {d} of size {dn} cannot cover output size {n}")
        if k not in (n, 1):
            raise ValueError(f"indices dimension {d} of size {k} cannot cover output size {n}")
        ds = 0 if d == axis or (dn == 1 and n != 1) else data.strides[d]
        dims.append((n, ds, 0 if k == 1 else istrides[d]))
    dims, run = _split_run(merge_dims(dims + [(data.itemsize, 1, 0)]), 1)
    s_axis = data.strides[axis] if axis_len > 1 else 0
    unit = unit_for(run, data.align, out_align, abs(s_axis), *[abs(s) for _, s, _ in dims])
    dims = dims[::-1]  # innermost first
    if run // unit > 1:
        dims.insert(0, (run // unit, unit, 0))
    if len(dims) > MAX_DIMS:
        return _too_many_dims(data, len(dims), checks, base)
    total = out_size * data.itemsize // unit
    mname = _math(total, math_name)
    fields = dict(total=total, axis_len=axis_len, s_axis=s_axis, ndim=len(dims),
                  dims=_divisors([n for n, _, _ in dims], mname),
                  strides=_pad([s for _, s, _ in dims]), index_strides=_pad([i for _, _, i in dims]))
    # Columns: the dimensions inside the gathered (or a broadcast) one, where
    # output and data positions move together.  From a warp's width on, slots
    # go in column tiles (kernels/gather_family.cuh), so that the blocks
    # resident at a time share a narrow band of every table row they pick.
    cols = 1
    for n, s, _ in dims:
        if s == 0:
            break
        cols *= n
    if column_tiles is None:
        column_tiles = cols >= ELEMENTS_TILE_COLS and total > cols
    if column_tiles:
        rows_per_tile = MAX_THREADS // 32 * ELEMENTS_ILP
        col_tiles = _cdiv(cols, ELEMENTS_TILE_COLS)
        row_tiles = _cdiv(total // cols, rows_per_tile)
        fields.update(cols=cols, col_tiles=col_tiles, row_tiles=row_tiles)
        grid = (min(col_tiles * row_tiles, max_grid or GRID_X_MAX), 1, 1)
        order = f"column tiles of {ELEMENTS_TILE_COLS} x {rows_per_tile} ({cols} columns)"
    else:
        fields.update(cols=0, col_tiles=0, row_tiles=0)
        grid = (min(_cdiv(total, MAX_THREADS * ELEMENTS_ILP), max_grid or GRID_X_MAX), 1, 1)
        order = "flat order"
    return FamilyPlan(key=KernelKey("elements", unit, index_dtype, mname, mode),
                      args_type="ElementsArgs", fields=fields, grid=grid, block=(MAX_THREADS, 1, 1),
                      reason=f"{len(dims)} dims of {unit} B units, {ELEMENTS_ILP} per thread, "
                             f"{order}",
                      **checks, **base)


def _too_many_dims(data: Operand, ndim: int, checks: dict, base: dict) -> FamilyPlan:
    if _is_c_contiguous(data):
        raise ValueError(f"output of shape {base['out_shape']} needs {ndim} dimensions after "
                         f"merging; at most {MAX_DIMS} are supported")
    return FamilyPlan(key=None, copy_data=True, reason=f"{ndim} dims after merging exceed "
                      f"{MAX_DIMS}", **checks, **base)


def plan_nd(data: Operand, indices_shape, index_dtype: str, batch_dims: int, mode: str, *,
            out_align: int = 256, math_name: Optional[str] = None,
            max_grid: Optional[int] = None) -> FamilyPlan:
    """Plan ONNX GatherND with ``batch_dims`` leading batch dimensions.

    The output is treated as rows: one per index tuple and per position in
    the slice dimensions outside the innermost contiguous run; a row is that
    run, copied with the widest unit dividing its bytes, the base pointers
    and every stride.
    """
    indices_shape = tuple(indices_shape)
    b = batch_dims
    out_shape = nd_shape(data.shape, indices_shape, b)
    m = indices_shape[-1]
    bounds = tuple(data.shape[b:b + m])
    n_tuples = math.prod(indices_shape[:-1])
    n_idx = n_tuples * m
    out_size = math.prod(out_shape)
    base = dict(op="nd", out_shape=out_shape, bound_axes=tuple(range(b, b + m)), bounds=bounds,
                n_indices=n_idx)
    _no_empty_axis(mode, bounds, base["bound_axes"], n_idx, out_size)
    check = None
    if mode == "raise" and n_idx:
        check = KernelKey("check_nd", 0, index_dtype, "fast64", "raise")
    checks = dict(check_key=check, check_args_type="NDCheckArgs" if check else "",
                  check_fields=dict(n=n_idx, m_div=make_divisor(m, 64), bounds=_pad(bounds))
                  if check else {}, check_grid=_check_grid(n_idx) if check else (0, 0, 0))
    if out_size == 0:
        return FamilyPlan(key=None, **checks, **base)

    comp_strides = [s if n > 1 else 0 for n, s in zip(bounds, data.strides[b:b + m])]
    slice_dims, run = _split_run(merge_dims(
        list(zip(data.shape[b + m:], data.strides[b + m:])) + [(data.itemsize, 1)]), 0)
    tuple_dims = merge_dims(list(zip(data.shape[:b], data.strides[:b]))
                            + [(math.prod(indices_shape[b:-1]), 0)])
    unit = unit_for(run, data.align, out_align,
                    *[abs(s) for _, s in slice_dims + tuple_dims], *map(abs, comp_strides))
    units = run // unit
    dims = slice_dims[::-1] + tuple_dims[::-1]  # innermost first
    if len(dims) > MAX_DIMS:
        return _too_many_dims(data, len(dims), checks, base)
    rows = math.prod(n for n, _ in slice_dims) * n_tuples
    mname = _math(max(rows, units), math_name)
    block, ru, cu, chunks = _nd_split(units)
    fields = dict(rows=rows, units=units, ndim=len(dims), tuple_dim=len(slice_dims), m=m,
                  tile_cu=cu, tile_ru=ru, dims=_divisors([n for n, _ in dims], mname),
                  strides=_pad([s for _, s in dims]), bounds=_pad(bounds),
                  comp_strides=_pad(comp_strides))
    grid = (min(_cdiv(rows, block[1] * ru), max_grid or GRID_X_MAX),
            min(chunks, max_grid or GRID_YZ_MAX), 1)
    return FamilyPlan(key=KernelKey("nd", unit, index_dtype, mname, mode), args_type="NDArgs",
                      fields=fields, grid=grid, block=block,
                      reason=f"rows of {units} x {unit} B, {len(dims)} row dims, {m} index "
                             f"components, {block[1] * ru} row(s) per block tile",
                      **checks, **base)
