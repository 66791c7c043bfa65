"""Plans of the sharded gather kernel (kernels/sharded.cuh).  Pure Python, no GPU.

A sharded gather reads global rows of a table whose shards live in several
allocations (other GPUs' memory through peer access, or segments of local
buffers).  Its plan depends on the row geometry, the shard layout (row
offsets, base alignments), the number and dtype of the indices and the
mode; the shard base addresses are fields of the argument block too, filled
in by the caller once per table (they never change between calls).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from ..plan.gather import GRID_X_MAX, GRID_YZ_MAX, MAX_THREADS, DeviceLimits, unit_for
from ..plan.keys import KernelKey
from ..plan.layout import MAX_RANKS

__all__ = ["ShardedPlan", "plan_sharded", "row_offsets", "MAX_RANKS", "ROW_UNROLL"]

#: Rows per thread at most (CG_SHARDED_RU).
ROW_UNROLL = 4


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


@dataclass(frozen=True)
class ShardedPlan:
    """One sharded-gather launch, minus the index and output pointers."""

    key: Optional[KernelKey]        # None when the output is empty
    check_key: Optional[KernelKey]  # raise mode: the bounds check of gather.cuh, first
    out_shape: tuple
    total: int
    n_indices: int
    grid: tuple = (0, 0, 0)
    block: tuple = (0, 0, 0)
    fields: dict = field(default_factory=dict)
    reason: str = ""

    def describe(self) -> str:
        if self.key is None:
            return f"empty output {self.out_shape}: nothing to launch"
        lines = [f"kernel      {self.key.entry}",
                 f"variant     sharded ({self.reason})",
                 f"output      {self.out_shape}  ({self.n_indices} indices of {self.total} rows,"
                 f" {self.fields['n_shards']} shards)",
                 f"grid        {self.grid}  block {self.block}"]
        if self.check_key is not None:
            lines.append(f"check       {self.check_key.entry} (before the gather)")
        return "\n".join(lines)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def plan_sharded(row_shape: tuple, itemsize: int, offsets, indices_shape: tuple,
                 index_dtype: str, mode: str, *, base_aligns=(), out_align: int = 256,
                 limits: DeviceLimits = DeviceLimits(), max_grid: Optional[int] = None,
                 row_unroll: Optional[int] = None) -> ShardedPlan:
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
    base_aligns : sequence of int
        Largest power of two (at most 256) dividing each shard's base address;
        the unit divides all of them, the row bytes and ``out_align``.
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
    check = (KernelKey("check", 0, index_dtype, "fast64", "raise")
             if mode == "raise" and n_idx else None)
    if n_idx == 0 or row_bytes == 0:
        return ShardedPlan(None, check, out_shape, total, n_idx)
    unit = unit_for(row_bytes, out_align, *base_aligns)
    units = row_bytes // unit
    cu = 16 // unit if unit >= 8 else 1
    tx = min(_cdiv(units, cu), MAX_THREADS)
    ty = max(1, MAX_THREADS // tx)
    chunks = _cdiv(units, tx * cu)
    ru = row_unroll or _row_unroll(n_idx, ty, chunks, limits)
    grid = (min(_cdiv(n_idx, ty * ru), max_grid or GRID_X_MAX),
            min(chunks, max_grid or GRID_YZ_MAX), 1)
    padded = offsets + [total] * (MAX_RANKS + 1 - len(offsets))
    fields = dict(n=n_idx, units=units, total=total, n_shards=n_shards, row_unroll=ru,
                  offsets=padded)
    reason = (f"{units} units of {unit} B per row; block {tx}x{ty}, {ru} row(s) x {cu} "
              f"unit(s) per thread, {chunks} chunk(s) per row")
    return ShardedPlan(KernelKey("sharded", unit, index_dtype, "fast64", mode), check,
                       out_shape, total, n_idx, grid, (tx, ty, 1), fields, reason)


def _row_unroll(rows: int, rows_per_block_row: int, chunks: int, limits: DeviceLimits) -> int:
    """As the rows kernel: 4 rows per thread unless that leaves under ~2 waves of blocks."""
    for ru in (ROW_UNROLL, 2):
        if _cdiv(rows, rows_per_block_row * ru) * chunks >= 2 * 4 * limits.sm_count:
            return ru
    return 1
