"""The sharded gather kernel (kernels/sharded.cuh): its kind and its plans.
Pure Python, no GPU.

A sharded gather reads global rows of a table whose shards live in several
allocations (other GPUs' memory through peer access, or segments of local
buffers).  Its plan depends on the row geometry, the shard layout (row
offsets, base alignments), the number and dtype of the indices and the
mode; the shard base addresses are fields of the argument block too, filled
in by the caller once per table (they never change between calls).

Importing this module registers the ``sharded`` kind (its spec, argument
struct and constants) with :func:`cugather.plan.keys.register_kind`; the
core's kernels neither see nor depend on it.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy

from ..plan import core, tuning
from ..plan.core import (GRID_X_MAX, GRID_YZ_MAX, DeviceLimits, Launch, Plan, cdiv,
                         check_launch, no_empty_axis, unit_for)
from ..plan.keys import KernelKey, KindSpec, register_kind
from ..plan.layout import FILL, POINTERS

__all__ = ["plan_sharded", "row_offsets", "MAX_RANKS", "SHARDED_RU", "SHARDED_ARGS"]

#: Most shards one argument block describes (the block stays near 1 KB of the
#: 4 KB of kernel parameters).
MAX_RANKS = 64
#: Rows per thread at most.
SHARDED_RU = 4

#: ``ShardedArgs`` of kernels/sharded.cuh.
SHARDED_ARGS = numpy.dtype(POINTERS + [
    ("n", "<u8"), ("units", "<u8"), ("total", "<i8"),
    ("n_shards", "<u4"), ("row_unroll", "<u4"),
    FILL,
    ("offsets", "<i8", (MAX_RANKS + 1,)),
    ("bases", "<u8", (MAX_RANKS,)),
], align=True)

# Rows of a table sharded over several allocations; it divides nothing, so one
# index math.  ``data`` is unused: the shard bases are fields.
register_kind(
    "sharded",
    KindSpec("sharded.cuh", "gather_sharded", "ShardedArgs", maths=("fast64",), min_blocks=4,
             takes_math=False,
             defines=(("CG_MAX_RANKS", MAX_RANKS), ("CG_SHARDED_RU", SHARDED_RU))),
    SHARDED_ARGS, ("data", "indices", "out", "first_bad"))


def row_offsets(counts) -> list:
    """First global row of each shard, plus the total: ``[0, c0, c0 + c1, ...]``.

    Raises ValueError for a negative count.
    """
    offsets = [0]
    for rank, c in enumerate(counts):
        c = int(c)
        if c < 0:
            raise ValueError(f"shard {rank} has a negative row count {c}")
        offsets.append(offsets[-1] + c)
    return offsets


def plan_sharded(row_shape: tuple, itemsize: int, offsets, indices_shape: tuple,
                 index_dtype: str, mode: str, *, bases=(), base_aligns=(), out_align: int = 256,
                 limits: DeviceLimits = DeviceLimits(), max_grid: Optional[int] = None,
                 row_unroll: Optional[int] = None) -> Plan:
    """Plan ``out = table[indices]`` over shards with the given row ``offsets``.

    Parameters
    ----------
    row_shape, itemsize : tuple, int
        Shape of one row (``table.shape[1:]``) and the element size in bytes.
    offsets : sequence of int
        ``row_offsets(rows per shard)``: ``n_shards + 1`` non-decreasing values.
    indices_shape, index_dtype : tuple, {"int32", "int64"}
    mode : {"raise", "wrap", "clip", "clip_numpy", "fill"}
        Kernel mode; raise mode adds the bounds check (``axis_len = total``).
    bases : sequence of int
        Address of each shard's row 0 on the launching device (0 for an empty
        shard): argument-block fields like the others, fixed per table.
    base_aligns : sequence of int
        Largest power of two (at most 256) dividing each non-empty shard's base
        address; the unit divides all of them, the row bytes and ``out_align``.
    max_grid, row_unroll : int, optional
        Force a smaller grid or fewer rows per thread (tests).
    """
    offsets = [int(o) for o in offsets]
    n_shards = len(offsets) - 1
    if not 1 <= n_shards <= MAX_RANKS:
        raise ValueError(f"a sharded gather takes 1 to {MAX_RANKS} shards, got {n_shards}")
    if offsets[0] != 0 or any(b < a for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"offsets must start at 0 and never decrease, got {offsets[:8]}...")
    total = offsets[-1]
    n_idx = math.prod(indices_shape)
    out_shape = tuple(indices_shape) + tuple(row_shape)
    row_bytes = math.prod(row_shape) * itemsize
    no_empty_axis(mode, (total,), (0,), n_idx, n_idx * row_bytes)
    check = check_launch(index_dtype, n_idx, (total,)) if mode == "raise" and n_idx else None
    base = dict(op="sharded", out_shape=out_shape, n_indices=n_idx, bound_axes=(0,),
                bounds=(total,), check=check)
    if n_idx == 0 or row_bytes == 0:
        return Plan(**base)
    unit = unit_for(row_bytes, out_align, *base_aligns)
    units = row_bytes // unit
    cu = 16 // unit if unit >= 8 else 1
    tx = min(cdiv(units, cu), tuning.MAX_THREADS)
    ty = max(1, tuning.MAX_THREADS // tx)
    chunks = cdiv(units, tx * cu)
    ru = row_unroll or core.row_unroll(n_idx, ty, chunks, limits, SHARDED_RU)
    grid = (min(cdiv(n_idx, ty * ru), max_grid or GRID_X_MAX),
            min(chunks, max_grid or GRID_YZ_MAX), 1)
    bases = [int(b) for b in bases]
    fields = dict(n=n_idx, units=units, total=total, n_shards=n_shards, row_unroll=ru,
                  offsets=offsets + [total] * (MAX_RANKS + 1 - len(offsets)),
                  bases=bases + [0] * (MAX_RANKS - len(bases)))
    main = Launch(KernelKey("sharded", unit, index_dtype, "fast64", mode), fields, grid,
                  (tx, ty, 1))
    return Plan(main=main, reason=f"{units} units of {unit} B per row over {n_shards} shards; "
                                  f"block {tx}x{ty}, {ru} row(s) x {cu} unit(s) per thread, "
                                  f"{chunks} chunk(s) per row", **base)
