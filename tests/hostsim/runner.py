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

import ctypes
import math
import threading
from typing import Optional

import numpy

from cugather import GatherOp
from cugather.validate import TAKE_MODES, _index_dtype, check_mode, fill_bytes
from cugather.compile.render import KIND_SPECS
from cugather.plan.keys import KernelKey
from cugather.runtime.launch import fill_words, pack_fields
from cugather.plan.layout import ARGS_DTYPES, POINTER_FIELDS, new_args
from cugather.plan.gather import GatherPlan

from . import build

__all__ = ["HostLaunchError", "launch", "launch_entry", "host_gather", "host_take", "run_op",
           "executed_keys", "device_empty", "device_copy", "extent", "last_launches"]

NO_BAD = (1 << 64) - 1
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
    lo = hi = arr.ctypes.data
    for n, s in zip(arr.shape, arr.strides):
        if n == 0:
            return (lo, lo)
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return (lo, hi + arr.itemsize)


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
        Any key whose kind is in ``cugather.compile.render.KIND_SPECS``; its group's
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
    args_type = KIND_SPECS[key.kind].args_type
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


# ---------------------------------------------------------------- gather
def _as_host_indices(indices, allow_bool: bool) -> numpy.ndarray:
    """What ``_arrays.as_indices`` does, on the host: int32/int64, C-contiguous, aligned."""
    host = numpy.asarray(indices)
    if host.dtype == object:
        raise TypeError(f"indices must be integers, got {indices!r:.80}")
    if host.size == 0 and not isinstance(indices, numpy.ndarray):
        host = host.astype(numpy.int64)
    target = _index_dtype(host.dtype, allow_bool, "indices")
    return device_copy(host.astype(target, copy=False))


def _output(shape, dtype):
    """(out, whole buffer): ``out`` poisoned and fenced by GUARD canary bytes each side."""
    dtype = numpy.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    whole = device_empty((nbytes + 2 * GUARD,), numpy.uint8)
    whole[...] = POISON
    out = whole[GUARD:GUARD + nbytes].view(dtype).reshape(shape)
    return out, whole


def _check_canaries(whole: numpy.ndarray, key) -> None:
    for name, part in (("before", whole[:GUARD]), ("after", whole[-GUARD:])):
        if (part != POISON).any():
            first = int(numpy.flatnonzero(part != POISON)[0])
            raise HostLaunchError(f"{key.entry} wrote outside the output ({name} it, canary "
                                  f"byte {first} of {GUARD})")


def _check_launch(plan: GatherPlan, indices, first_bad, max_grid) -> None:
    """GatherOp._bind's check kernel and GatherOp._check's read-back."""
    n = plan.n_indices
    grid = max(1, min(-(-n // 256), 4096))
    if max_grid:  # tests only: let the check's grid-stride loop iterate as well
        grid = min(grid, max_grid)
    args = new_args("CheckArgs", **pack_fields(dict(n=n, axis_len=plan.axis_len)))
    for name, ptr in zip(POINTER_FIELDS["CheckArgs"], (indices.ctypes.data, first_bad.ctypes.data)):
        args[name] = ptr
    first_bad[...] = NO_BAD
    launch(plan.check_key, args, (grid, 1, 1), (256, 1, 1), 0,
           readable=[extent(indices)], writable=[extent(first_bad)])
    pos = int(first_bad[0])
    if pos != NO_BAD:
        value = int(indices.reshape(-1)[pos])
        where = tuple(int(i) for i in numpy.unravel_index(pos, indices.shape))
        raise IndexError(
            f"index {value} is out of bounds for axis {plan.axis} with size {plan.axis_len} "
            f"(at indices{list(where)}; valid range [{-plan.axis_len}, {plan.axis_len - 1}])")


def run_op(op: GatherOp, data, indices, **force) -> numpy.ndarray:
    """``op(data, indices)`` on the host: plan, bind, check, gather.

    ``data`` is used with its own strides and address (which decide the unit
    width), so views exercise the same paths as on a GPU.  ``force`` goes to
    ``GatherOp.plan`` (``kind``, ``math_name``, ``max_grid``).
    """
    _state.launches = []
    data = numpy.asarray(data)
    if data.ndim == 0:
        raise ValueError("data must have at least one dimension, got a 0-d array")
    indices = _as_host_indices(indices, op._allow_bool)
    plan = op.plan(data, indices, **force)
    kernel_mode = op._kernel_mode
    fill = None
    if kernel_mode == "fill":  # as GatherOp._bind
        pattern = fill_bytes(op.fill_value, data.dtype)
        fill = fill_words(pattern)
        unit = plan.key.unit if plan.key else data.itemsize
        if unit < len(pattern) and pattern != pattern[:unit] * (len(pattern) // unit):
            plan = GatherPlan(None, plan.check_key, plan.out_shape, plan.axis, plan.axis_len,
                              plan.n_indices, copy_data=True, reason="misaligned fill")
    if (plan.n_indices and not plan.axis_len and kernel_mode != "fill"
            and math.prod(plan.out_shape)):
        raise IndexError(f"cannot take {plan.n_indices} indices from axis {plan.axis} of "
                         f"size 0 (mode={op.mode!r})")
    if plan.copy_data:  # as GatherOp.__call__: a C-contiguous copy, planned afresh
        return run_op(op, device_copy(data), indices, **force)

    out, whole = _output(plan.out_shape, data.dtype)
    data_before = data.tobytes()
    if plan.check_key is not None:
        _check_launch(plan, indices, numpy.zeros(1, numpy.uint64), force.get("max_grid"))
    if plan.key is not None:
        fields = dict(plan.fields)
        if fill is not None:
            fields["fill"] = fill
        args_type = KIND_SPECS[plan.key.kind].args_type
        args = new_args(args_type, **pack_fields(fields))
        pointers = (data.ctypes.data, indices.ctypes.data, out.ctypes.data)
        for name, ptr in zip(POINTER_FIELDS[args_type], pointers):
            args[name] = ptr
        launch(plan.key, args, plan.grid, plan.block, plan.shared_mem,
               readable=[extent(data), extent(indices)], writable=[extent(out)])
        _check_canaries(whole, plan.key)
        if data.tobytes() != data_before:
            raise HostLaunchError(f"{plan.key.entry} modified its input data")
    return out.copy()


def host_gather(data, indices, axis: int = 0, mode: str = "raise", fill_value=0,
                **force) -> numpy.ndarray:
    """``cugather.gather(data, indices, axis, mode=mode, fill_value=fill_value)`` on the host.

    ``force``: ``kind``, ``math_name``, ``max_grid`` as for ``GatherOp.plan``.
    """
    return run_op(GatherOp(axis, mode=mode, fill_value=fill_value), data, indices, **force)


def host_take(a, indices, axis: Optional[int] = None, mode: str = "raise",
              **force) -> numpy.ndarray:
    """``cugather.take(a, indices, axis, mode=mode)`` on the host (numpy.take semantics)."""
    check_mode(mode, TAKE_MODES)
    kernel_mode = "clip_numpy" if mode == "clip" else mode
    a = numpy.asarray(a)
    if axis is None:
        a = a.reshape(-1) if a.ndim != 1 else a
        axis = 0
    op = GatherOp.__new__(GatherOp)  # as cugather.take's shared op
    op._init(axis, mode, kernel_mode, 0, 256, allow_bool=True)
    return run_op(op, a, indices, **force)
