"""Host execution of the sharded kernel (kernels/sharded.cuh) over NumPy "shards".

A :class:`ShardedCase` builds the shards (each its own allocation, or all
packed in one buffer with poisoned gaps between them), plans the call with
the library's own planner (``cugather.distributed.plan.plan_sharded``),
runs the raise-mode bounds check and the gather exactly as
``cugather.distributed.peer.PeerGather`` does, and compares the result
byte for byte with NumPy over the concatenated table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from cugather.distributed.plan import plan_sharded
from cugather.plan.gather import alignment_of
from cugather.plan.layout import MAX_RANKS, POINTER_FIELDS, new_args
from cugather.runtime.launch import fill_words, pack_fields
from cugather.validate import fill_bytes
from reference import assert_same, gather_ref, random_data

from . import runner

__all__ = ["ShardedCase"]

NO_BAD = (1 << 64) - 1
POISON = 0xA5
GAP = 64  # poisoned bytes between packed shards


@dataclass(frozen=True)
class ShardedCase:
    """One sharded gather; ``check()`` runs it on the host and compares with NumPy."""

    sizes: tuple                   # rows per shard (zeros allowed)
    row_shape: tuple
    dtype: str
    index_shape: tuple
    index_dtype: str = "int64"
    mode: str = "wrap"             # kernel mode; "clip_numpy" is numpy.take's clip
    fill_value: object = 0
    out_of_range: bool = False
    misalign: int = 0              # bytes added to every shard's base address
    packed: bool = False           # shards in one buffer with poisoned gaps (any count)
    max_grid: Optional[int] = None
    row_unroll: Optional[int] = None
    seed: int = 0
    bad_at: tuple = ()             # positions given an out-of-range index
    expect_key: Optional[str] = field(default=None, compare=False)

    def _shards(self, rng):
        dtype = np.dtype(self.dtype)
        row_bytes = math.prod(self.row_shape) * dtype.itemsize
        full = random_data(rng, (sum(self.sizes),) + tuple(self.row_shape), dtype)
        offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int).tolist()
        if self.packed:
            starts, pos = [], GAP + self.misalign
            for n in self.sizes:
                starts.append(pos)
                pos += -(-(n * row_bytes + GAP) // 256) * 256 + self.misalign
            backing = runner.device_empty((pos + GAP,), np.uint8)
            backing[...] = POISON
            ranges = [runner.extent(backing)]
        else:
            backing, starts, ranges = None, None, []
        shards = []
        for q, n in enumerate(self.sizes):
            part = full[offsets[q]:offsets[q + 1]]
            if self.packed:
                raw = backing[starts[q]:starts[q] + n * row_bytes]
            else:
                raw = runner.device_empty((n * row_bytes + self.misalign,), np.uint8)
                raw = raw[self.misalign:]
            shard = raw.view(dtype).reshape(part.shape) if n else part
            shard[...] = part
            shards.append(shard)
            if n and not self.packed:
                ranges.append(runner.extent(shard))
        return full, offsets, shards, ranges

    def _indices(self, rng, total):
        lo, hi = ((-3 * total - 2, 3 * total + 2) if self.out_of_range
                  else (-total, total) if total else (-3, 3))
        idx = rng.integers(lo, hi, size=self.index_shape).astype(self.index_dtype)
        flat = idx.reshape(-1)
        for j, pos in enumerate(self.bad_at):
            flat[pos] = total + pos if j % 2 else -total - 1 - pos
        return runner.device_copy(idx)

    def expected(self, full, idx):
        if self.mode == "clip_numpy":
            return np.take(full, idx.astype(np.int64), axis=0, mode="clip")
        return gather_ref(full, idx, 0, self.mode, self.fill_value)

    def run(self, full, offsets, shards, ranges, idx):
        """What PeerGather does: plan, raise-mode check, gather; the output array."""
        runner._state.launches = []  # as run_op: last_launches() reports this call
        aligns = [alignment_of(s.ctypes.data) for s in shards if s.size]
        plan = plan_sharded(tuple(self.row_shape), full.itemsize, offsets, idx.shape,
                            self.index_dtype, self.mode, base_aligns=aligns,
                            max_grid=self.max_grid, row_unroll=self.row_unroll)
        if self.expect_key is not None and plan.key is not None:
            assert plan.key.entry == self.expect_key, (plan.key.entry, self.expect_key)
        total = offsets[-1]
        if (idx.size and not total and self.mode != "fill"
                and math.prod(plan.out_shape)):  # as PeerGather: nothing to take from
            raise IndexError(f"cannot take {idx.size} indices from axis 0 of size 0")
        if plan.check_key is not None:
            flag = np.full(1, NO_BAD, np.uint64)
            args = new_args("CheckArgs", n=plan.n_indices, axis_len=total)
            args["indices"], args["first_bad"] = idx.ctypes.data, flag.ctypes.data
            grid = min(max(1, -(-plan.n_indices // 256)), self.max_grid or 4096)
            runner.launch(plan.check_key, args, (grid, 1, 1), (256, 1, 1),
                          readable=[runner.extent(idx)], writable=[runner.extent(flag)])
            if int(flag[0]) != NO_BAD:
                raise IndexError(f"index {int(idx.reshape(-1)[int(flag[0])])} is out of bounds "
                                 f"at flat position {int(flag[0])}")
        out, whole = runner._output(plan.out_shape, full.dtype)
        if plan.key is not None:
            fields = dict(plan.fields)
            fields["bases"] = ([s.ctypes.data if s.size else 0 for s in shards]
                               + [0] * (MAX_RANKS - len(shards)))
            if self.mode == "fill":
                fields["fill"] = fill_words(fill_bytes(self.fill_value, full.dtype))
            args = new_args("ShardedArgs", **pack_fields(fields))
            for name, ptr in zip(POINTER_FIELDS["ShardedArgs"], (idx.ctypes.data, out.ctypes.data)):
                args[name] = ptr
            runner.launch(plan.key, args, plan.grid, plan.block,
                          readable=[runner.extent(idx)] + ranges, writable=[runner.extent(out)])
            runner._check_canaries(whole, plan.key)
        return out.copy()

    def check(self) -> None:
        rng = np.random.default_rng(self.seed)
        full, offsets, shards, ranges = self._shards(rng)
        idx = self._indices(rng, offsets[-1])
        try:
            want = self.expected(full, idx)
        except IndexError:
            want = IndexError
        if want is IndexError:
            try:
                self.run(full, offsets, shards, ranges, idx)
            except IndexError:
                return
            raise AssertionError(f"{self}: expected IndexError")
        got = self.run(full, offsets, shards, ranges, idx)
        assert_same(got, want, repr(self))
