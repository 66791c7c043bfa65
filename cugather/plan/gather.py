"""Plans: everything a gather launch needs that depends only on geometry.

Pure Python (no CuPy, no GPU): from the shapes, byte strides, item size and
pointer alignments of the operands, a plan picks the kernel variant and unit
width, computes the fast_divmod parameters and the launch grid, and lists the
argument-block fields other than the three pointers.  GatherOp caches plans
per shape, so a repeated call skips all of this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from .fastdiv import MAX_OPERAND, Divisor, make_divisor
from .keys import KernelKey
from .layout import MAX_DIMS

__all__ = ["Operand", "DeviceLimits", "GatherPlan", "plan_gather", "normalize_axis", "unit_for"]

MAX_THREADS = 256          # CG_MAX_THREADS
SCALAR_ILP = 2             # CG_SCALAR_ILP
GRID_X_MAX = (1 << 31) - 1
GRID_YZ_MAX = 65535


@dataclass(frozen=True)
class Operand:
    """Geometry of one array: shape, byte strides, item size, base alignment."""

    shape: tuple
    strides: tuple
    itemsize: int
    align: int = 256  # largest power of two (capped at 256) dividing the address

    @classmethod
    def contiguous(cls, shape, itemsize, align=256) -> "Operand":
        strides, step = [], itemsize
        for n in reversed(shape):
            strides.append(step)
            step *= max(n, 1)
        return cls(tuple(shape), tuple(reversed(strides)), itemsize, align)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class DeviceLimits:
    """What the plan needs to know of the device."""

    sm_count: int = 132
    max_shared_mem: int = 48 * 1024  # per block, without opting in


def alignment_of(address: int) -> int:
    """Largest power of two, at most 256, dividing ``address``."""
    return 256 if address % 256 == 0 else address & -address


def unit_for(*quantities: int) -> int:
    """Widest unit (16, 8, 4, 2 or 1 bytes) dividing every quantity."""
    for unit in (16, 8, 4, 2):
        if all(q % unit == 0 for q in quantities):
            return unit
    return 1


def normalize_axis(axis, ndim: int, argname: str = "axis") -> int:
    """Return ``axis`` in ``[0, ndim)`` or raise numpy's AxisError."""
    import numpy

    axis_error = getattr(getattr(numpy, "exceptions", numpy), "AxisError")
    if isinstance(axis, bool) or not isinstance(axis, (int, numpy.integer)):
        raise TypeError(f"{argname} must be an integer, got {type(axis).__name__} {axis!r}")
    axis = int(axis)
    if not -ndim <= axis < ndim:
        raise axis_error(axis, ndim)
    return axis % ndim


def _collapse(dims):
    """Merge (size, byte stride) dims, outermost first, that address memory as one."""
    out = []
    for size, stride in dims:
        if size == 1:
            continue
        if out and out[-1][1] == stride * size:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


@dataclass(frozen=True)
class GatherPlan:
    """A gather launch, minus the pointers.  Build with :func:`plan_gather`."""

    key: Optional[KernelKey]        # None when the output is empty
    check_key: Optional[KernelKey]  # bounds check run first in raise mode
    out_shape: tuple
    axis: int
    axis_len: int
    n_indices: int
    grid: tuple = (0, 0, 0)
    block: tuple = (0, 0, 0)
    shared_mem: int = 0
    fields: dict = field(default_factory=dict)  # argument-block fields but the pointers
    copy_data: bool = False  # data must first be copied to a fresh C-contiguous array
    reason: str = ""         # why this variant

    @property
    def kind(self) -> str:
        return self.key.kind if self.key else "empty"

    def divisors(self) -> dict:
        """fast_divmod parameters by argument name."""
        found = {}
        for name, value in self.fields.items():
            if isinstance(value, Divisor):
                found[name] = value
            elif isinstance(value, (list, tuple)) and value and isinstance(value[0], Divisor):
                for i, v in enumerate(value):
                    found[f"{name}[{i}]"] = v
        return found

    def describe(self) -> str:
        """A readable summary: kernel, variant, unit, grid, block, divisors, arguments."""
        if self.key is None:
            text = f"empty output {self.out_shape}: nothing to launch"
            if self.copy_data:
                text = f"output {self.out_shape}: data is first copied ({self.reason})"
            if self.check_key is not None:
                text += f"\ncheck       {self.check_key.entry} ({self.n_indices} indices)"
            return text
        lines = [
            f"kernel      {self.key.entry}",
            f"variant     {self.key.kind} ({self.reason})",
            f"unit        {self.key.unit} B, index {self.key.index_dtype}, math {self.key.math},"
            f" mode {self.key.mode}",
            f"output      {self.out_shape}  (axis {self.axis}, axis_len {self.axis_len},"
            f" {self.n_indices} indices)",
            f"grid        {self.grid}  block {self.block}  shared {self.shared_mem} B",
        ]
        for name, d in self.divisors().items():
            lines.append(f"fast_divmod {name}: d={d.d} M={d.m} l={d.l} ({d.bits}-bit)")
        plain = [f"{k}={v}" for k, v in self.fields.items() if k not in self.divisors()
                 and not (isinstance(v, list) and v and isinstance(v[0], Divisor))]
        if plain:
            lines.append(f"arguments   {' '.join(plain)}")
        if self.check_key is not None:
            lines.append(f"check       {self.check_key.entry} (before the gather)")
        if self.copy_data:
            lines.append("note        data is copied to a C-contiguous buffer first")
        return "\n".join(lines)


