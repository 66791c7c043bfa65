"""Plans for ONNX GatherND.  Pure Python.

The output is treated as rows: one per index tuple and per position in the
slice dimensions outside the innermost contiguous run; a row is that run,
copied with the widest unit dividing its bytes, the base pointers and every
stride.  The kernel is ``kernels/nd.cuh``.
"""

from __future__ import annotations

import math
from typing import Optional

from . import tuning
from .core import (GRID_X_MAX, GRID_YZ_MAX, Launch, Operand, Plan, cdiv, check_launch, divisors,
                   index_math, merge_dims, no_empty_axis, pad, split_run, too_many_dims,
                   unit_for)
from .keys import KernelKey

__all__ = ["plan_nd", "nd_shape"]


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
    if m > tuning.MAX_DIMS:
        raise ValueError(f"index tuples of length {m} exceed the supported {tuning.MAX_DIMS}")
    return indices_shape[:-1] + data_shape[b + m:]


def _nd_split(units: int):
    """(block, rows per thread, units per thread, chunks per row) of the nd kernel.

    Short rows: TX = units threads per row, 256 // TX rows per block, each
    thread ND_SHORT_RU rows.  Long rows: ND_LONG_CU units per thread, up to
    256 threads per row chunk, chunks over blockIdx.y.
    """
    if units <= tuning.MAX_THREADS:
        tx, ru, cu = units, tuning.ND_SHORT_RU, 1
    else:
        tx = min(tuning.MAX_THREADS, cdiv(cdiv(units, tuning.ND_LONG_CU), 32) * 32)
        ru, cu = 1, tuning.ND_LONG_CU
    return (tx, max(1, tuning.MAX_THREADS // tx), 1), ru, cu, cdiv(units, tx * cu)


def plan_nd(data: Operand, indices_shape, index_dtype: str, batch_dims: int, mode: str, *,
            out_align: int = 256, math_name: Optional[str] = None,
            max_grid: Optional[int] = None) -> Plan:
    """Plan ONNX GatherND with ``batch_dims`` leading batch dimensions.

    ``math_name`` and ``max_grid`` force an index math or a smaller grid
    (tests and benchmarks).
    """
    indices_shape = tuple(indices_shape)
    b = batch_dims
    out_shape = nd_shape(data.shape, indices_shape, b)
    m = indices_shape[-1]
    bounds = tuple(data.shape[b:b + m])
    bound_axes = tuple(range(b, b + m))
    n_tuples = math.prod(indices_shape[:-1])
    n_idx = n_tuples * m
    out_size = math.prod(out_shape)
    no_empty_axis(mode, bounds, bound_axes, n_idx, out_size)
    check = check_launch(index_dtype, n_idx, bounds) if mode == "raise" and n_idx else None
    base = dict(op="nd", out_shape=out_shape, n_indices=n_idx, bound_axes=bound_axes,
                bounds=bounds, check=check)
    if out_size == 0:
        return Plan(**base)

    comp_strides = [s if n > 1 else 0 for n, s in zip(bounds, data.strides[b:b + m])]
    slice_dims, run = split_run(merge_dims(data.dims(b + m) + [(data.itemsize, 1)]))
    tuple_dims = merge_dims(data.dims(0, b) + [(math.prod(indices_shape[b:-1]), 0)])
    unit = unit_for(run, data.align, out_align,
                    *[abs(s) for _, s in slice_dims + tuple_dims], *map(abs, comp_strides))
    units = run // unit
    dims = slice_dims[::-1] + tuple_dims[::-1]  # innermost first
    if len(dims) > tuning.MAX_DIMS:
        return too_many_dims(data, len(dims), **base)
    rows = math.prod(n for n, _ in slice_dims) * n_tuples
    mname = index_math(max(rows, units), math_name)
    block, ru, cu, chunks = _nd_split(units)
    fields = dict(rows=rows, units=units, ndim=len(dims), tuple_dim=len(slice_dims), m=m,
                  tile_cu=cu, dims=divisors([n for n, _ in dims], mname),
                  strides=pad([s for _, s in dims]), bounds=pad(bounds),
                  comp_strides=pad(comp_strides))
    grid = (min(cdiv(rows, block[1] * ru), max_grid or GRID_X_MAX),
            min(chunks, max_grid or GRID_YZ_MAX), 1)
    main = Launch(KernelKey("nd", unit, index_dtype, mname, mode), fields, grid, block)
    return Plan(main=main, reason=f"rows of {units} x {unit} B, {len(dims)} row dims, {m} index "
                                  f"components, {block[1] * ru} row(s) per block tile", **base)
