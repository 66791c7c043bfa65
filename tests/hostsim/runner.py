"""Run cugather's kernels on the host, the way the library launches them on a GPU.

Two levels:

* :func:`launch` runs one kernel key over a grid with an argument block packed
  exactly as the library packs it (a size-1 NumPy structured array of
  ``cugather.plan.layout.ARGS_DTYPES[...]``, pointers set to host addresses).
* :func:`host_gather` / :func:`host_take` mirror ``GatherOp.__call__`` (plan,
  bind, raise-mode check, gather) with NumPy arrays in place of CuPy ones and
  return the result as a NumPy array.

Every launch validates the launch configuration against CUDA's limits, checks
that loads stay inside the inputs, reports undefined behaviour found by UBSan,
and records the key in :func:`executed_keys`.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import threading
from typing import Optional

import numpy

from cugather import GatherOp, validate
from cugather.ops import elements as elements_op
from cugather.ops import gather as gather_op
from cugather.ops import nd as nd_op
from cugather.plan.core import DeviceLimits
from cugather.plan.keys import KernelKey
from cugather.plan.layout import ARGS_DTYPES
from cugather.runtime.key import call_key, geometry_of_key, out_bits
from cugather.runtime.launch import NO_BAD, Flags, run_plan

from . import build

__all__ = ["HostLaunchError", "HostBackend", "HOST", "HOST_DEVICE", "run_on_host", "launch",
           "launch_entry", "host_gather",
           "host_take", "host_elements", "host_nd", "executed_keys", "device_empty",
           "device_copy", "extent", "last_launches"]

MAX_SHARED = 48 * 1024          # per block without opting in
GUARD = 256                     # canary bytes on both sides of every output
POISON = 0xA5

_executed: set = set()
_launches: list = []            # (key, grid, block, shared_mem) of the last run_op
_state = threading.local()
_lock = threading.Lock()


class HostLaunchError(RuntimeError):
    """A kernel misbehaved on the host: bad access, UB, bad barrier or launch config."""


def executed_keys() -> set:
    """Kernel keys launched successfully in this process."""
    with _lock:
        return set(_executed)


def last_launches() -> list:
    """(key, grid, block, shared_mem) of each launch of this thread's last run_op."""
    return list(getattr(_state, "launches", []))


# ---------------------------------------------------------------- memory
def device_empty(shape, dtype, align: int = 256) -> numpy.ndarray:
    """An uninitialised C-contiguous array whose address is ``align``-aligned, as cupy.empty."""
    dtype = numpy.dtype(dtype)
    nbytes = max(1, math.prod(shape) * dtype.itemsize)
    raw = numpy.empty(nbytes + align, numpy.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)


def device_copy(arr) -> numpy.ndarray:
    """A C-contiguous, 256-byte aligned copy of ``arr`` (like ``cupy.asarray``)."""
    arr = numpy.asarray(arr)
    out = device_empty(arr.shape, arr.dtype)
    out[...] = arr
    return out


def extent(arr: numpy.ndarray) -> tuple:
    """[low, high) byte addresses ``arr`` touches; (p, p) when empty."""
    return validate.extent(arr, lambda a: a.ctypes.data)


# ---------------------------------------------------------------- launch
_GRID_MAX = ((1 << 31) - 1, 65535, 65535)
_BLOCK_MAX = (1024, 1024, 64)


def _check_config(entry: str, grid, block, shared_mem) -> None:
    where = f"{entry}: grid {tuple(grid)} block {tuple(block)} shared {shared_mem} B"
    if len(grid) != 3 or len(block) != 3:
        raise HostLaunchError(f"{where}: grid and block need three dimensions")
    for g, top in zip(grid, _GRID_MAX):
        if not 1 <= g <= top:
            raise HostLaunchError(f"{where}: grid dimensions must be in [1, {_GRID_MAX}]")
    for b, top in zip(block, _BLOCK_MAX):
        if not 1 <= b <= top:
            raise HostLaunchError(f"{where}: block dimensions must be in [1, {_BLOCK_MAX}]")
    if math.prod(block) > 1024:
        raise HostLaunchError(f"{where}: more than 1024 threads per block")
    if not 0 <= shared_mem <= MAX_SHARED:
        raise HostLaunchError(f"{where}: dynamic shared memory must be in [0, {MAX_SHARED}] B")


def _ubsan_offset() -> int:
    try:
        return build.ubsan_log().stat().st_size
    except FileNotFoundError:
        return 0


