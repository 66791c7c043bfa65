"""Plans for ONNX Gather and numpy.take.  Pure Python (no CuPy, no GPU).

The data is viewed as ``(outer, axis_len, row)``: when every row is
contiguous and the outer slices are one stride apart, a row kernel moves rows
of units (``rows``, ``chunks`` for long rows, ``scalar`` and ``inner`` for
rows of one unit); otherwise the ``strided`` fallback walks any strides one
unit per thread.  The kernels are in ``kernels/gather.cuh``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from . import core, table, tuning
from .core import (GRID_X_MAX, GRID_YZ_MAX, DeviceLimits, Launch, Operand, Plan, cdiv,
                   check_launch, divisors, index_math, merge_dims, no_empty_axis, pad, unit_for)
from .fastdiv import make_divisor
from .keys import KernelKey, kind_spec

__all__ = ["GatherPlan", "plan_gather", "GATHER_KINDS"]

GATHER_KINDS = ("rows", "chunks", "chunks16", "scalar", "inner", "slab", "slabw", "window", "pack",
                "weave", "slabr", "flat", "slabf", "flatv", "span", "lean", "strided")
#: Kernel modes in which an axis of length 1 resolves every index to 0: the
#: planner then takes the ``bcast`` kind (or ``bcastw``), which reads no index.
BCAST_MODES = ("wrap", "clip", "clip_numpy")
BCAST_KINDS = ("bcast", "bcastw")


@dataclass(frozen=True)
class GatherPlan(Plan):
    """A Gather / take launch, minus the pointers.  Build with :func:`plan_gather`."""

    @property
    def axis(self) -> int:
        return self.bound_axes[0]

    @property
    def axis_len(self) -> int:
        return self.bounds[0]


def _rows_cu(unit: int) -> int:
    """Units per thread per row in the rows kernel (16 bytes of 8- and 16-byte units)."""
    return 16 // unit if unit >= 8 else tuning.ROWS_NARROW_CU


def _stage_pays(axis_len: int, unit: int, s_axis: int, picks: int, n_outer: int,
                limits: DeviceLimits) -> bool:
    """Whether staging contiguous axis rows of one-unit elements in shared memory
    beats picking from them directly (scalar).  Measured on H200 over the random
    sweep: staging pays when several rows of at least 64 bytes each take enough
    picks to fill a block and to touch about every 32-byte sector of the row;
    a single row sits in L1 for direct picks anyway, and fewer picks leave a
    staging block idle (64 picks from 256-byte rows: 32 us staged, 7 us direct)."""
    row = axis_len * unit
    return (s_axis in (0, unit) and row <= limits.max_shared_mem and n_outer >= 2
            and row >= 64 and picks >= tuning.MAX_THREADS and picks * max(32, unit) >= row)


def _row_split(kind: str, units: int, unit: int):
    """(block, units per thread, chunks per row) of the rows and chunks kernels.

    rows: TX = ceil(units / CU) threads per row (at most 256), 256 // TX rows
    per block.  chunks: CHUNKS_CU units per thread (chunks16: CHUNKS16_CU),
    chunks over blockIdx.y: one chunk up to 256 threads' worth of units, beyond
    that chunks of at most CHUNKS_SPLIT threads' worth, the row shared evenly
    (TX a multiple of 32).
    """
    if kind == "rows":
        cu = _rows_cu(unit)
        tx = min(cdiv(units, cu), tuning.MAX_THREADS)
    else:
        cu = tuning.CHUNKS16_CU if kind == "chunks16" else tuning.CHUNKS_CU
        chunks = 1 if units <= tuning.MAX_THREADS * cu else cdiv(units, tuning.CHUNKS_SPLIT * cu)
        tx = cdiv(cdiv(units, chunks * cu), 32) * 32
    ty = max(1, tuning.MAX_THREADS // tx)
    return (tx, ty, 1), cu, cdiv(units, tx * cu)


def _spread(work: int, threads: int, limits: DeviceLimits) -> int:
    """Threads per block for ``work`` units of a grid-stride kernel (one block per
    ``threads`` of them): ``threads`` halved, to tuning.SPREAD_MIN_THREADS at
    least, while the grid would have fewer blocks than the GPU has SMs."""
    while threads // 2 >= tuning.SPREAD_MIN_THREADS and cdiv(work, threads) < limits.sm_count:
        threads //= 2
    return threads


def plan_gather(data: Operand, indices_shape: tuple, index_dtype: str, axis: int, mode: str,
                *, out_align: int = 256, limits: DeviceLimits = DeviceLimits(),
                kind: Optional[str] = None, math_name: Optional[str] = None,
                max_grid: Optional[int] = None, row_unroll: Optional[int] = None,
                check_unread: bool = True) -> GatherPlan:
    """Plan ``out = take(data, indices, axis)`` with kernel mode ``mode``.

    ``axis`` must already be normalised.  ``check_unread`` (ONNX) checks every
    index in raise mode; numpy.take (False) checks only indices some outer
    slice reads, none when that part is empty.  ``kind``, ``math_name``,
    ``max_grid`` and ``row_unroll`` force a variant, an index math, a smaller
    grid or the rows per thread (tests and benchmarks); the default is the
    fastest applicable choice.
    """
    indices_shape = tuple(indices_shape)
    n_idx = math.prod(indices_shape)
    axis_len = data.shape[axis]
    out_shape = data.shape[:axis] + indices_shape + data.shape[axis + 1:]
    out_size = math.prod(out_shape)
    no_empty_axis(mode, (axis_len,), (axis,), n_idx, out_size)
    read = check_unread or math.prod(data.shape[:axis]) > 0
    check = (check_launch(index_dtype, n_idx, (axis_len,))
             if mode == "raise" and n_idx and read else None)
    base = dict(op="gather", out_shape=out_shape, n_indices=n_idx, bound_axes=(axis,),
                bounds=(axis_len,), check=check)
    if out_size == 0:
        return GatherPlan(**base)
    if kind is not None and kind not in GATHER_KINDS + BCAST_KINDS:
        raise ValueError(f"kind must be one of {GATHER_KINDS + BCAST_KINDS}, got {kind!r}")

    outer = merge_dims(data.dims(0, axis))
    inner = merge_dims(data.dims(axis + 1) + [(data.itemsize, 1)])
    if not inner or inner[-1][1] != 1:  # a 1-byte element was dropped as a size-1 dim
        inner.append((data.itemsize, 1))
    s_axis = data.strides[axis] if axis_len > 1 else 0
    contiguous_row = len(inner) == 1 and len(outer) <= 1
    forced = kind is not None
    if not contiguous_row or kind == "strided":
        if not forced:
            base["chosen_by"] = "rule: rows that are not contiguous, or outer slices not one " \
                                "stride apart, take the strided kernel"
        if kind in (None, "strided"):
            return _plan_strided(data, outer, inner, s_axis, n_idx, index_dtype, mode,
                                 out_align, math_name, max_grid or GRID_X_MAX, base)
        raise ValueError(f"kernel kind {kind!r} needs contiguous rows and one outer stride")

    row_bytes = inner[0][0]
    n_outer, s_outer = outer[0] if outer else (1, 0)
    unit = unit_for(row_bytes, data.align, out_align, s_outer, s_axis)
    units = row_bytes // unit
    rows = n_outer * n_idx
    if kind in BCAST_KINDS or (not forced and axis_len == 1 and mode in BCAST_MODES
                               and out_align >= 16):
        return _plan_bcast(kind, data, unit, row_bytes, n_outer, s_outer, n_idx, index_dtype,
                           mode, out_align, math_name, max_grid or GRID_X_MAX, base, limits)
    if not forced:
        kind, row_unroll, base["chosen_by"] = _choose(
            limits, row_bytes, unit, n_outer, n_idx, axis_len, s_axis, index_dtype, out_align)
    else:
        unmet = _unmet(kind, row_bytes, unit, axis_len, s_axis, out_align, limits,
                       rows * row_bytes, n_idx)
        if unmet:
            raise ValueError(f"kernel kind {kind!r} needs {unmet}")
    if kind == "strided":
        return _plan_strided(data, outer, inner, s_axis, n_idx, index_dtype, mode, out_align,
                             math_name, max_grid or GRID_X_MAX, base)
    if kind == "weave":
        return _plan_weave(data, unit, row_bytes, n_outer, s_outer, s_axis, n_idx, index_dtype,
                           mode, math_name, max_grid or GRID_X_MAX, base)
    if kind == "slabr":
        return _plan_slabr(unit, row_bytes, n_outer, s_outer, s_axis, n_idx, index_dtype, mode,
                           math_name, max_grid, base, limits)
    if kind in ("window", "pack"):
        main = _window_launch(kind, data, row_bytes, n_outer, s_outer, s_axis, axis_len, n_idx,
                              index_dtype, mode, math_name, max_grid or GRID_X_MAX, limits)
        return GatherPlan(main=main, reason=f"rows of {row_bytes} B as {main.fields['chunks']} "
                                            f"16-byte chunks, {_window_ilp(kind)} per thread",
                          **base)

    if kind in ("flat", "flatv", "lean"):
        return _plan_flat(kind, unit, units, n_outer, s_outer, s_axis, n_idx, index_dtype, mode,
                          math_name, max_grid or GRID_X_MAX, base, limits)
    if kind == "slabf":
        return _plan_slabf(unit, units, n_outer, s_outer, s_axis, n_idx, index_dtype, mode,
                           math_name, max_grid, base, limits, data.align)
    if kind == "span":
        return _plan_span(data, row_bytes, n_outer, s_outer, s_axis, n_idx, index_dtype, mode,
                          math_name, max_grid, base)

    mname = index_math(max(rows, units, n_idx, n_outer), math_name)
    fields = dict(s_outer=s_outer, s_axis=s_axis, axis_len=axis_len, rows=rows, units=units,
                  n_indices=n_idx, outer=n_outer,
                  n_div=make_divisor(max(n_idx, 1), 32 if mname == "fast32" else 64),
                  chunk=0, stage_unit=0, row_unroll=1)
    grid_x = max_grid or GRID_X_MAX
    grid_yz = max_grid or GRID_YZ_MAX
    block = (tuning.MAX_THREADS, 1, 1)
    if kind in ("rows", "chunks", "chunks16"):
        block, cu, chunks = _row_split(kind, units, unit)
        ru = 1
        if kind == "rows":
            ru = row_unroll or core.row_unroll(rows, block[1], chunks, limits,
                                                  tuning.ROWS_MAX_RU)
            fields["row_unroll"] = ru
            tx = block[0]
            ty = max(1, _spread(rows * tx, tx * block[1], limits) // tx) if tx < 64 else block[1]
            block = (tx, ty, 1)
        grid = (min(cdiv(rows, block[1] * ru), grid_x), min(chunks, grid_yz), 1)
        reason = (f"{units} units of {unit} B per row; block {block[0]}x{block[1]}, "
                  f"{ru} row(s) x {cu} unit(s) per thread, {chunks} chunk(s) per row")
    elif kind == "scalar":
        threads = _spread(cdiv(rows, tuning.SCALAR_ILP), tuning.MAX_THREADS, limits)
        block = (threads, 1, 1)
        grid = (min(cdiv(rows, threads * tuning.SCALAR_ILP), grid_x), 1, 1)
        reason = f"one {unit} B unit per row, {tuning.SCALAR_ILP} loads in flight per thread"
    elif kind in ("slab", "slabw"):
        main, reason = _slab_launch(unit, index_dtype, mname, mode, axis_len, s_axis, n_outer,
                                    s_outer, n_idx, data.align, limits, max_grid,
                                    words=kind == "slabw")
        return GatherPlan(main=main, reason=reason, **base)
    else:
        main = _inner_launch(unit, index_dtype, mname, mode, axis_len, s_axis, n_outer, s_outer,
                             n_idx, data.align, limits, max_grid)
        return GatherPlan(main=main, reason=f"axis row of {axis_len * row_bytes} B staged in "
                                            f"shared memory", **base)
    main = Launch(KernelKey(kind, unit, index_dtype, mname, mode), fields, grid, block)
    return GatherPlan(main=main, reason=reason, **base)


def _inner_launch(unit: int, index_dtype: str, math_name: str, mode: str, axis_len: int,
                  s_axis: int, n_outer: int, s_outer: int, n_idx: int, align: int,
                  limits: DeviceLimits, max_grid: Optional[int] = None) -> Launch:
    """The inner kernel over ``n_outer`` rows of ``axis_len`` one-unit elements,
    the same ``n_idx`` picks from each."""
    row = axis_len * unit
    # Enough blocks to fill the GPU when there are few outer rows, and chunks
    # of at most INNER_CHUNK_BYTES out (or INNER_ROW_CHUNKS staged rows): every
    # chunk of a row stages that row again (from L2: its blocks are adjacent).
    target = max(tuning.INNER_CHUNK_BYTES, tuning.INNER_ROW_CHUNKS * row)
    wave = tuning.INNER_SM_BLOCKS * limits.sm_count  # blocks resident at once
    fill = cdiv(wave, n_outer)
    capped = cdiv(n_idx * unit, target) if target else 1
    if tuning.INNER_BALANCE and capped > fill:
        # Whole waves: INNER_SM_BLOCKS blocks are resident per SM (the kernel's
        # launch bounds), so blocks past a multiple of that many per SM would run
        # as a part-empty wave of their own.  Rounded down per row, never past it.
        capped = cdiv(capped * n_outer, wave) * wave // n_outer
    chunks = max(1, min(cdiv(n_idx, tuning.MAX_THREADS), max(fill, capped)))
    chunk = cdiv(cdiv(n_idx, chunks), tuning.MAX_THREADS) * tuning.MAX_THREADS
    fields = dict(s_outer=s_outer, s_axis=s_axis, axis_len=axis_len, rows=n_outer * n_idx,
                  units=1, n_indices=n_idx, outer=n_outer,
                  n_div=make_divisor(max(n_idx, 1), 32 if math_name == "fast32" else 64),
                  chunk=chunk, stage_unit=unit_for(align, s_outer, row), row_unroll=1)
    grid = (min(cdiv(n_idx, chunk), max_grid or GRID_X_MAX),
            min(n_outer, max_grid or GRID_YZ_MAX), 1)
    return Launch(KernelKey("inner", unit, index_dtype, math_name, mode), fields, grid,
                  (tuning.MAX_THREADS, 1, 1), cdiv(row, 16) * 16)


def _unmet(kind: str, row_bytes: int, unit: int, axis_len: int, s_axis: int,
           out_align: int, limits: DeviceLimits, out_bytes: int, n_idx: int) -> str:
    """What kernel ``kind`` needs that a contiguous-row geometry lacks ("" when it
    can run it): the one test for a forced kind and for a tuning table's choice."""
    if kind in ("scalar", "inner", "slab", "slabw") and row_bytes != unit:
        return f"rows of one unit; rows here are {row_bytes // unit} units"
    if kind == "chunks16" and unit not in kind_spec(kind).units:
        return (f"units of {' or '.join(map(str, kind_spec(kind).units))} bytes; units here "
                f"are {unit} B")
    if kind == "slabw" and _slab_word(unit) == unit:
        return f"units of 1, 2 or 4 bytes (stored several at a time); units here are {unit} B"
    if kind in ("inner", "slab", "slabw"):
        stage = limits.max_shared_mem if kind == "inner" else _slab_stage(limits)
        if s_axis not in (0, unit) or axis_len * row_bytes > stage:
            return (f"a contiguous gathered axis of at most {stage} bytes to stage in shared "
                    f"memory; here it is {axis_len} elements {s_axis} B apart")
    if kind == "slabw" and out_align < _slab_word(unit):
        return (f"an output aligned to {_slab_word(unit)} B for {unit}-byte units (stored "
                f"{_slab_word(unit)} B at a time); out here is aligned to {out_align} B")
    if kind == "window" and (row_bytes < 16 or out_align < 16):
        return (f"rows of at least 16 bytes and a 16-byte aligned output; rows here are "
                f"{row_bytes} B, out aligned to {out_align} B")
    if kind == "pack" and not (3 <= row_bytes < 16 and out_align >= 16):
        return (f"rows of 3 to 15 bytes and a 16-byte aligned output; rows here are "
                f"{row_bytes} B, out aligned to {out_align} B")
    if kind in ("weave", "slabr") and not (unit <= 4 and unit < row_bytes < 16
                                           and out_align >= 16):
        return (f"rows of two units or more of at most 4 bytes, under 16 bytes, and a 16-byte "
                f"aligned output; rows here are {row_bytes} B of {unit}-byte units, out aligned "
                f"to {out_align} B")
    if kind == "slabr" and (s_axis not in (0, row_bytes) or axis_len * _slabr_pitch(row_bytes)
                            > _slabr_stage(limits, row_bytes)):
        return (f"a contiguous gathered axis of at most {_slabr_stage(limits, row_bytes)} bytes "
                f"to stage in shared memory, its rows padded to {_slabr_pitch(row_bytes)} B; "
                f"here it is {axis_len} rows of {row_bytes} B, {s_axis} B apart")
    if kind == "slabf" and (s_axis not in (0, row_bytes)
                            or axis_len * row_bytes > _slab_stage(limits)):
        return (f"a contiguous gathered axis of at most {_slab_stage(limits)} bytes to stage "
                f"in shared memory; here it is {axis_len} rows of {row_bytes} B, {s_axis} B "
                f"apart")
    if kind in ("flat", "flatv", "slabf") and (unit >= 16 or out_align < 16):
        return (f"units narrower than 16 bytes and a 16-byte aligned output; units here "
                f"are {unit} B, out aligned to {out_align} B")
    if kind == "flatv" and (row_bytes != unit or n_idx % _flat_per(unit)):
        return (f"rows of one unit and an index count that {_flat_per(unit)} divides; rows "
                f"here are {row_bytes // unit} units, {n_idx} indices")
    if kind == "span" and (row_bytes < tuning.SPAN_MIN_ROW or out_align < 16):
        return (f"rows of at least {tuning.SPAN_MIN_ROW} bytes and a 16-byte aligned output; "
                f"rows here are {row_bytes} B, out aligned to {out_align} B")
    if kind == "lean" and out_bytes > tuning.LEAN_MAX_OUT and row_bytes != unit:
        return (f"an output of at most {tuning.LEAN_MAX_OUT} bytes or rows of one unit; this "
                f"one is {out_bytes} B of {row_bytes // unit}-unit rows")
    return ""


