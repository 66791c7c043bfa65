"""Launching bound plans: the one launch path under every op, and the CUDA backend.

:func:`execute` is how every operator launches a :class:`~.bind.Bound`: the
cached fast path (allocate, write three pointers, one ``cuLaunchKernel``)
when the plan has one launch and the device's context is current, else
:func:`launch_checked` -- device made current, output allocated or checked,
the raise-mode bounds check read back (:func:`first_bad_position`), then the
launch.  Everything device-specific goes through a backend object:
:data:`CUDA` here; the host-execution test tier supplies one that runs the
same rendered kernels on the CPU.
"""

from __future__ import annotations

import threading
from typing import Optional

import numpy

from .. import validate
from ..plan.core import DeviceLimits, alignment
from .binding import Bound, BoundKernel, bind

__all__ = ["CudaBackend", "CUDA", "NO_BAD", "execute", "launch_checked",
           "first_bad_position", "run_plan"]

#: What a bounds-check kernel leaves in its flag when every index is valid.
NO_BAD = (1 << 64) - 1

_ready = threading.local()  # devices whose context this thread has made current


class _Kernel:
    """A loaded CUDA function as a BoundKernel launches it."""

    __slots__ = ("loaded", "handle", "launch_fn")

    def __init__(self, loaded, launch_fn):
        self.loaded = loaded  # keeps the module alive
        self.handle = loaded.function.ptr
        self.launch_fn = launch_fn


class _Device:
    """Make ``device`` current (and its primary context initialised) for a launch."""

    __slots__ = ("device", "previous", "rt")

    def __init__(self, rt, device: int):
        self.rt, self.device, self.previous = rt, device, None

    def __enter__(self):
        current = self.rt.getDevice()
        if current != self.device:
            self.previous = current
            self.rt.setDevice(self.device)
        ready = getattr(_ready, "devices", None)
        if ready is None:
            ready = _ready.devices = set()
        if self.device not in ready:
            self.rt.free(0)  # the driver API launch needs the primary context current
            ready.add(self.device)

    def __exit__(self, *exc):
        if self.previous is not None:
            self.rt.setDevice(self.previous)


class CudaBackend:
    """Kernels compiled by NVRTC, loaded by CuPy, launched with ``cuLaunchKernel``."""

    fast_path = True

    def __init__(self):
        self._limits: dict = {}

    @property
    def array_type(self):
        return validate.cupy_module().ndarray

    def load(self, key, device: int) -> _Kernel:
        from cupy.cuda import driver

        from ..compile.compiler import load_kernel

        return _Kernel(load_kernel(key, device), driver.launchKernel)

    def limits(self, device: int) -> DeviceLimits:
        lim = self._limits.get(device)
        if lim is None:
            attrs = validate.cupy_module().cuda.Device(device).attributes
            lim = self._limits[device] = DeviceLimits(
                sm_count=attrs["MultiProcessorCount"],
                max_shared_mem=attrs["MaxSharedMemoryPerBlock"])
        return lim

    def activate(self, device: int) -> _Device:
        return _Device(validate.cupy_module().cuda.runtime, device)

    @staticmethod
    def context_ready(device: int) -> bool:
        """Whether this thread has ``device`` current with its context initialised."""
        return (validate.cupy_module().cuda.runtime.getDevice() == device
                and device in getattr(_ready, "devices", ()))

    @staticmethod
    def pointer(arr) -> int:
        return arr.data.ptr

    @staticmethod
    def device_of(arr) -> int:
        return arr.data.device_id

    @staticmethod
    def stream_pointer(stream) -> int:
        return validate.stream_pointer(stream)

    def empty(self, shape, dtype):
        return validate.cupy_module().ndarray(shape, dtype)

    def index_value(self, indices, pos: int) -> int:
        return int(indices.reshape(-1)[pos].get())

    def first_bad(self, check: BoundKernel, indices_ptr: int, stream_ptr: int) -> int:
        """Run the bounds ``check``; the flag it leaves (NO_BAD when all are valid).

        The check ``atomicMin``s positions into an 8-byte flag read back after a
        stream synchronisation, which CUDA graph capture forbids.
        """
        cp = validate.cupy_module()
        rt = cp.cuda.runtime
        if rt.streamIsCapturing(stream_ptr):
            raise RuntimeError(
                "mode='raise' reads the bounds check back to the host, which CUDA graph "
                "capture forbids; use mode='wrap', 'clip' or 'fill' inside a capture")
        flag = cp.empty(1, numpy.uint64)
        rt.memsetAsync(flag.data.ptr, 0xFF, 8, stream_ptr)
        check.launch((indices_ptr, flag.data.ptr), stream_ptr)
        host = numpy.empty(1, numpy.uint64)
        rt.memcpyAsync(host.ctypes.data, flag.data.ptr, 8, rt.memcpyDeviceToHost, stream_ptr)
        rt.streamSynchronize(stream_ptr)
        return int(host[0])

    def contiguous_copy(self, data, device: int):
        """A fresh C-contiguous, 256-byte aligned copy of ``data``.

        CuPy's copy kernels assume element alignment, so an array whose address
        or strides are not multiples of its item size is copied by the strided
        gather along axis 0 with identity indices (units fit any layout).
        """
        from ..plan.core import Operand
        from ..plan.gather import plan_gather

        cp = validate.cupy_module()
        isz = data.itemsize
        with cp.cuda.Device(device):
            if data.data.ptr % isz == 0 and all(s % isz == 0 for s in data.strides):
                return data.copy(order="C")
            plan = plan_gather(Operand(data.shape, data.strides, isz, alignment(data.data.ptr)),
                               data.shape[:1], "int64", 0, "wrap", kind="strided")
            if plan.copy_data:
                raise ValueError(f"data of shape {data.shape} with strides {data.strides} at an "
                                 f"address not aligned to its item size ({isz}) cannot be "
                                 f"gathered: make it contiguous first")
            return run_plan(plan, data, cp.arange(data.shape[0], dtype=numpy.int64))


