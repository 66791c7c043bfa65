"""Peer reads: shards of other GPUs mapped into this one, gathered by one kernel.

:class:`PeerGather` is the operator: given the shard base addresses as seen
from one device (its own shard, peers' shards opened through CUDA IPC or
used directly in one process with peer access on) and the row offsets, a
call plans (:mod:`.plan`), binds the sharded kernel once per geometry and
launches it -- no host synchronisation outside raise mode, so it can be
captured in a CUDA graph (pass ``out=`` inside a capture).

The IPC helpers export a shard as (handle, offset): a CUDA IPC handle names
a whole allocation and CuPy's pool hands out pieces of larger ones, so the
offset of the shard inside its allocation travels with the handle.
"""

from __future__ import annotations

import ctypes
import threading

import numpy

from .. import validate
from ..plan.core import Plan
from ..runtime.binding import Bound, bind
from ..runtime.cache import PlanCache
from ..runtime.launch import CUDA, first_bad_position
from .plan import plan_sharded

__all__ = ["PeerGather", "export_shard", "open_shard", "close_shard", "enable_peer_access",
           "allocation_base"]

_libcuda = None


def allocation_base(ptr: int) -> tuple:
    """(base, size) of the device allocation holding ``ptr`` (cuMemGetAddressRange)."""
    global _libcuda
    if _libcuda is None:
        _libcuda = ctypes.CDLL("libcuda.so.1")
        _libcuda.cuMemGetAddressRange_v2.argtypes = [
            ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = _libcuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr)
    if rc != 0:
        raise RuntimeError(f"cuMemGetAddressRange failed for address {ptr:#x} (CUresult {rc})")
    return base.value, size.value


def export_shard(arr) -> tuple:
    """(64-byte IPC handle, byte offset of ``arr`` in its allocation) for another process."""
    from cupy.cuda import runtime

    with CUDA.activate(arr.data.device_id):  # the driver call needs the device's context current
        base, _ = allocation_base(arr.data.ptr)
        return bytes(runtime.ipcGetMemHandle(base)), arr.data.ptr - base


# Mappings of other processes' allocations, by (handle, device): CUDA refuses to
# open one handle twice in a context, and tables may share an allocation.
_mapped: dict = {}
_mapped_lock = threading.Lock()


def open_shard(handle: bytes, offset: int, device: int) -> tuple:
    """Map another process's shard on ``device``: (address of the shard, mapping key).

    Mappings are shared and counted; :func:`close_shard` with the key releases one.
    """
    from cupy.cuda import runtime

    key = (bytes(handle), int(device))
    with _mapped_lock:
        entry = _mapped.get(key)
        if entry is None:
            with CUDA.activate(device):
                base = runtime.ipcOpenMemHandle(key[0], runtime.cudaIpcMemLazyEnablePeerAccess)
            entry = _mapped[key] = [base, 0]
        entry[1] += 1
        return entry[0] + offset, key


def close_shard(key) -> None:
    """Release one use of a mapping made by :func:`open_shard` (unmapped at the last)."""
    from cupy.cuda import runtime

    with _mapped_lock:
        entry = _mapped.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del _mapped[key]
            with CUDA.activate(key[1]):
                runtime.ipcCloseMemHandle(entry[0])


_peer_enabled: set = set()  # (device, peer) pairs this process enabled


def enable_peer_access(device: int, peers) -> None:
    """Let kernels on ``device`` read the memory of every GPU in ``peers``.

    Each pair is enabled once per process: CUDA reports a second enable as an
    error (which compute-sanitizer counts even when it is caught).
    """
    from cupy.cuda import runtime

    with CUDA.activate(device):
        for p in peers:
            if p == device or (device, p) in _peer_enabled:
                continue
            if not runtime.deviceCanAccessPeer(device, p):
                raise RuntimeError(f"GPU {device} cannot access GPU {p}'s memory (no peer access)")
            try:
                runtime.deviceEnablePeerAccess(p)
            except runtime.CUDARuntimeError as e:  # enabled by another library
                if "AlreadyEnabled" not in str(e):
                    raise
            _peer_enabled.add((device, p))