def _rule(limits: DeviceLimits, row_bytes: int, unit: int, n_outer: int, n_idx: int,
          axis_len: int, s_axis: int, out_align: int) -> Tuple[str, str]:
    """The hand-written rules: (kind, which rule)."""
    units = row_bytes // unit
    if n_outer * n_idx * row_bytes <= tuning.SHORT_CALL_OUT:
        # A short call costs its launch and two dependent loads: one unit per
        # thread, or chunks for rows of many narrow units (H200 records, outputs
        # up to 1 MiB: lean 1.01x the fastest candidate, chunks 1.01x on rows of
        # more than 16 units under 16 B; the rules below 1.03x to 1.44x).
        if units > tuning.SHORT_CHUNKS_UNITS and unit < 16:
            return "chunks", (f"rule: a short call (at most {tuning.SHORT_CALL_OUT} B out) of rows "
                              f"of more than {tuning.SHORT_CHUNKS_UNITS} units under 16 B")
        return "lean", f"rule: a short call (at most {tuning.SHORT_CALL_OUT} B out)"
    if (unit <= 2 and row_bytes % 16 and 16 < row_bytes <= tuning.WINDOW_MAX_ROW
            and out_align >= 16):
        return "window", (f"rule: rows of 17 to {tuning.WINDOW_MAX_ROW} B, not a multiple of "
                          f"16, moved in 1- or 2-byte units")
    if 1 < units and row_bytes < 16 and out_align >= 16:
        # H200 records, outputs over 1 MiB: the rows kernel took 1.16x-1.22x
        # the fastest candidate's time on such rows, flat 1.02x-1.06x (1-, 2-
        # and 4-byte units, 515 geometries)
        return "flat", "rule: rows of several units, under 16 B"
    if units == 1:
        if _stage_pays(axis_len, row_bytes, s_axis, n_idx, n_outer, limits):
            return "inner", "rule: one-unit rows; staging the axis row pays"
        for kind in tuning.ONE_UNIT_RULE:
            if not _unmet(kind, row_bytes, unit, axis_len, s_axis, out_align, limits,
                          n_outer * n_idx * row_bytes, n_idx):
                return kind, f"rule: one-unit rows under 16 B, as {kind}'s 16-byte chunks"
        return "scalar", "rule: one-unit rows"
    if units > tuning.MAX_THREADS * _rows_cu(unit):
        return "chunks", f"rule: rows of more than {tuning.MAX_THREADS * _rows_cu(unit)} units"
    if unit in (4, 8) and row_bytes <= tuning.FLAT_RULE_MAX_ROW and out_align >= 16:
        return "flat", (f"rule: rows of several 4- or 8-byte units, at most "
                        f"{tuning.FLAT_RULE_MAX_ROW} B")
    return "rows", "rule: rows of several units"


