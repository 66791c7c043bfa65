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
from collections import OrderedDict

import numpy

from .. import validate as _arrays
from ..compile.compiler import load_kernel
from ..plan.gather import DeviceLimits, alignment_of
from ..runtime.launch import BoundKernel, _Device, fill_words, first_bad_position
from .plan import MAX_RANKS, plan_sharded

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

    with _Device(arr.data.device_id):  # the driver call needs the device's context current
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
            with _Device(device):
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
            with _Device(key[1]):
                runtime.ipcCloseMemHandle(entry[0])


def enable_peer_access(device: int, peers) -> None:
    """Let kernels on ``device`` read the memory of every GPU in ``peers``."""
    from cupy.cuda import runtime

    with _Device(device):
        for p in peers:
            if p == device:
                continue
            if not runtime.deviceCanAccessPeer(device, p):
                raise RuntimeError(f"GPU {device} cannot access GPU {p}'s memory (no peer access)")
            try:
                runtime.deviceEnablePeerAccess(p)
            except runtime.CUDARuntimeError as e:
                if "AlreadyEnabled" not in str(e):
                    raise


_limits: dict = {}


def _device_limits(device: int) -> DeviceLimits:
    lim = _limits.get(device)
    if lim is None:
        attrs = _arrays.cupy_module().cuda.Device(device).attributes
        lim = _limits[device] = DeviceLimits(sm_count=attrs["MultiProcessorCount"],
                                             max_shared_mem=attrs["MaxSharedMemoryPerBlock"])
    return lim


def _fill_key(mode: str, fill_value):
    if mode != "fill":
        return None
    try:
        hash(fill_value)
        return (type(fill_value), fill_value)
    except TypeError:
        return (type(fill_value), repr(fill_value))


class _Bound:
    __slots__ = ("plan", "main", "check")

    def __init__(self, plan, main, check):
        self.plan, self.main, self.check = plan, main, check


class PeerGather:
    """Gather global rows of shards readable from ``device``.

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
    """

    def __init__(self, bases, offsets, row_shape, dtype, device: int, rank=None,
                 cache_size: int = 64):
        self.bases = [int(b) for b in bases]
        self.offsets = [int(o) for o in offsets]
        self.row_shape, self.dtype = tuple(row_shape), numpy.dtype(dtype)
        self.device, self.rank = int(device), rank
        self.total = self.offsets[-1]
        counts = numpy.diff(self.offsets)
        self._aligns = tuple(alignment_of(b) for b, c in zip(self.bases, counts) if c)
        self._cache: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._maxsize = cache_size

    def plan(self, indices_shape, index_dtype: str, mode: str, out_align: int = 256, **force):
        """The :class:`~cugather.distributed.plan.ShardedPlan` of a call; launches nothing."""
        return plan_sharded(self.row_shape, self.dtype.itemsize, self.offsets,
                            tuple(indices_shape), index_dtype, mode, base_aligns=self._aligns,
                            out_align=out_align, limits=_device_limits(self.device), **force)

    def _bind(self, key, fill_value) -> _Bound:
        shape, index_dtype, out_align, mode = key[:4]
        plan = self.plan(shape, index_dtype, mode, out_align)
        main = check = None
        if plan.key is not None:
            fields = dict(plan.fields, bases=self.bases + [0] * (MAX_RANKS - len(self.bases)))
            if mode == "fill":
                fields["fill"] = fill_words(_arrays.fill_bytes(fill_value, self.dtype))
            fn = load_kernel(plan.key, self.device).function
            main = BoundKernel(fn, "ShardedArgs", fields, plan.grid, plan.block)
        if plan.check_key is not None:
            fn = load_kernel(plan.check_key, self.device).function
            grid = (max(1, min(-(-plan.n_indices // 256), 4096)), 1, 1)
            check = BoundKernel(fn, "CheckArgs", dict(n=plan.n_indices, axis_len=self.total),
                                grid, (256, 1, 1))
        return _Bound(plan, main, check)

    def __call__(self, indices, *, mode: str = "raise", fill_value=0, out=None, stream=None):
        """``out = table[indices]``; ``mode`` is a kernel mode (``clip_numpy``: take's clip).

        ``indices`` must be a C-contiguous int32/int64 CuPy array on ``device``
        (the table validates and converts them).
        """
        cp = _arrays.cupy_module()
        with _Device(self.device):
            out_shape = tuple(indices.shape) + self.row_shape
            n = int(indices.size)
            if (n and not self.total and mode != "fill"
                    and numpy.prod(out_shape, dtype=numpy.int64)):
                raise IndexError(f"cannot take {n} indices from axis 0 of size 0 "
                                 f"({self._where()}mode={mode!r})")
            if out is None:
                out = cp.ndarray(out_shape, self.dtype)
            else:
                _arrays.check_out(out, out_shape, self.dtype, self.device, {"indices": indices})
            key = (indices.shape, indices.dtype.name, alignment_of(out.data.ptr), mode,
                   _fill_key(mode, fill_value))
            bound = self._cache.get(key)
            if bound is None:
                bound = self._bind(key, fill_value)
                with self._lock:
                    self._cache[key] = bound
                    while len(self._cache) > self._maxsize:
                        self._cache.popitem(last=False)
            sptr = _arrays.stream_pointer(stream)
            if bound.check is not None:
                pos = first_bad_position(bound.check, indices.data.ptr, sptr)
                if pos is not None:
                    raise self._index_error(indices, pos)
            if bound.main is not None:
                bound.main.launch((indices.data.ptr, out.data.ptr), sptr)
        return out

    def _where(self) -> str:
        return "" if self.rank is None else f"rank {self.rank}, "

    def _index_error(self, indices, pos: int) -> IndexError:
        value = int(indices.reshape(-1)[pos].get())
        where = tuple(int(i) for i in numpy.unravel_index(pos, indices.shape))
        n = self.total
        return IndexError(f"index {value} is out of bounds for axis 0 with size {n} "
                          f"({self._where()}at indices{list(where)}; valid range [{-n}, {n - 1}])")