class PeerGather:
    """Gather global rows of shards readable from ``device``.

    The sharded kernel's plans are cached per call geometry (LRU), bound by
    the runtime's :func:`~cugather.runtime.bind` and checked in raise mode by
    its read-back, on any backend (the host-execution test tier runs the same
    code on the CPU).

    Parameters
    ----------
    bases : sequence of int
        Address of row 0 of each shard, valid on ``device`` (0 for an empty shard).
    offsets : sequence of int
        ``len(bases) + 1`` row offsets; shard ``s`` holds rows ``offsets[s]:offsets[s+1]``.
    row_shape : tuple
        Shape of one row.
    dtype : numpy.dtype
    device : int
        The GPU that launches the kernel and holds the outputs.
    rank : int, optional
        Named in error messages.
    cache_size : int
        Most plans kept.
    backend : optional
        Where kernels run (default ``cugather.runtime.CUDA``).
    plan_options : dict, optional
        ``max_grid`` / ``row_unroll`` for every plan (tests of the grid loops).
    """

    def __init__(self, bases, offsets, row_shape, dtype, device: int, rank=None,
                 cache_size: int = 64, backend=None, plan_options=None):
        self.bases = [int(b) for b in bases]
        self.offsets = [int(o) for o in offsets]
        self.row_shape, self.dtype = tuple(row_shape), numpy.dtype(dtype)
        self.device, self.rank = int(device), rank
        self.total = self.offsets[-1]
        counts = numpy.diff(self.offsets)
        self._aligns = tuple(validate.alignment(b) for b, c in zip(self.bases, counts) if c)
        self._backend = backend or CUDA
        self._plans = PlanCache(cache_size)
        self._options = dict(plan_options or {})

    def plan(self, indices_shape, index_dtype: str, mode: str, out_align: int = 256,
             **force) -> Plan:
        """The plan of a call; launches nothing.  ``force``: max_grid, row_unroll (tests)."""
        return plan_sharded(self.row_shape, self.dtype.itemsize, self.offsets,
                            tuple(indices_shape), index_dtype, mode, bases=self.bases,
                            base_aligns=self._aligns, out_align=out_align,
                            limits=self._backend.limits(self.device), **force)

    def _bound(self, indices, out_align: int, mode: str, fill_value) -> Bound:
        key = (tuple(indices.shape), indices.dtype.name, out_align, mode,
               validate.fill_token(fill_value) if mode == "fill" else None)
        bound = self._plans.get(key)
        if bound is None:
            plan = self.plan(indices.shape, indices.dtype.name, mode, out_align, **self._options)
            fill = None
            if plan.main is not None and mode == "fill":
                fill = validate.fill_bytes(fill_value, self.dtype)
            bound = bind(plan, self.device, fill, self._backend)
            self._plans.put(key, bound)
        return bound

    def __call__(self, indices, *, mode: str = "raise", fill_value=0, out=None, stream=None):
        """``out = table[indices]``; ``mode`` is a kernel mode (``clip_numpy``: take's clip).

        ``indices`` must be a C-contiguous int32/int64 array on ``device``
        (the table validates and converts them).
        """
        backend = self._backend
        ptr = backend.pointer
        with backend.activate(self.device):
            out_align = 256 if out is None else validate.alignment(ptr(out))
            try:
                bound = self._bound(indices, out_align, mode, fill_value)
            except IndexError as e:  # nothing to take from: name the rank
                raise IndexError(f"{self._where()}{e}") from None
            if out is None:
                out = backend.empty(bound.out_shape, self.dtype)
            else:
                validate.check_out(out, bound.out_shape, self.dtype, self.device,
                                   {"indices": indices}, backend)
            sptr = backend.stream_pointer(stream)
            if bound.check is not None:
                pos = first_bad_position(bound, ptr(indices), sptr)
                if pos is not None:
                    err = bound.plan.index_error(pos, backend.index_value(indices, pos),
                                                 indices.shape)
                    raise IndexError(f"{self._where()}{err}")
            if bound.main is not None:  # ShardedArgs lead with the indices and out
                bound.main.launch((ptr(indices), ptr(out)), sptr)
        return out

    def cache_info(self):
        """Plan-cache statistics: hits, misses, maxsize, currsize."""
        return self._plans.info()

    def _where(self) -> str:
        return "" if self.rank is None else f"rank {self.rank}: "