def launch_entry(library: build.Library, entry: str, args, grid, block, shared_mem: int = 0, *,
                 readable=(), writable=()) -> None:
    """Run ``entry`` of a loaded host library; ``args`` is its argument block (any buffer).

    The lowest level: :func:`launch` adds the key's layout check and records
    the key.  See :func:`launch` for the parameters and errors.
    """
    grid = tuple(int(g) for g in grid)
    block = tuple(int(b) for b in block)
    shared_mem = int(shared_mem)
    _check_config(entry, grid, block, shared_mem)
    buf = numpy.ascontiguousarray(args).view(numpy.uint8)
    readable, writable = list(readable), list(writable)
    flat = [int(v) for r in readable + writable for v in r]
    ranges = (ctypes.c_ulonglong * max(1, len(flat)))(*flat)
    err = ctypes.create_string_buffer(4096)
    before = _ubsan_offset()
    rc = library.launchers[entry](buf.ctypes.data, buf.nbytes, (ctypes.c_uint * 3)(*grid),
                                  (ctypes.c_uint * 3)(*block), shared_mem, ranges,
                                  len(readable), len(writable), err, len(err))
    where = f"{entry} grid {grid} block {block} shared {shared_mem} B"
    if rc != 0:
        raise HostLaunchError(f"{where}: {err.value.decode(errors='replace')}")
    if build.ubsan_enabled() and _ubsan_offset() > before:
        with open(build.ubsan_log(), "rb") as f:
            f.seek(before)
            report = f.read(4000).decode(errors="replace")
        raise HostLaunchError(f"{where}: undefined behaviour\n{report}")


def launch(key: KernelKey, args: numpy.ndarray, grid, block, shared_mem: int = 0, *,
           readable=(), writable=()) -> None:
    """Run kernel ``key`` over ``grid`` x ``block`` with argument block ``args``.

    Parameters
    ----------
    key : KernelKey
        Any key of ``cugather.plan.keys.all_kernel_keys()``; its group's
        library is built on first use (:func:`build.prebuild` builds them all).
    args : numpy.ndarray
        Size-1 structured array of the kind's argument dtype
        (``cugather.plan.layout.ARGS_DTYPES``), pointers set to host addresses.
    grid, block : tuple of 3 ints
        As given to ``cuLaunchKernel``; checked against CUDA's limits.
    shared_mem : int
        Dynamic shared memory in bytes.
    readable, writable : sequence of (low, high)
        Byte ranges loads (``__ldg`` & co.) and checked stores/atomics may
        touch; empty means unchecked.

    Raises
    ------
    HostLaunchError
        Bad launch configuration, an access outside the ranges, a memory
        fault, a barrier problem, or undefined behaviour reported by UBSan.
    """
    args_type = key.spec.args_type
    dtype = ARGS_DTYPES[args_type]
    if not isinstance(args, numpy.ndarray) or args.dtype != dtype or args.size != 1:
        raise TypeError(f"args must be a size-1 array of the {args_type} dtype, got "
                        f"{getattr(args, 'dtype', type(args))}")
    launch_entry(build.library_for(key), key.entry, args, grid, block, shared_mem,
                 readable=readable, writable=writable)
    with _lock:
        _executed.add(key)
    if hasattr(_state, "launches"):
        _state.launches.append((key, tuple(grid), tuple(block), int(shared_mem)))


# ---------------------------------------------------------------- the backend
#: The host's device number: host plans never share a cache entry with a GPU's.
HOST_DEVICE = -1


class _HostKernel:
    """A kernel key's launcher, called with cuLaunchKernel's arguments."""

    __slots__ = ("key", "handle", "launch_fn")

    def __init__(self, key: KernelKey):
        self.key = key
        self.handle = key
        self.launch_fn = _launch_from_params


def _launch_from_params(key, g0, g1, g2, b0, b1, b2, shared_mem, stream, params_ptr, extra):
    """What cuLaunchKernel does with a BoundKernel's parameters, on the host."""
    args_ptr = ctypes.c_uint64.from_address(params_ptr).value
    dtype = ARGS_DTYPES[key.spec.args_type]
    raw = (ctypes.c_char * dtype.itemsize).from_address(args_ptr)
    args = numpy.frombuffer(raw, dtype=dtype).copy()  # the parameters are copied at launch
    access = _state.access
    # Raise mode's gathers write the flag too (resolve_checked in common.cuh).
    writable = access["flags"] + ([] if not key.spec.moves_data else access["outputs"])
    launch(key, args, (g0, g1, g2), (b0, b1, b2), shared_mem,
           readable=access["inputs"], writable=writable)


