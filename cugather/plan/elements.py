"""Plans for ONNX GatherElements and numpy.take_along_axis.  Pure Python.

Every output element takes the element of ``data`` at its own position with
the ``axis`` coordinate replaced by the index stored there.  The plan merges
the output's dimensions as far as the strides of data and indices allow,
picks the unit width, the index math and the slot order (flat, or column
tiles when the dimensions inside the gathered axis span a warp).  The kernel
is ``kernels/elements.cuh``.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

from . import table, tuning
from .core import (GRID_X_MAX, DeviceLimits, Launch, Operand, Plan, cdiv, check_launch, divisors,
                   index_math, merge_dims, no_empty_axis, pad, split_run, too_many_dims, unit_for)
from .keys import KernelKey

__all__ = ["plan_elements", "elements_shape", "along_axis_shape", "elements_features_of",
           "TILE_COLS"]

#: Columns of a column tile: one warp.
TILE_COLS = 32
#: Longest data row the rules stage per output row (elements_row).
ROW_PAYS_MAX_BYTES = 32 * 1024


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


def _contiguous_strides(shape) -> list:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]


def plan_elements(data: Operand, indices_shape, index_dtype: str, axis: int, mode: str, *,
                  out_shape=None, out_align: int = 256, math_name: Optional[str] = None,
                  max_grid: Optional[int] = None, column_tiles: Optional[bool] = None,
                  kind: Optional[str] = None, limits: DeviceLimits = DeviceLimits()) -> Plan:
    """Plan ``out[c] = data[c with c[axis] replaced by indices[c]]``.

    ``axis`` must be normalised.  ``out_shape`` defaults to the indices' shape
    (GatherElements); take_along_axis passes the broadcast shape.  On other
    dimensions data may be larger than the output (read from its corner) or 1
    (broadcast), and indices equal to the output or 1 (broadcast).
    ``math_name``, ``max_grid``, ``column_tiles`` and ``kind`` (``"elements"``
    or ``"elements_row"``) force an index math, a smaller grid, the slot order
    or the kernel (tests and benchmarks).  Otherwise the kernel and the slot
    order are the choice of the device's GatherElements tuning table
    (:mod:`cugather.plan.table`), or of the rules where it has none.
    """
    if kind not in (None, "elements", "elements_row"):
        raise ValueError(f"kind must be 'elements' or 'elements_row', got {kind!r}")
    indices_shape = tuple(indices_shape)
    out_shape = tuple(indices_shape if out_shape is None else out_shape)
    axis_len = data.shape[axis]
    n_idx = math.prod(indices_shape)
    out_size = math.prod(out_shape)
    no_empty_axis(mode, (axis_len,), (axis,), n_idx, out_size)
    check = (check_launch(index_dtype, n_idx, (axis_len,))
             if mode == "raise" and n_idx and out_size else None)
    base = dict(op="elements", out_shape=out_shape, n_indices=n_idx, bound_axes=(axis,),
                bounds=(axis_len,), check=check)
    if out_size == 0:
        return Plan(**base)

    dims, unit, total, s_axis, cols, broadcast = _layout(data, indices_shape, out_shape, axis,
                                                         out_align)
    if len(dims) > tuning.MAX_DIMS:
        return too_many_dims(data, len(dims), **base)
    mname = index_math(total, math_name)
    fields = dict(total=total, axis_len=axis_len, s_axis=s_axis, ndim=len(dims),
                  dims=divisors([n for n, _, _ in dims], mname),
                  strides=pad([s for _, s, _ in dims]), index_strides=pad([i for _, _, i in dims]),
                  stage_unit=0)
    unmet = {"row": _row_unmet(dims, axis_len, s_axis, unit, limits),
             "tiles": "" if cols > 1 and total > cols else
                      f"a run of 2 or more columns inside the gathered axis and more than one "
                      f"row of them; here {cols} column(s) of {total} units"}
    if kind == "elements_row" and unmet["row"]:
        raise ValueError(f"kernel kind 'elements_row' needs {unmet['row']}")
    if kind is None and column_tiles is None:
        feats = _features(data, axis, out_shape, index_dtype, dims, unit, total, s_axis, cols,
                          broadcast)
        picks = dims[0][0] if dims else 1
        kind, column_tiles, base["chosen_by"] = _choose(limits, feats, unmet, picks,
                                                        axis_len * unit, cols, total)
    kind = kind or "elements"
    if kind == "elements_row":
        return _plan_row(data, dims, axis_len, unit, total, index_dtype, mname, mode, fields,
                         max_grid, base)
    if column_tiles is None:
        column_tiles = _tiles_rule(cols, total)
    # From a warp's width on, slots go in column tiles (kernels/elements.cuh),
    # so that the blocks resident at a time share a narrow band of every table
    # row they pick.
    if column_tiles:
        rows_per_tile = tuning.MAX_THREADS // 32 * tuning.ELEMENTS_ILP
        col_tiles = cdiv(cols, TILE_COLS)
        row_tiles = cdiv(total // cols, rows_per_tile)
        fields.update(cols=cols, col_tiles=col_tiles, row_tiles=row_tiles)
        grid = (min(col_tiles * row_tiles, max_grid or GRID_X_MAX), 1, 1)
        order = f"column tiles of {TILE_COLS} x {rows_per_tile} ({cols} columns)"
    else:
        fields.update(cols=0, col_tiles=0, row_tiles=0)
        grid = (min(cdiv(total, tuning.MAX_THREADS * tuning.ELEMENTS_ILP),
                    max_grid or GRID_X_MAX), 1, 1)
        order = "flat order"
    main = Launch(KernelKey("elements", unit, index_dtype, mname, mode), fields, grid,
                  (tuning.MAX_THREADS, 1, 1))
    return Plan(main=main, reason=f"{len(dims)} dims of {unit} B units, "
                                  f"{tuning.ELEMENTS_ILP} per thread, {order}", **base)


def _layout(data: Operand, indices_shape: tuple, out_shape: tuple, axis: int, out_align: int):
    """(dims innermost first as (size, data stride, index stride), unit, total units,
    s_axis, columns, broadcast) of a non-empty output."""
    istrides = _contiguous_strides(indices_shape)
    dims = []
    broadcast = False
    for d, n in enumerate(out_shape):
        dn, k = data.shape[d], indices_shape[d]
        if d != axis and not (dn >= n or dn == 1):
            raise ValueError(f"data dimension {d} of size {dn} cannot cover output size {n}")
        if k not in (n, 1):
            raise ValueError(f"indices dimension {d} of size {k} cannot cover output size {n}")
        broadcast = broadcast or (n != 1 and (k == 1 or (d != axis and dn == 1)))
        ds = 0 if d == axis or (dn == 1 and n != 1) else data.strides[d]
        dims.append((n, ds, 0 if k == 1 else istrides[d]))
    dims, run = split_run(merge_dims(dims + [(data.itemsize, 1, 0)]), 1)
    s_axis = data.strides[axis] if data.shape[axis] > 1 else 0
    unit = unit_for(run, data.align, out_align, abs(s_axis), *[abs(s) for _, s, _ in dims])
    dims = dims[::-1]  # innermost first
    if run // unit > 1:
        dims.insert(0, (run // unit, unit, 0))
    total = math.prod(out_shape) * data.itemsize // unit
    # Columns: the dimensions inside the gathered (or a broadcast) one, where
    # output and data positions move together.
    cols = 1
    for n, s, _ in dims:
        if s == 0:
            break
        cols *= n
    return dims, unit, total, s_axis, cols, broadcast


def _features(data, axis, out_shape, index_dtype, dims, unit, total, s_axis, cols, broadcast):
    return table.elements_features(unit, total, cols, out_shape[axis], data.shape[axis], s_axis,
                                   math.prod(data.shape) * data.itemsize,
                                   4 if index_dtype == "int32" else 8, len(dims), broadcast)


def elements_features_of(data: Operand, indices_shape, index_dtype: str, axis: int, *,
                         out_shape=None, out_align: int = 256) -> dict:
    """The tuning-table features (:data:`cugather.plan.table.ELEMENTS_FEATURES`)
    :func:`plan_elements` computes for this geometry (non-empty output): what
    ``cugather tune --op elements`` records."""
    indices_shape = tuple(indices_shape)
    out_shape = tuple(indices_shape if out_shape is None else out_shape)
    layout = _layout(data, indices_shape, out_shape, axis, out_align)
    return _features(data, axis, out_shape, index_dtype, *layout)


def _tiles_rule(cols: int, total: int) -> bool:
    return cols >= TILE_COLS and total > cols


def _rule(unmet: dict, picks: int, row_bytes: int, cols: int, total: int,
          limits: DeviceLimits) -> Tuple[str, bool, str]:
    """The hand-written rules: (kind, column tiles, which rule)."""
    if not unmet["row"] and _row_pays(picks, row_bytes, total // max(picks, 1), limits):
        return ("elements_row", False,
                f"rule: the gathered axis innermost, "
                f"{tuning.ELEMENTS_ROW_PICKS * tuning.MAX_THREADS} picks or more per data row of "
                f"at most {ROW_PAYS_MAX_BYTES} B and one per 32 bytes of it, rows for two blocks "
                f"per SM: staging the row pays")
    if _tiles_rule(cols, total):
        return "elements", True, f"rule: {TILE_COLS} columns or more inside the gathered axis"
    return "elements", False, "rule: flat order"


def _choose(limits: DeviceLimits, feats: dict, unmet: dict, picks: int, row_bytes: int,
            cols: int, total: int) -> Tuple[str, bool, str]:
    """(kind, column tiles, chosen_by): the first candidate of the ``limits.arch``
    GatherElements tuning table's leaf that applies, else the rules."""
    kind, tiles, why = _rule(unmet, picks, row_bytes, cols, total, limits)
    tab = table.table_for(limits.arch, "elements") if limits.arch else None
    if tab is None:
        return kind, tiles, why + (f" (no GatherElements tuning table for {limits.arch})"
                                   if limits.arch else "")
    choice, why_not = tab.lookup(feats)
    if choice is None:
        return kind, tiles, why + (f" (the {tab.arch} tuning table leaves this geometry to "
                                   f"them: {why_not})")
    skipped = []
    for label, cand, variant in choice.ranked:
        if unmet.get(label) or tab.spec.declines(label, feats):
            skipped.append(label)
            continue
        verb = "does" if len(skipped) == 1 else "do"
        note = f", as {' and '.join(skipped)} {verb} not apply" if skipped else ""
        return cand, bool(variant), (f"{tab.arch} tuning table, leaf {choice.leaf} "
                                     f"({label}{note}): {choice.why}")
    tail = (f"names {skipped[0]}, which does not apply" if len(skipped) == 1 else
            f"names {', '.join(skipped)}, none of which applies")
    return kind, tiles, why + f" ({tab.arch} table leaf {choice.leaf} {tail})"