def _choose(limits: DeviceLimits, row_bytes: int, unit: int, n_outer: int, n_idx: int,
            axis_len: int, s_axis: int, index_dtype: str, out_align: int
            ) -> Tuple[str, Optional[int], str]:
    """(kind, rows per thread or None, chosen_by) of a contiguous-row geometry: the
    first candidate of the ``limits.arch`` tuning table's leaf that applies, else
    the rules."""
    tab = table.table_for(limits.arch) if limits.arch else None
    kind, why = _rule(limits, row_bytes, unit, n_outer, n_idx, axis_len, s_axis, out_align)
    if tab is None:
        return kind, None, why + (f" (no tuning table for {limits.arch})" if limits.arch else "")
    feats = table.features(row_bytes, unit, n_outer, n_idx, axis_len, _index_bytes(index_dtype))
    choice, why_not = tab.lookup(feats)
    if choice is None:
        return kind, None, why + (f" (the {tab.arch} tuning table leaves this geometry to them: "
                                  f"{why_not})")
    skipped = []
    for label, cand, ru in choice.ranked:
        if (_unmet(cand, row_bytes, unit, axis_len, s_axis, out_align, limits,
                   n_outer * n_idx * row_bytes, n_idx) or table.declines(label, feats)):
            skipped.append(label)
            continue
        verb = "does" if len(skipped) == 1 else "do"
        note = f", as {' and '.join(skipped)} {verb} not apply" if skipped else ""
        return cand, ru, (f"{tab.arch} tuning table, leaf {choice.leaf} ({label}{note}): "
                          f"{choice.why}")
    if len(skipped) == 1:
        tail = f"names {skipped[0]}, which does not apply"
    else:
        tail = f"names {', '.join(skipped)}, none of which applies"
    return kind, None, why + f" ({tab.arch} table leaf {choice.leaf} {tail})"