#: The backend every public operator launches through.
CUDA = CudaBackend()


def first_bad_position(bound: Bound, indices_ptr: int, stream_ptr: int) -> Optional[int]:
    """Run ``bound``'s raise-mode bounds check; the flat position of the first
    bad index, or None when every index is valid."""
    pos = bound.backend.first_bad(bound.check, indices_ptr, stream_ptr)
    return None if pos == NO_BAD else pos


def launch_checked(bound: Bound, data, indices, out, stream, device: int):
    """Everything a launch needs beyond the cached fast path, for every op.

    Makes ``device`` current, allocates ``out`` (or checks the caller's), runs
    the raise-mode bounds check when the plan has one -- raising the plan's
    IndexError for the first bad position, before anything is written --
    then launches the gather.  Returns ``out``.
    """
    backend = bound.backend
    with backend.activate(device):
        if out is None:
            out = backend.empty(bound.out_shape, data.dtype)
        else:
            validate.check_out(out, bound.out_shape, data.dtype, device,
                               {"data": data, "indices": indices}, backend)
        sptr = backend.stream_pointer(stream)
        ptr = backend.pointer
        if bound.check is not None:
            pos = first_bad_position(bound, ptr(indices), sptr)
            if pos is not None:
                raise bound.plan.index_error(pos, backend.index_value(indices, pos),
                                             indices.shape)
        if bound.main is not None:
            bound.main.launch3(ptr(data), ptr(indices), ptr(out), sptr)
    return out


class _Fast:
    """CuPy callables of the cached path, looked up once."""

    ndarray = get_device = current_stream = None

    @classmethod
    def load(cls):
        cp = validate.cupy_module()
        cls.ndarray = cp.ndarray
        cls.get_device = cp.cuda.runtime.getDevice
        cls.current_stream = cp.cuda.get_current_stream
        return cls


def execute(bound: Bound, data, indices, out, stream, device: int):
    """Launch ``bound`` on arrays already validated: the one launch path of every op.

    The cached path -- one launch, no out= or stream=, the device's context
    current in this thread -- allocates the output and writes three pointers;
    anything else (out=, stream=, raise mode, a device switch) goes through
    :func:`launch_checked`.
    """
    if bound.fast and out is None and stream is None:
        fast = _Fast if _Fast.ndarray is not None else _Fast.load()
        if fast.get_device() == device and device in getattr(_ready, "devices", ()):
            out = fast.ndarray(bound.out_shape, data.dtype)
            bound.main.launch3(data.data.ptr, indices.data.ptr, out.data.ptr,
                               fast.current_stream().ptr)
            return out
    return launch_checked(bound, data, indices, out, stream, device)


def run_plan(plan, data, indices, *, fill: Optional[bytes] = None, out=None, stream=None,
             backend=None):
    """Bind ``plan`` (uncached) on ``data``'s device and launch it.

    For plans built outside an op -- a forced variant in tests and benchmarks,
    the aligned copy above; ``indices`` must be C-contiguous int32/int64 and
    ``fill`` one element's bytes for a fill-mode plan.  ``backend`` defaults
    to :data:`CUDA` (CuPy arrays).
    """
    if plan.copy_data:
        raise ValueError(f"this plan needs data copied to a C-contiguous buffer first "
                         f"({plan.reason}); copy it and plan again")
    backend = backend or CUDA
    device = backend.device_of(data)
    return execute(bind(plan, device, fill, backend), data, indices, out, stream, device)