def _row_unmet(dims, axis_len: int, s_axis: int, unit: int, limits: DeviceLimits) -> str:
    """What the elements_row kernel needs that this geometry lacks ("" when it can
    run it): the gathered axis innermost in the output with contiguous indices,
    contiguous elements of one unit in data, and a data row within shared memory."""
    if not dims:  # one output element, nothing split
        return "an output of rows along the gathered axis"
    _, inner_s, inner_i = dims[0]
    row = axis_len * unit
    if inner_s != 0 or inner_i != 1:
        return "the gathered axis innermost in the output, its indices contiguous"
    if s_axis != unit or row > limits.max_shared_mem:
        return (f"a contiguous data row of at most {limits.max_shared_mem} bytes; here "
                f"{axis_len} elements of {unit} B, {s_axis} B apart")
    return ""


def _row_pays(picks: int, row_bytes: int, rows: int, limits: DeviceLimits) -> bool:
    """Staging a row reads every byte of it once; direct picks read a 32-byte
    sector each.  Staging pays where the picks would read at least the row's
    bytes, every thread of the row's block has its preloaded picks, there are
    rows for two blocks per SM (a block stages one row at a time) and a row
    leaves shared memory for several blocks (H200, BENCHMARKS.md: 1.13-1.28x the
    elements kernel on rows of 16 and 32 KB with 1024 to 4096 picks; 0.06-0.53x
    with 32 to 256 picks per row; over the GatherElements tuning geometries,
    0.1-0.7x with fewer than 128 rows, 0.78-0.80x on rows of 46-50 KB)."""
    return (picks >= tuning.ELEMENTS_ROW_PICKS * tuning.MAX_THREADS
            and picks * 32 >= row_bytes and rows >= 2 * limits.sm_count
            and row_bytes <= ROW_PAYS_MAX_BYTES)


def _plan_row(data, dims, axis_len, unit, total, index_dtype, mname, mode, fields, max_grid,
              base) -> Plan:
    picks = dims[0][0]
    rows = total // picks
    row = axis_len * unit
    # The rows start at the data's alignment plus multiples of the outer strides.
    stage = unit_for(row, data.align, *[abs(s) for _, s, _ in dims[1:]])
    fields.update(cols=picks, row_tiles=rows, col_tiles=0, stage_unit=stage)
    grid = (min(rows, max_grid or GRID_X_MAX), 1, 1)
    main = Launch(KernelKey("elements_row", unit, index_dtype, mname, mode), fields, grid,
                  (tuning.MAX_THREADS, 1, 1), cdiv(row, 16) * 16)
    return Plan(main=main, reason=f"a data row of {row} B staged in shared memory per output "
                                  f"row of {picks} picks", **base)
