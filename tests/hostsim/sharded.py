"""Host execution of the sharded kernel (kernels/sharded.cuh) over NumPy "shards".

A :class:`ShardedCase` builds the shards (each its own allocation, or all
packed in one buffer with poisoned gaps between them), runs the library's
own ``cugather.distributed.peer.PeerGather`` on the host backend (plan,
bind, raise-mode check, gather), and compares the result byte for byte
with NumPy over the concatenated table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from cugather.distributed.peer import PeerGather
from support.reference import assert_same, gather_ref, random_data

from . import runner

__all__ = ["ShardedCase"]

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
        """PeerGather on the host backend; the output array."""
        bases = [s.ctypes.data if s.size else 0 for s in shards]
        force = {k: v for k, v in (("max_grid", self.max_grid), ("row_unroll", self.row_unroll))
                 if v is not None}
        op = PeerGather(bases, offsets, self.row_shape, full.dtype, runner.HOST_DEVICE,
                        backend=runner.HOST, plan_options=force)
        result = runner.run_on_host(
            lambda: op(idx, mode=self.mode, fill_value=self.fill_value), [idx],
            extra_inputs=ranges)  # each shard, or the buffer holding them all
        if self.expect_key is not None and idx.size:
            ran = [k.entry for k, *_ in runner.last_launches() if k.kind == "sharded"]
            assert ran in ([self.expect_key], []), (ran, self.expect_key)
        return result

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
