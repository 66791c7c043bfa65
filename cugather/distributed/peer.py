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

from ..plan.core import DeviceLimits, Plan, alignment
from ..runtime.key import Geometry, fill_token, geometry_of_key, out_bits
from ..runtime.launch import CUDA, execute
from ..runtime.op import OpRuntime
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

    The sharded kernel runs on the op runtime every operator uses: plans
    cached per call key (a memo of the last, then an LRU), bound once, raise
    mode checked by the kernel itself, on any backend (the host-execution
    test tier runs the same code on the CPU).

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
        Most plans kept (a positive int).
    backend : optional
        Where kernels run (default ``cugather.runtime.CUDA``).
    plan_options : dict, optional
        ``max_grid`` / ``row_unroll`` for every plan (tests of the grid loops).
    """

    def __init__(self, bases, offsets, row_shape, dtype, device: int, rank=None,
                 cache_size: int = 64, backend=None, plan_options=None):
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size must be a positive int, got {cache_size!r}")
        self.bases = [int(b) for b in bases]
        self.offsets = [int(o) for o in offsets]
        self.row_shape, self.dtype = tuple(row_shape), numpy.dtype(dtype)
        self.device, self.rank = int(device), rank
        self.total = self.offsets[-1]
        counts = numpy.diff(self.offsets)
        self._aligns = tuple(alignment(b) for b, c in zip(self.bases, counts) if c)
        self._backend = backend or CUDA
        self._options = dict(plan_options or {})
        self._runtime = OpRuntime(self._plan_geometry, self._geometry, cache_size)

    def plan(self, indices_shape, index_dtype: str, mode: str, out_align: int = 256,
             **force) -> Plan:
        """The plan of a call; launches nothing.  ``force``: max_grid, row_unroll (tests)."""
        return plan_sharded(self.row_shape, self.dtype.itemsize, self.offsets,
                            tuple(indices_shape), index_dtype, mode, bases=self.bases,
                            base_aligns=self._aligns, out_align=out_align,
                            limits=self._backend.limits(self.device), **force)

    @staticmethod
    def _geometry(key: tuple) -> Geometry:
        mode, fill = key[10:]
        return geometry_of_key("sharded", key, 0, mode, fill)

    def _plan_geometry(self, geo: Geometry, limits: DeviceLimits) -> Plan:
        return self.plan(geo.indices_shape, geo.index_dtype.name, geo.mode, geo.out_align,
                         **self._options)

    def __call__(self, indices, *, mode: str = "raise", fill_value=0, out=None, stream=None):
        """``out = table[indices]``; ``mode`` is a kernel mode (``clip_numpy``: take's clip).

        ``indices`` must be a C-contiguous int32/int64 array on ``device``
        (the table validates and converts them).
        """
        backend = self._backend
        # The rows come from the shard bases (plan fields): the key's data part is empty.
        key = (backend, self.device, (), (), self.dtype, 0, indices.shape, indices.strides,
               indices.dtype, out_bits(out, backend), mode,
               fill_token(fill_value) if mode == "fill" else None)
        try:
            bound = self._runtime.bound(key, fill_value)
            return execute(bound, None, 0, indices, out, stream, self.device)
        except IndexError as e:  # a bad index, or nothing to take from: name the rank
            raise IndexError(f"{self._where()}{e}") from None

    def cache_info(self):
        """Plan-cache statistics: hits, misses, maxsize, currsize."""
        return self._runtime.info()

    def _where(self) -> str:
        return "" if self.rank is None else f"rank {self.rank}: "
