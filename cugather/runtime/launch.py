"""Launch: a plan bound to a loaded kernel, launched with three pointers.

The argument block is a NumPy structured array built once per plan; a call
writes the pointers into it and hands its address to ``cuLaunchKernel``, which
copies the parameters at launch, so the block can be reused at once.  Calls
off the cached fast path go through :func:`launch_checked`: the device made
current, the output allocated or checked, the raise-mode bounds check, then
the launch.
"""

from __future__ import annotations

import threading

import numpy

from .. import validate as _arrays
from ..validate import cupy_module
from ..plan.fastdiv import Divisor
from ..plan.layout import POINTER_FIELDS, new_args

__all__ = ["BoundKernel", "pack_fields", "fill_words", "first_bad_position", "launch_checked",
           "NO_BAD"]

#: What a bounds-check kernel leaves in its flag when every index is valid.
NO_BAD = (1 << 64) - 1

_ready = threading.local()  # devices whose context this thread has made current


def _divisor_tuple(d: Divisor):
    return (d.d, d.m, d.l, 0)


def pack_fields(fields: dict) -> dict:
    """Plan fields -> values a structured array accepts (divisors as tuples)."""
    packed = {}
    for name, value in fields.items():
        if isinstance(value, Divisor):
            value = _divisor_tuple(value)
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], Divisor):
            value = [_divisor_tuple(v) for v in value]
        packed[name] = value
    return packed


def fill_words(pattern: bytes) -> tuple:
    """An element's bytes repeated to 16 bytes, as two little-endian u64."""
    block = (pattern * (16 // len(pattern)))[:16] if pattern else bytes(16)
    return tuple(numpy.frombuffer(block, dtype="<u8").tolist())


class BoundKernel:
    """One kernel handle plus a reusable argument block for one plan."""

    __slots__ = ("function", "grid", "block", "shared_mem", "args", "_words", "_slots",
                 "_params", "_params_ptr", "_lock", "_launch", "_fn_ptr")

    def __init__(self, function, args_type: str, fields: dict, grid, block, shared_mem=0):
        from cupy.cuda import driver

        self.function = function  # keeps the module loaded
        self.grid, self.block, self.shared_mem = tuple(grid), tuple(block), int(shared_mem)
        self.args = new_args(args_type, **pack_fields(fields))
        self._words = self.args.view(numpy.uint64)
        self._slots = tuple(self.args.dtype.fields[n][1] // 8 for n in POINTER_FIELDS[args_type])
        self._fn_ptr = function.ptr
        self._params = numpy.array([self.args.ctypes.data], dtype=numpy.uint64)
        self._params_ptr = self._params.ctypes.data
        self._lock = threading.Lock()
        self._launch = driver.launchKernel

    def launch3(self, p0: int, p1: int, p2: int, stream_ptr: int) -> None:
        """:meth:`launch` for blocks whose three pointers lead (data, indices, out)."""
        g, b = self.grid, self.block
        with self._lock:
            words = self._words
            words[0] = p0
            words[1] = p1
            words[2] = p2
            self._launch(self._fn_ptr, g[0], g[1], g[2], b[0], b[1], b[2],
                         self.shared_mem, stream_ptr, self._params_ptr, 0)

    def launch(self, pointers, stream_ptr: int) -> None:
        """Write ``pointers`` (in POINTER_FIELDS order) and launch on ``stream_ptr``."""
        g, b = self.grid, self.block
        with self._lock:  # the block is shared by threads using the same plan
            words = self._words
            for slot, ptr in zip(self._slots, pointers):
                words[slot] = ptr
            self._launch(self._fn_ptr, g[0], g[1], g[2], b[0], b[1], b[2],
                         self.shared_mem, stream_ptr, self._params_ptr, 0)


def first_bad_position(check: BoundKernel, indices_ptr: int, stream_ptr: int):
    """Run a raise-mode bounds check; the flat position of the first bad index, or None.

    The check kernel ``atomicMin``s positions into an 8-byte flag, which is
    read back after a stream synchronisation (so it cannot run in a CUDA
    graph capture, which raises RuntimeError instead).
    """
    from cupy.cuda import runtime as rt

    import cupy

    if rt.streamIsCapturing(stream_ptr):
        raise RuntimeError(
            "mode='raise' reads the bounds check back to the host, which CUDA graph "
            "capture forbids; use mode='wrap', 'clip' or 'fill' inside a capture")
    flag = cupy.empty(1, numpy.uint64)
    rt.memsetAsync(flag.data.ptr, 0xFF, 8, stream_ptr)
    check.launch((indices_ptr, flag.data.ptr), stream_ptr)
    host = numpy.empty(1, numpy.uint64)
    rt.memcpyAsync(host.ctypes.data, flag.data.ptr, 8, rt.memcpyDeviceToHost, stream_ptr)
    rt.streamSynchronize(stream_ptr)
    pos = int(host[0])
    return None if pos == NO_BAD else pos


class _Device:
    """Make ``device`` current (and its context initialised) for a launch."""

    __slots__ = ("device", "previous")

    def __init__(self, device: int):
        self.device = device
        self.previous = None

    def __enter__(self):
        rt = cupy_module().cuda.runtime
        current = rt.getDevice()
        if current != self.device:
            self.previous = current
            rt.setDevice(self.device)
        ready = getattr(_ready, "devices", None)
        if ready is None:
            ready = _ready.devices = set()
        if self.device not in ready:
            rt.free(0)  # the driver API launch needs the primary context current
            ready.add(self.device)

    def __exit__(self, *exc):
        if self.previous is not None:
            cupy_module().cuda.runtime.setDevice(self.previous)


def launch_checked(main, check, out_shape, data, indices, out, stream, device: int, bad_index):
    """Everything a launch needs beyond the cached fast path, for every op.

    Makes ``device`` current, allocates ``out`` (or checks the caller's), runs
    the raise-mode bounds ``check`` when there is one -- raising
    ``bad_index(pos)`` for the first bad flat position, before anything is
    written -- then launches ``main``, whose argument block leads with the
    data, indices and out pointers.  Returns ``out``.
    """
    cp = cupy_module()
    with _Device(device):
        if out is None:
            out = cp.ndarray(out_shape, data.dtype)
        else:
            _arrays.check_out(out, out_shape, data.dtype, device,
                              {"data": data, "indices": indices})
        sptr = _arrays.stream_pointer(stream)
        if check is not None:
            pos = first_bad_position(check, indices.data.ptr, sptr)
            if pos is not None:
                raise bad_index(pos)
        if main is not None:
            main.launch3(data.data.ptr, indices.data.ptr, out.data.ptr, sptr)
    return out