def _math_for(largest: int, forced: Optional[str]) -> str:
    if forced is not None:
        return forced
    return "fast32" if largest < MAX_OPERAND[32] else "fast64"


def _divisor(d: int, math_name: str) -> Divisor:
    return make_divisor(max(d, 1), 32 if math_name == "fast32" else 64)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _rows_cu(unit: int) -> int:
    """Units per thread per row in the rows kernel (its CU template argument)."""
    return 16 // unit if unit >= 8 else 1


def _row_unroll(rows: int, rows_per_block_row: int, chunks: int, limits: DeviceLimits) -> int:
    """Rows per thread for the rows kernel: 4, unless that leaves fewer than
    about two waves of blocks, where a partly idle last wave costs more than
    the extra loads in flight gain (measured on H200: 4 rows per thread is
    fastest from ~10k blocks on, 2 below ~1k)."""
    for ru in (4, 2):
        if _cdiv(rows, rows_per_block_row * ru) * chunks >= 2 * 4 * limits.sm_count:
            return ru
    return 1


def _row_split(kind: str, units: int, unit: int):
    """(block, rows per thread, units per thread, chunks per row) of kernels/gather.cuh.

    rows: each thread moves CU units (16 bytes of 8- and 16-byte units, else
    one unit) of up to 4 rows; TX = ceil(units / CU) threads per row (at
    most 256), 256 // TX rows per block.
    chunks: 4 units per thread, up to 256 threads per row chunk, chunks over
    blockIdx.y.
    """
    if kind == "rows":
        ru, cu = 4, _rows_cu(unit)
        tx = min(_cdiv(units, cu), MAX_THREADS)
    else:
        tx = min(MAX_THREADS, _cdiv(_cdiv(units, 4), 32) * 32)
        ru, cu = 1, 4
    ty = max(1, MAX_THREADS // tx)
    return (tx, ty, 1), ru, cu, _cdiv(units, tx * cu)


def plan_gather(data: Operand, indices_shape: tuple, index_dtype: str, axis: int, mode: str,
                *, out_align: int = 256, limits: DeviceLimits = DeviceLimits(),
                kind: Optional[str] = None, math_name: Optional[str] = None,
                max_grid: Optional[int] = None, row_unroll: Optional[int] = None,
                check_unread: bool = True) -> GatherPlan:
    """Plan ``out = take(data, indices, axis)`` with kernel mode ``mode``.

    ``axis`` must already be normalised.  ``kind``, ``math_name`` and
    ``max_grid`` force a variant, an index math or a smaller grid (tests and
    benchmarks); the default is the fastest applicable choice.
    """
    n_idx = math.prod(indices_shape)
    axis_len = data.shape[axis]
    out_shape = data.shape[:axis] + tuple(indices_shape) + data.shape[axis + 1:]
    # ONNX Gather rejects any out-of-range index; numpy.take (check_unread
    # False) checks only indices some outer slice reads, none when it is empty.
    read = check_unread or math.prod(data.shape[:axis]) > 0
    check = (KernelKey("check", 0, index_dtype, "fast64", "raise")
             if mode == "raise" and n_idx and read else None)
    base = dict(out_shape=out_shape, axis=axis, axis_len=axis_len, n_indices=n_idx)
    if math.prod(out_shape) == 0:
        return GatherPlan(None, check, **base)
    grid_cap = max_grid or GRID_X_MAX
    forced = kind is not None

    outer = _collapse(list(zip(data.shape[:axis], data.strides[:axis])))
    inner = _collapse(list(zip(data.shape[axis + 1:], data.strides[axis + 1:]))
                      + [(data.itemsize, 1)])
    if not inner or inner[-1][1] != 1:  # a 1-byte element was dropped as a size-1 dim
        inner.append((data.itemsize, 1))
    s_axis = data.strides[axis] if axis_len > 1 else 0
    contiguous_row = len(inner) == 1 and inner[0][1] == 1 and len(outer) <= 1
    if kind is None:
        kind = "rows" if contiguous_row else "elem"
    if kind in ("rows", "chunks", "scalar", "inner") and not contiguous_row:
        raise ValueError(f"kernel kind {kind!r} needs contiguous rows and one outer stride")

    if kind == "elem":
        return _plan_elem(data, outer, inner, s_axis, n_idx, index_dtype, mode, out_align,
                          limits, math_name, grid_cap, check, base)

    row_bytes = inner[0][0]
    n_outer, s_outer = outer[0] if outer else (1, 0)
    unit = unit_for(row_bytes, data.align, out_align, s_outer, s_axis)
    units = row_bytes // unit
    if kind == "rows" and units == 1 and not forced:
        stage = s_axis in (0, row_bytes) and axis_len * row_bytes <= limits.max_shared_mem
        # Staging reads the whole row; direct picks cost a 32-byte sector each.
        picks_pay = n_idx * max(32, row_bytes) >= axis_len * row_bytes
        kind = "inner" if stage and picks_pay else "scalar"
    elif kind == "rows" and units > MAX_THREADS * _rows_cu(unit) and not forced:
        kind = "chunks"
    if kind in ("scalar", "inner") and units != 1:
        raise ValueError(f"kernel kind {kind!r} needs rows of one unit; rows here are {units} units")
    if kind == "inner" and axis_len * row_bytes > limits.max_shared_mem:
        raise ValueError("kernel kind 'inner' needs the gathered axis to fit in shared memory")

    rows = n_outer * n_idx
    mname = _math_for(max(rows, units, n_idx, n_outer), math_name)
    fields = dict(s_outer=s_outer, s_axis=s_axis, axis_len=axis_len, rows=rows, units=units,
                  n_indices=n_idx, outer=n_outer, n_div=_divisor(n_idx, mname),
                  chunk=0, stage_unit=0, row_unroll=1)
    shared = 0
    if kind in ("rows", "chunks"):
        block, ru, cu, chunks = _row_split(kind, units, unit)
        if kind == "rows":
            ru = row_unroll or _row_unroll(rows, block[1], chunks, limits)
            fields["row_unroll"] = ru
        grid = (min(_cdiv(rows, block[1] * ru), grid_cap), min(chunks, max_grid or GRID_YZ_MAX), 1)
        reason = (f"{units} units of {unit} B per row; block {block[0]}x{block[1]}, "
                  f"{ru} row(s) x {cu} unit(s) per thread, {chunks} chunk(s) per row")
    elif kind == "scalar":
        block = (MAX_THREADS, 1, 1)
        grid = (min(_cdiv(rows, MAX_THREADS * SCALAR_ILP), grid_cap), 1, 1)
        reason = f"one {unit} B unit per row, {SCALAR_ILP} loads in flight per thread"
    else:
        block = (MAX_THREADS, 1, 1)
        # Enough blocks to fill the GPU when there are few outer rows; every
        # chunk of a row stages that row again (from L2: its blocks are adjacent).
        chunks = max(1, min(_cdiv(n_idx, MAX_THREADS), _cdiv(4 * limits.sm_count, n_outer)))
        chunk = _cdiv(_cdiv(n_idx, chunks), MAX_THREADS) * MAX_THREADS
        fields["chunk"] = chunk
        grid = (min(_cdiv(n_idx, chunk), grid_cap), min(n_outer, GRID_YZ_MAX, max_grid or GRID_YZ_MAX), 1)
        shared = _cdiv(axis_len * row_bytes, 16) * 16
        fields["stage_unit"] = unit_for(data.align, s_outer, axis_len * row_bytes)
        reason = f"axis row of {axis_len * row_bytes} B staged in shared memory"
    key = KernelKey(kind, unit, index_dtype, mname, mode)
    return GatherPlan(key, check, grid=grid, block=block, shared_mem=shared, fields=fields,
                      reason=reason, **base)


def _plan_elem(data, outer, inner, s_axis, n_idx, index_dtype, mode, out_align, limits,
               math_name, grid_cap, check, base):
    # Output dims, innermost first, as (size, byte stride in data); the index
    # dim carries the axis stride.  The innermost contiguous run sets the unit.
    run = inner[-1][0]  # innermost contiguous bytes (whole elements)
    rest = inner[:-1]
    unit = unit_for(run, data.align, out_align, abs(s_axis), *[abs(s) for _, s in rest + outer])
    dims = [(run // unit, unit)] + list(reversed(rest))
    index_dim = len(dims)
    dims.append((n_idx, s_axis))
    dims += [d for d in reversed(outer)]
    if len(dims) > MAX_DIMS:
        return GatherPlan(None, check, copy_data=True,
                          reason=f"{len(dims)} dims after collapsing exceed {MAX_DIMS}", **base)
    total = math.prod(d[0] for d in dims)
    mname = _math_for(total, math_name)
    divs = [_divisor(size, mname) for size, _ in dims]
    divs += [_divisor(1, mname)] * (MAX_DIMS - len(dims))
    strides = [s for _, s in dims] + [0] * (MAX_DIMS - len(dims))
    fields = dict(total=total, axis_len=base["axis_len"], s_axis=s_axis, ndim=len(dims),
                  index_dim=index_dim, dims=divs, strides=strides)
    grid = (min(_cdiv(total, MAX_THREADS), grid_cap), 1, 1)
    key = KernelKey("elem", unit, index_dtype, mname, mode)
    return GatherPlan(key, check, grid=grid, block=(MAX_THREADS, 1, 1), fields=fields,
                      reason=f"{len(dims)} dims of {unit} B units, any strides", **base)