def _slab_stage(limits: DeviceLimits) -> int:
    return min(tuning.SLAB_MAX_STAGE, limits.max_shared_mem)


def _slab_word(unit: int) -> int:
    """Output bytes per store of the slabw kernel (kernels/gather.cuh slab_word); the
    unit itself where slabw has no word for it."""
    return max(unit, tuning.SLAB_WORD.get(unit, unit))


def _slab_launch(unit: int, index_dtype: str, math_name: str, mode: str, axis_len: int,
                 s_axis: int, n_outer: int, s_outer: int, n_idx: int, align: int,
                 limits: DeviceLimits, max_grid: Optional[int] = None,
                 words: bool = False) -> Tuple[Launch, str]:
    """The slab kernel: groups of outer rows of ``axis_len`` one-unit elements staged
    per block, each index read once per group; ``words``: the slabw kernel, which
    stores several consecutive picks at a time."""
    row = axis_len * unit
    big = n_outer * n_idx * unit >= tuning.SLAB_BIG_OUT
    target = (tuning.SLAB_BIG_BLOCKS_PER_SM if big else tuning.SLAB_BLOCKS_PER_SM) * limits.sm_count
    # a thread takes one pick at a time, or (words) one word slot: a word of
    # `per` picks at any phase of the row (kernels/gather.cuh gather_slabw)
    per = _slab_word(unit) // unit if words else 1
    slots = (n_idx + 2 * per - 2) // per
    bx = cdiv(slots, tuning.MAX_THREADS)  # blocks that cover the indices once
    if tuning.SLAB_STAGE_RATIO:
        # Every block of a group stages the group again: at most SLAB_STAGE_RATIO
        # times the bytes those blocks write (axis_len * blocks / picks), the
        # threads looping over more picks instead.
        bx = min(bx, max(1, tuning.SLAB_STAGE_RATIO * n_idx // max(axis_len, 1)))
    fit = max(1, _slab_stage(limits) // max(row, 1))  # an empty axis in fill mode: row 0
    # Whole groups where the indices alone fill the GPU; otherwise smaller groups,
    # so that outer rows give the blocks the indices cannot.
    group = min(n_outer, fit, max(1, cdiv(n_outer * bx, target)))
    grid_y = min(cdiv(n_outer, group), max_grid or GRID_YZ_MAX)
    grid_x = min(max(1, min(bx, cdiv(target, grid_y))), max_grid or GRID_X_MAX)
    fields = dict(s_outer=s_outer, s_axis=s_axis, axis_len=axis_len, rows=n_outer * n_idx,
                  units=1, n_indices=n_idx, outer=n_outer,
                  n_div=make_divisor(max(n_idx, 1), 32 if math_name == "fast32" else 64),
                  chunk=group, stage_unit=unit_for(align, s_outer, row), row_unroll=1)
    key = KernelKey("slabw" if words else "slab", unit, index_dtype, math_name, mode)
    launch = Launch(key, fields, (grid_x, grid_y, 1), (tuning.MAX_THREADS, 1, 1),
                    cdiv(group * row, 16) * 16)
    stores = f", {per * unit} B stores of {per} picks" if per > 1 else ""
    return launch, (f"{group} outer row(s) of {row} B staged per block in shared memory, "
                    f"each index read once per group{stores}")


def _plan_strided(data, outer, inner, s_axis, n_idx, index_dtype, mode, out_align, math_name,
                  grid_cap, base) -> GatherPlan:
    # Output dims, innermost first, as (size, byte stride in data); the index
    # dim carries the axis stride.  The innermost contiguous run sets the unit.
    run = inner[-1][0]
    rest = inner[:-1]
    unit = unit_for(run, data.align, out_align, abs(s_axis), *[abs(s) for _, s in rest + outer])
    dims = [(run // unit, unit)] + list(reversed(rest))
    index_dim = len(dims)
    dims.append((n_idx, s_axis))
    dims += list(reversed(outer))
    if len(dims) > tuning.MAX_DIMS:
        return GatherPlan(copy_data=True, reason=f"{len(dims)} dims after merging exceed "
                                                 f"{tuning.MAX_DIMS}", **base)
    total = math.prod(n for n, _ in dims)
    mname = index_math(total, math_name)
    fields = dict(total=total, axis_len=base["bounds"][0], s_axis=s_axis, ndim=len(dims),
                  index_dim=index_dim, dims=divisors([n for n, _ in dims], mname),
                  strides=pad([s for _, s in dims]))
    grid = (min(cdiv(total, tuning.MAX_THREADS), grid_cap), 1, 1)
    main = Launch(KernelKey("strided", unit, index_dtype, mname, mode), fields, grid,
                  (tuning.MAX_THREADS, 1, 1))
    return GatherPlan(main=main, reason=f"{len(dims)} dims of {unit} B units, any strides",
                      **base)


def _window_ilp(kind: str) -> int:
    return tuning.PACK_ILP if kind == "pack" else tuning.WINDOW_ILP


def _window_launch(kind, data, row_bytes, n_outer, s_outer, s_axis, axis_len, n_idx, index_dtype,
                   mode, math_name, grid_cap, limits) -> Launch:
    # 16-byte chunks of the output (plan_gather checked _unmet): the row length
    # needs no alignment, the output's base does (16-byte stores); a chunk spans
    # at most two rows (window, bcastw) or tuning.PACK_ROWS (pack).
    rows = n_outer * n_idx
    out_bytes = rows * row_bytes
    chunks = cdiv(out_bytes, 16)
    mname = index_math(max(out_bytes, rows, n_idx, n_outer), math_name)
    bits = 32 if mname == "fast32" else 64
    lo, hi = data.extent()
    fields = dict(s_outer=s_outer, s_axis=s_axis, axis_len=axis_len, rows=rows,
                  row_bytes=row_bytes, out_bytes=out_bytes, chunks=chunks, lo=lo, hi=hi,
                  n_div=make_divisor(max(n_idx, 1), bits), row_div=make_divisor(row_bytes, bits))
    ilp = _window_ilp(kind)
    threads = _spread(cdiv(chunks, ilp), tuning.MAX_THREADS, limits)
    grid = (min(cdiv(chunks, threads * ilp), grid_cap), 1, 1)
    return Launch(KernelKey(kind, 16, index_dtype, mname, mode), fields, grid, (threads, 1, 1))


def _plan_weave(data, unit, row_bytes, n_outer, s_outer, s_axis, n_idx, index_dtype, mode,
                math_name, grid_cap, base) -> GatherPlan:
    # Tiles of 32 x WEAVE_RU consecutive rows, one per warp at a time, each staged
    # in shared memory (T x row_bytes bytes a warp: a multiple of 16, so every
    # tile's output starts 16-byte aligned on the aligned output) and stored as
    # 16-byte chunks.  Row numbers reach one tile past the last row.
    rows = n_outer * n_idx
    tile = 32 * tuning.WEAVE_RU
    tiles = cdiv(rows, tile)
    mname = index_math(max(tiles * tile, n_idx, n_outer), math_name)
    bits = 32 if mname == "fast32" else 64
    lo, hi = data.extent()
    fields = dict(s_outer=s_outer, s_axis=s_axis, axis_len=base["bounds"][0], rows=rows,
                  row_bytes=row_bytes, out_bytes=rows * row_bytes, chunks=tiles, lo=lo, hi=hi,
                  n_div=make_divisor(max(n_idx, 1), bits), row_div=make_divisor(row_bytes, bits))
    warps = tuning.MAX_THREADS // 32
    grid = (min(cdiv(tiles, warps), grid_cap), 1, 1)
    main = Launch(KernelKey("weave", unit, index_dtype, mname, mode), fields, grid,
                  (tuning.MAX_THREADS, 1, 1), warps * tile * row_bytes)
    return GatherPlan(main=main, reason=f"rows of {row_bytes} B ({row_bytes // unit} units of "
                                        f"{unit} B) in tiles of {tile} rows a warp, woven in "
                                        f"shared memory into 16-byte chunks", **base)


def _index_bytes(index_dtype: str) -> int:
    """Bytes of one index of ``index_dtype`` (int32 or int64)."""
    return 4 if index_dtype == "int32" else 8


def _group_grid(n_outer: int, row: int, stage: int, bx: int, target: int,
                group_blocks: Callable[[int], int], max_grid: Optional[int]
                ) -> Tuple[int, Tuple[int, int, int]]:
    """(outer rows per group, grid) of the kernels that stage groups of outer
    rows of ``row`` bytes in ``stage`` bytes of shared memory (slabf, slabr).
    Whole groups where one outer row's ``bx`` blocks alone fill the ``target``
    blocks, smaller ones so that outer rows give the blocks its own cannot;
    blockIdx.y takes the groups, blockIdx.x at most ``group_blocks(group)``
    blocks of one, and at most ``target`` blocks in all: a grid just past it
    leaves a last wave of a few blocks, each as long as a full one."""
    fit = max(1, stage // max(row, 1))  # an empty axis in fill mode: no row
    group = min(n_outer, fit, max(1, cdiv(n_outer * bx, target)))
    grid_y = min(cdiv(n_outer, group), max_grid or GRID_YZ_MAX)
    grid_x = min(max(1, min(group_blocks(group), target // grid_y)), max_grid or GRID_X_MAX)
    return group, (grid_x, grid_y, 1)


def _slabr_pitch(row_bytes: int) -> int:
    """Bytes a staged row of the slabr kernel takes (kernels/gather.cuh slabr_pitch)."""
    return 4 if row_bytes <= 4 else 8 if row_bytes <= 8 else 16


def _slabr_stage(limits: DeviceLimits, row_bytes: int) -> int:
    """Shared memory a slabr block stages outer rows into: slab's, less what its
    warps' tiles of 32 x SLABR_RU rows (and 16 bytes each to start a tile
    mid-chunk) take beside it."""
    return min(_slab_stage(limits), limits.max_shared_mem - _slabr_tiles(row_bytes))


def _slabr_tiles(row_bytes: int) -> int:
    """Shared memory of a slabr block's warps' tiles."""
    return tuning.MAX_THREADS // 32 * (32 * tuning.SLABR_RU * row_bytes + 16)


def _plan_slabr(unit, row_bytes, n_outer, s_outer, s_axis, n_idx, index_dtype, mode, math_name,
                max_grid, base, limits) -> GatherPlan:
    # Groups of outer rows as slabf's (_group_grid), each axis row staged at a
    # pitch of _slabr_pitch bytes.  Tiles of 32 x SLABR_RU rows a warp, in one of
    # two orders (kernels/gather.cuh): 0 steps over the output's tiles that meet
    # the group's rows (row numbers reach one tile past the last row); 1 over
    # tiles of index positions, each written to every outer row of the group,
    # where a group has two outer rows or more, each SLABR_ORDER_PICKS picks or
    # more, and the outer rows start 16-byte aligned or the indices are large
    # (tuning.py).  At most SLABR_BLOCKS blocks per SM in all, the kernel's
    # residency.
    axis_len = base["bounds"][0]
    units = row_bytes // unit
    rows = n_outer * n_idx
    tile = 32 * tuning.SLABR_RU
    warps = tuning.MAX_THREADS // 32
    tiles = cdiv(rows, tile)
    mname = index_math(max((tiles + 1) * tile, n_idx, n_outer), math_name)
    bits = 32 if mname == "fast32" else 64
    pitch = _slabr_pitch(row_bytes)
    row = axis_len * pitch  # staged bytes of one outer row
    stage = _slabr_stage(limits, row_bytes)
    bx = cdiv(cdiv(n_idx, tile), warps)  # blocks for one outer row's tiles
    target = tuning.SLABR_BLOCKS * limits.sm_count

    def order_of(group: int) -> int:
        return int(group >= 2 and n_idx >= tuning.SLABR_ORDER_PICKS
                   and (n_idx * row_bytes % 16 == 0
                        or n_idx * _index_bytes(index_dtype) >= tuning.SLABR_ORDER_INDEX_BYTES))

    # a group's blocks: order 1's cover one outer row's tiles; order 0's the
    # group's rows, which meet one tile more than they fill
    group, grid = _group_grid(n_outer, row, stage, bx, target,
                              lambda g: bx if order_of(g) else cdiv(cdiv(g * n_idx, tile) + 1,
                                                                    warps), max_grid)
    order = order_of(group)
    fields = dict(s_outer=s_outer, s_axis=s_axis, axis_len=axis_len, total=rows * units,
                  chunks=tiles, n_div=make_divisor(max(n_idx, 1), bits),
                  unit_div=make_divisor(units, bits), group=group, stage_unit=order)
    shared = cdiv(group * row, 16) * 16 + _slabr_tiles(row_bytes)
    main = Launch(KernelKey("slabr", unit, index_dtype, mname, mode), fields, grid,
                  (tuning.MAX_THREADS, 1, 1), shared)
    how = ("each tile's picks written to every outer row of the group" if order else
           "tiles of the output")
    return GatherPlan(main=main, reason=f"{group} outer row(s) of {axis_len} rows of {row_bytes} B "
                                        f"staged per block at a {pitch}-byte pitch; {how}, "
                                        f"{tile} rows a warp, woven in shared memory into 16-byte "
                                        f"chunks", **base)


def _plan_flat(kind, unit, units, n_outer, s_outer, s_axis, n_idx, index_dtype, mode,
               math_name, grid_cap, base, limits) -> GatherPlan:
    # flat: chunks of `per` units of the output, 16 bytes (8 for 1-byte units,
    # kernels/gather.cuh flat_units); plan_gather checked _unmet: the output's
    # base is 16-byte aligned, so every full chunk is one aligned store.  lean:
    # one unit per thread (a chunk of one unit).
    per = _flat_per(unit) if kind in ("flat", "flatv") else 1
    mname, fields = _flat_fields(per, units, n_outer, s_outer, s_axis, base["bounds"][0], n_idx,
                                 math_name)
    chunks = fields["chunks"]
    threads = _spread(chunks, tuning.MAX_THREADS, limits)
    grid = (min(cdiv(chunks, threads), grid_cap), 1, 1)
    main = Launch(KernelKey(kind, unit, index_dtype, mname, mode), fields, grid, (threads, 1, 1))
    if kind == "lean":
        return GatherPlan(main=main, reason=f"{units} unit(s) of {unit} B per row, one unit per "
                                            f"thread", **base)
    return GatherPlan(main=main, reason=f"{units} unit(s) of {unit} B per row as {chunks} "
                                        f"{per * unit}-byte chunks of {per} units", **base)


def _flat_fields(per: int, units: int, n_outer: int, s_outer: int, s_axis: int, axis_len: int,
                 n_idx: int, math_name: Optional[str]) -> Tuple[str, dict]:
    """(index math, FlatArgs fields) of the flat kinds' chunks of ``per`` units."""
    total = n_outer * n_idx * units
    chunks = cdiv(total, per)
    # the chunk's first unit, chunks * per, is the largest numerator split
    mname = index_math(max(chunks * per, n_outer * n_idx, n_idx, n_outer), math_name)
    bits = 32 if mname == "fast32" else 64
    return mname, dict(s_outer=s_outer, s_axis=s_axis, axis_len=axis_len, total=total,
                       chunks=chunks, n_div=make_divisor(max(n_idx, 1), bits),
                       unit_div=make_divisor(units, bits))


def _plan_slabf(unit, units, n_outer, s_outer, s_axis, n_idx, index_dtype, mode, math_name,
                max_grid, base, limits, align) -> GatherPlan:
    # Groups of outer rows (_group_grid); blockIdx.x steps over the chunks of a group.
    per = _flat_per(unit)
    mname, fields = _flat_fields(per, units, n_outer, s_outer, s_axis, base["bounds"][0], n_idx,
                                 math_name)
    row = base["bounds"][0] * units * unit  # staged bytes of one outer row
    # rows of a chunk or more in 4- or 8-byte units, 32-bit index math: a thread
    # takes SLABF_TILE chunks (the kernel's tiles)
    tiles = tuning.SLABF_TILE and unit >= 4 and units >= per and mname == "fast32"
    per_thread = per * (tuning.SLABF_TILE if tiles else 1)
    per_sm = tuning.SLABF_TILE_BLOCKS_PER_SM if tiles else tuning.SLAB_BLOCKS_PER_SM
    group, grid = _group_grid(n_outer, row, _slab_stage(limits),
                              cdiv(cdiv(n_idx * units, per_thread), tuning.MAX_THREADS),
                              per_sm * limits.sm_count,
                              lambda g: cdiv(cdiv(g * n_idx * units, per_thread),
                                             tuning.MAX_THREADS),
                              max_grid)
    fields.update(group=group, stage_unit=unit_for(align, s_outer, row))
    main = Launch(KernelKey("slabf", unit, index_dtype, mname, mode), fields, grid,
                  (tuning.MAX_THREADS, 1, 1), cdiv(group * row, 16) * 16)
    return GatherPlan(main=main, reason=f"{group} outer row(s) of {row} B staged per block in "
                                        f"shared memory, {units} unit(s) of {unit} B per row "
                                        f"as {per * unit}-byte chunks", **base)


def _plan_bcast(kind, data, unit, row_bytes, n_outer, s_outer, n_idx, index_dtype, mode,
                out_align, math_name, grid_cap, base, limits) -> GatherPlan:
    # Rows contiguous, outer slices one stride apart (plan_gather).  bcast: flat's
    # chunks over the output, the unit at most 8 bytes, as flat's; bcastw:
    # window's 16-byte chunks, for rows of 16 bytes or more in narrow units.
    axis_len = base["bounds"][0]
    if axis_len != 1 or mode not in BCAST_MODES or out_align < 16:
        raise ValueError(f"kernel kind {kind or 'bcast'!r} needs an axis of length 1 in wrap or "
                         f"clip mode and a 16-byte aligned output; here the axis has length "
                         f"{axis_len}, mode {mode!r}, out aligned to {out_align} B")
    if kind is None:
        least = tuning.BCASTW_MIN_ROW.get(unit)
        wide = (least is not None and row_bytes >= max(least, 16)
                and n_outer * n_idx * row_bytes > tuning.BCASTW_MIN_OUT)
        kind = "bcastw" if wide else "bcast"
        base = dict(base, chosen_by="rule: an axis of length 1 in wrap or clip mode resolves "
                                    "every index to 0; its indices need not be read" +
                                    (f" (rows of {least} B or more in {unit}-byte units, more "
                                     f"than {tuning.BCASTW_MIN_OUT} B out: bcastw)"
                                     if wide else ""))
    if kind == "bcastw":
        if row_bytes < 16:
            raise ValueError(f"kernel kind 'bcastw' needs rows of 16 bytes or more; rows here "
                             f"are {row_bytes} B")
        main = _window_launch("bcastw", data, row_bytes, n_outer, s_outer, 0, 1, n_idx,
                              index_dtype, "wrap", math_name, grid_cap, limits)
        return GatherPlan(main=main, reason=f"the {row_bytes} B row of each of {n_outer} outer "
                                            f"slice(s) repeated {n_idx} times as "
                                            f"{main.fields['chunks']} 16-byte chunks, each "
                                            f"shifted from two aligned blocks; no index read",
                          **base)
    unit = min(unit, 8)
    units = row_bytes // unit
    per = _flat_per(unit)
    mname, fields = _flat_fields(per, units, n_outer, s_outer, 0, 1, n_idx, math_name)
    chunks = fields["chunks"]
    threads = _spread(chunks, tuning.MAX_THREADS, limits)
    grid = (min(cdiv(chunks, threads), grid_cap), 1, 1)
    main = Launch(KernelKey("bcast", unit, index_dtype, mname, "wrap"), fields, grid,
                  (threads, 1, 1))
    return GatherPlan(main=main, reason=f"the {row_bytes} B row of each of {n_outer} outer "
                                        f"slice(s) repeated {n_idx} times as {chunks} "
                                        f"{per * unit}-byte chunks; no index read", **base)


def _flat_per(unit: int) -> int:
    """Units per chunk of the flat kinds (kernels/gather.cuh flat_units)."""
    return 8 if unit == 1 else 16 // unit


def _plan_span(data, row_bytes, n_outer, s_outer, s_axis, n_idx, index_dtype, mode, math_name,
               max_grid, base) -> GatherPlan:
    # Items of 32 * SPAN_V aligned 16-byte output chunks of a row, one warp each:
    # a row has row_bytes // 16 whole chunks or one fewer.
    rows = n_outer * n_idx
    seg = 32 * tuning.SPAN_V
    segs = max(1, cdiv(row_bytes // 16, seg))
    items = rows * segs
    warps = tuning.SPAN_THREADS // 32
    mname = index_math(max(items, rows, n_idx, n_outer), math_name)
    bits = 32 if mname == "fast32" else 64
    lo, hi = data.extent()
    fields = dict(s_outer=s_outer, s_axis=s_axis, axis_len=base["bounds"][0], rows=rows,
                  row_bytes=row_bytes, lo=lo, hi=hi, n_div=make_divisor(max(n_idx, 1), bits),
                  seg_div=make_divisor(segs, bits), items=items)
    grid = (min(cdiv(items, warps), max_grid or GRID_X_MAX), 1, 1)
    # a segment's aligned source blocks (one more than its chunks) per warp
    shared = warps * (seg + 1) * 16
    main = Launch(KernelKey("span", 16, index_dtype, mname, mode), fields, grid,
                  (tuning.SPAN_THREADS, 1, 1), shared)
    return GatherPlan(main=main, reason=f"rows of {row_bytes} B as aligned 16-byte chunks "
                                        f"staged in shared memory; {segs} segment(s) of up to "
                                        f"{seg} chunks per row, one warp each", **base)
