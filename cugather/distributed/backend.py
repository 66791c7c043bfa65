"""The GPU side of the NCCL transport: CuPy arrays, cugather kernels, two streams.

:func:`cugather.distributed.exchange.exchange_gather` is written against a
backend; this one runs its gathers with cugather's own kernels on the
caller's stream ("work") and its NCCL groups on a side stream ("comm"), so
that one round's transfer overlaps the next round's gathers.  Events order
the two; with one round both are the caller's stream.
"""

from __future__ import annotations

from typing import Any

from .. import gather as _gather
from .peer import PeerGather

__all__ = ["CupyBackend"]


class CupyBackend:
    """Arrays and kernels of one rank's GPU for :func:`exchange_gather`."""

    def __init__(self, device: int, comm_stream=None):
        import cupy

        self.xp = cupy
        self.device = device
        self._work = cupy.cuda.get_current_stream()
        self._comm = comm_stream if comm_stream is not None else self._work
        self._two: dict[tuple[Any, Any], Any] = {}  # (first, second) -> PeerGather: a call's rounds share one

    def take(self, table, idx, *, mode="wrap", fill_value=0, out=None):
        """``table[idx]`` along axis 0 with a cugather kernel, on the work stream."""
        return _gather(table, idx, 0, mode=mode, fill_value=fill_value, out=out)

    def argsort(self, keys):
        return self.xp.argsort(keys)  # CuPy's sort is stable (and takes no other kind)

    def take2(self, first, second, idx, *, mode="wrap", fill_value=0, out=None):
        """Rows of ``[first | second]`` without concatenating them: the sharded kernel."""
        n1, n2 = int(first.shape[0]), int(second.shape[0])
        key = (first.data.ptr, n1, second.data.ptr, n2)
        op = self._two.get(key)
        if op is None:
            op = self._two[key] = PeerGather(
                [first.data.ptr if n1 else 0, second.data.ptr if n2 else 0], [0, n1, n1 + n2],
                first.shape[1:], first.dtype, self.device, cache_size=4)
        return op(idx, mode=mode, fill_value=fill_value, out=out)

    def as_bytes(self, arr):
        import cupy

        return arr.reshape(-1).view(cupy.uint8)

    def stream(self, name):
        return self._comm if name == "comm" else self._work

    def record(self, name):
        if self._comm is self._work:
            return None
        return self.stream(name).record()

    def wait(self, name, event) -> None:
        if event is not None:
            self.stream(name).wait_event(event)