class HostBackend:
    """The runtime's backend on the CPU (see ``cugather.runtime.launch.CudaBackend``)."""

    fast_path = False
    array_type = numpy.ndarray

    def load(self, key: KernelKey, device: int) -> _HostKernel:
        build.library_for(key)  # built (or found) now, as a module is loaded on a GPU
        return _HostKernel(key)

    def limits(self, device: int) -> DeviceLimits:
        return DeviceLimits(max_shared_mem=MAX_SHARED)

    def activate(self, device: int):
        return contextlib.nullcontext()

    @staticmethod
    def pointer(arr) -> int:
        return arr.ctypes.data

    @staticmethod
    def device_of(arr) -> int:
        return HOST_DEVICE

    @staticmethod
    def stream_pointer(stream) -> int:
        return 0

    def empty(self, shape, dtype):
        out, whole = _guarded(shape, dtype)
        _state.access["outputs"].append(extent(out))
        _state.guards.append(whole)
        return out

    def index_value(self, indices, pos: int) -> int:
        return int(indices.reshape(-1)[pos])

    @staticmethod
    def fill_bytes(fill_value, dtype) -> bytes:
        return validate.fill_bytes(fill_value, dtype)

    @property
    def flags(self):
        """The runtime's flag pool over host memory the kernels may write."""
        return _FLAGS

    @staticmethod
    def capturing(stream_ptr: int) -> bool:
        return False

    @staticmethod
    def synchronize(stream_ptr: int) -> None:
        pass  # host launches run to completion

    def contiguous_copy(self, data, device: int):
        copy = device_copy(data)
        _state.access["inputs"].append(extent(copy))
        return copy


def _host_flags(nbytes: int) -> int:
    """Flag memory for the runtime's Flags pool: aligned host memory kept alive,
    and writable by every kernel launched on the host."""
    block = device_empty((nbytes,), numpy.uint8)
    _flag_blocks.append(block)
    with _lock:
        _flag_ranges.append(extent(block))
    return block.ctypes.data


_flag_blocks: list = []
_flag_ranges: list = []
_FLAGS = Flags(_host_flags)
_FLAGS.give_back(_FLAGS.take())  # its first block exists before any launch's ranges are set
HOST = HostBackend()


def _guarded(shape, dtype):
    """(out, whole buffer): ``out`` poisoned and fenced by GUARD canary bytes each side."""
    dtype = numpy.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    whole = device_empty((nbytes + 2 * GUARD,), numpy.uint8)
    whole[...] = POISON
    out = whole[GUARD:GUARD + nbytes].view(dtype).reshape(shape)
    return out, whole


def guarded_out(shape, dtype, offset: int = 0):
    """A poisoned output ``offset`` bytes past a 256-aligned address, fenced by
    canaries that :func:`_call` checks when it is passed as ``out=``."""
    dtype = numpy.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    whole = device_empty((nbytes + 2 * GUARD + offset,), numpy.uint8)
    whole[...] = POISON
    out = whole[GUARD + offset:GUARD + offset + nbytes].view(dtype).reshape(shape)
    _pending_guards.append((out, whole, offset))
    return out


_pending_guards: list = []


def _check_canaries(whole, offset: int = 0) -> None:
    for name, part in (("before", whole[:GUARD + offset]), ("after", whole[-GUARD:])):
        if (part != POISON).any():
            first = int(numpy.flatnonzero(part != POISON)[0])
            raise HostLaunchError(f"a kernel wrote outside its output ({name} it, canary "
                                  f"byte {first})")


def run_on_host(fn, inputs, out=None, extra_inputs=()):
    """Run ``fn()`` (a library call on host arrays) letting kernels read
    ``inputs`` (arrays) and ``extra_inputs`` (byte ranges) and write ``out``
    and what the backend allocates; then check the canaries and that the
    inputs are unchanged.  Returns a copy of the result."""
    _state.launches = []
    _state.guards = []
    with _lock:
        flags = list(_flag_ranges)
    _state.access = {"inputs": [extent(a) for a in inputs if a.size] + list(extra_inputs),
                     "outputs": [], "flags": flags}
    guards = [(w, off) for o, w, off in _pending_guards if o is out]
    _pending_guards[:] = [g for g in _pending_guards if g[0] is not out]
    if out is not None:
        _state.access["outputs"].append(extent(out))
    before = [a.tobytes() for a in inputs]
    result = fn()
    for whole, offset in guards + [(w, 0) for w in _state.guards]:
        _check_canaries(whole, offset)
    if [a.tobytes() for a in inputs] != before:
        raise HostLaunchError("a kernel modified its inputs")
    return result.copy()


def _call(fn, data, indices, out=None):
    return run_on_host(fn, [data, indices], out)


def host_indices(indices, allow_bool: bool = False) -> numpy.ndarray:
    """What ``validate.as_indices`` makes of ``indices``, in aligned host memory."""
    host = numpy.asarray(indices)
    if host.dtype == object:
        raise TypeError(f"indices must be integers, got {indices!r:.80}")
    if host.size == 0 and not isinstance(indices, numpy.ndarray):
        host = host.astype(numpy.int64)
    target = validate.index_dtype(host.dtype, allow_bool)
    return device_copy(host.astype(target, copy=False))


def _run_forced(plan, data, indices, out, fill_value, replan):
    """A forced variant through the library's run_plan (data copied first when
    the plan says so, as the ops do)."""
    if plan.copy_data:
        data = HOST.contiguous_copy(data, HOST_DEVICE)
        plan = replan(data)
    fill = None
    if plan.key is not None and plan.key.mode == "fill":
        fill = validate.fill_bytes(fill_value, data.dtype)
    return run_plan(plan, data, indices, fill=fill, out=out, backend=HOST)


# ---------------------------------------------------------------- the operators
def run_op(op: GatherOp, data, indices, out=None, **force) -> numpy.ndarray:
    """``op(data, indices)`` on the host: the op's own run (or, with ``force``
    -- kind, math_name, max_grid, row_unroll -- its plan through run_plan)."""
    data = numpy.asarray(data)
    if data.ndim == 0:
        data = op._zero_d(data)
    indices = host_indices(indices, op._ALLOW_BOOL)
    if not force:
        return _call(lambda: gather_op.run(op, data, indices, out, None, HOST_DEVICE, HOST),
                     data, indices, out)
    return _call(lambda: _run_forced(op.plan(data, indices, **force), data, indices, out,
                                     op.fill_value,
                                     lambda d: op.plan(d, indices, **force)),
                 data, indices, out)


def host_gather(data, indices, axis: int = 0, mode: str = "raise", fill_value=0, out=None,
                **force) -> numpy.ndarray:
    """``cugather.gather(data, indices, axis, mode=mode, fill_value=fill_value)`` on the host."""
    return run_op(GatherOp(axis, mode=mode, fill_value=fill_value), data, indices, out, **force)


def host_take(a, indices, axis: Optional[int] = None, mode: str = "raise", out=None,
              **force) -> numpy.ndarray:
    """``cugather.take(a, indices, axis, mode=mode)`` on the host (numpy.take semantics)."""
    validate.check_mode(mode, validate.TAKE_MODES)
    a = numpy.asarray(a)
    if axis is None:
        a = a.reshape(-1) if a.ndim != 1 else a
        axis = 0
    return run_op(gather_op.take_op(axis, mode), a, indices, out, **force)


def _elements_or_nd(op_module, op: str, data, indices, out, out_offset, axis, mode, fill_value,
            force, run):
    """(result, plan) of a GatherElements / GatherND call on the host: the op's own
    planner on the call's geometry, then the op's run (or run_plan when forced)."""
    data = numpy.asarray(data)
    indices = host_indices(indices)
    limits = HOST.limits(HOST_DEVICE)

    def plan(d, o=out):
        key = call_key(HOST, HOST_DEVICE, d, HOST.pointer(d), indices, out_bits(o, HOST))
        return op_module.plan_for(geometry_of_key(op, key, axis, mode), limits, **force)

    p = plan(data)
    if out is None and out_offset:
        out = guarded_out(p.out_shape, data.dtype, out_offset)
        p = plan(data, out)
    if force:
        result = _call(lambda: _run_forced(p, data, indices, out, fill_value, plan),
                       data, indices, out)
    else:
        result = _call(lambda: run(data, indices, out), data, indices, out)
    return result, p


def host_elements(data, indices, axis, mode="raise", fill_value=0, broadcast=False, out=None,
                  out_offset: int = 0, **force):
    """``(result, plan)`` of gather_elements (take_along_axis with ``broadcast``) on the host.

    ``out_offset`` puts the output that many bytes past a 256-aligned address;
    ``force`` goes to the planner (math_name, max_grid, column_tiles).
    """
    op = "along" if broadcast else "elements"
    axis = validate.normalize_axis(axis, numpy.ndim(data))
    return _elements_or_nd(elements_op, op, data, indices, out, out_offset, axis, mode, fill_value,
                   force, lambda d, i, o: elements_op.run(op, d, i, axis, o, mode, fill_value,
                                                          None, HOST_DEVICE, HOST))


def host_nd(data, indices, batch_dims=0, mode="raise", fill_value=0, out=None,
            out_offset: int = 0, **force):
    """``(result, plan)`` of gather_nd on the host (see :func:`host_elements`)."""
    return _elements_or_nd(nd_op, "nd", data, indices, out, out_offset, batch_dims, mode, fill_value,
                   force, lambda d, i, o: nd_op.run(d, i, batch_dims, o, mode, fill_value, None,
                                                    HOST_DEVICE, HOST))
