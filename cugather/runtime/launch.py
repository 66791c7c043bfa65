"""Launching bound plans: the one launch path under every op, and the CUDA backend.

:func:`execute` is how every operator launches a :class:`~.binding.Bound`:

* the cached path (CuPy arrays, the device current, no ``out=``): allocate
  the output, write the pointers, one ``cuLaunchKernel``;
* raise mode with a fresh output: the same single launch, the kernel
  checking every index it reads and recording the first bad position in a
  pinned host word (:class:`Flags`), then one stream synchronisation; a bad
  index discards the output and raises the plan's IndexError;
* raise mode with ``out=``: the bounds-check kernel first, so that ``out``
  stays untouched when an index is bad, then the gather;
* everything else (another backend, a device switch, ``stream=``) through
  the same steps with the backend's own methods.

Everything device-specific goes through a backend object: :data:`CUDA` here;
the host-execution test tier supplies one that runs the same rendered
kernels on the CPU, and the torch front door one for torch tensors.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Optional

import numpy

from .. import validate
from ..plan.core import DeviceLimits, alignment
from .binding import Bound, BoundKernel, bind

__all__ = ["CudaBackend", "CUDA", "NO_BAD", "Flags", "execute", "run_plan", "CAPTURE_ERROR",
           "ready_contexts", "bad_index"]

#: What a bounds-check flag holds when every index is valid.
NO_BAD = (1 << 64) - 1

CAPTURE_ERROR = ("mode='raise' reads the bounds check back to the host, which CUDA graph "
                 "capture forbids; use mode='wrap', 'clip' or 'fill' inside a capture")


class _Ready(threading.local):
    """Devices whose primary context this thread has made current (per thread)."""

    devices: frozenset = frozenset()


_ready = _Ready()
#: This thread's devices with a current, initialised context: a pre-built
#: launcher launches only on those (``device in ready_contexts.devices``).
ready_contexts = _ready


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
        if self.device not in _ready.devices:
            self.rt.free(0)  # the driver API launch needs the primary context current
            _ready.devices = _ready.devices | {self.device}

    def __exit__(self, *exc):
        if self.previous is not None:
            self.rt.setDevice(self.previous)


class Flags:
    """8-byte bounds-check flags in pinned host memory that kernels write directly.

    With unified addressing a pinned host allocation has the same address on
    the host and on every device, so a kernel ``atomicMin``s into it and the
    host reads it after the stream synchronisation: no memset, no copy.  (On
    mapped host memory a device's atomics are atomic among that device's
    threads, which are the only writers of a flag.)
    Each call takes its own flag and gives it back once its kernels have
    finished, so concurrent calls never share one.  ``alloc(nbytes) ->
    address`` provides the memory (never freed: 4 KB per 512 flags).
    """

    BLOCK = 512  # flags per allocation

    def __init__(self, alloc):
        self._alloc = alloc
        self._free: list = []   # (address, one-word view); list.pop/append are atomic
        self._words: dict = {}  # address -> view
        self._blocks: list = []
        self._lock = threading.Lock()

    def take(self) -> int:
        """A flag's address, set to NO_BAD."""
        try:
            addr, word = self._free.pop()
        except IndexError:
            addr, word = self._grow()
        word[0] = NO_BAD
        return addr

    def _grow(self):
        with self._lock:
            base = self._alloc(8 * self.BLOCK)
            words = numpy.ctypeslib.as_array((ctypes.c_uint64 * self.BLOCK).from_address(base))
            self._blocks.append(words)
            slots = [(base + 8 * i, words[i:i + 1]) for i in range(self.BLOCK)]
            self._words.update(slots)
            self._free.extend(slots[1:])
            return slots[0]

    def read_and_give(self, addr: int) -> int:
        """The value of flag ``addr`` (its kernels done); the flag goes back to the pool."""
        word = self._words[addr]
        value = int(word[0])
        self._free.append((addr, word))
        return value

    def give_back(self, addr: int) -> None:
        """Return flag ``addr`` unread (its kernels done, or never launched)."""
        self._free.append((addr, self._words[addr]))


def _pinned(nbytes: int) -> int:
    rt = validate.cupy_module().cuda.runtime
    return int(rt.hostAlloc(nbytes, rt.hostAllocPortable | rt.hostAllocMapped))


class CudaBackend:
    """Kernels compiled by NVRTC, loaded by CuPy, launched with ``cuLaunchKernel``
    on CuPy arrays."""

    #: execute() may take the cached path: CuPy arrays, CuPy's current stream.
    fast_path = True

    def __init__(self):
        self._limits: dict = {}
        self.flags = Flags(_pinned)

    @property
    def array_type(self):
        return validate.cupy_module().ndarray

    def load(self, key, device: int):
        from ..compile.compiler import load_kernel

        return load_kernel(key, device)

    def limits(self, device: int) -> DeviceLimits:
        lim = self._limits.get(device)
        if lim is None:
            dev = validate.cupy_module().cuda.Device(device)
            attrs = dev.attributes
            lim = self._limits[device] = DeviceLimits(
                sm_count=attrs["MultiProcessorCount"],
                max_shared_mem=attrs["MaxSharedMemoryPerBlock"],
                arch=f"sm_{dev.compute_capability}")
        return lim

    def activate(self, device: int) -> _Device:
        return _Device(validate.cupy_module().cuda.runtime, device)

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

    def cached_call(self, bound: Bound):
        """The cached path of ``bound`` as one closure, or None where it has none.

        ``call(data_ptr, indices, pointers)`` allocates the output, writes the
        struct's pointers and launches on CuPy's current stream -- in raise mode
        then synchronises and reads the flag -- with every name it needs bound
        in advance (Triton's pre-built launcher); it returns None, having done
        nothing, when ``bound``'s device is not current with its context ready
        in this thread (execute() then takes the general path).
        """
        if not self.fast_path or bound.main is None or bound.copy_data:
            return None
        return _cupy_call(bound, self)

    @staticmethod
    def fill_bytes(fill_value, dtype) -> bytes:
        return validate.fill_bytes(fill_value, dtype)

    def index_value(self, indices, pos: int) -> int:
        return int(indices.reshape(-1)[pos].get())

    @staticmethod
    def capturing(stream_ptr: int) -> bool:
        return bool(validate.cupy_module().cuda.runtime.streamIsCapturing(stream_ptr))

    @staticmethod
    def synchronize(stream_ptr: int) -> None:
        validate.cupy_module().cuda.runtime.streamSynchronize(stream_ptr)

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


def _cupy_call(bound: Bound, backend: CudaBackend):
    cp = validate.cupy_module()
    rt = cp.cuda.runtime
    get_device, get_stream, ndarray = rt.getDevice, cp.cuda.get_current_stream, cp.ndarray
    shape, dtype, device = bound.out_shape, bound.out_dtype, bound.device
    pack, buf, lock, launch, handle, config, params = bound.main.parts()
    g0, g1, g2, b0, b1, b2, shared = config
    ready = _ready

    if not bound.checked:
        def call(data_ptr, indices, pointers):
            if get_device() != device or device not in ready.devices:
                return None
            out = ndarray(shape, dtype)
            sptr = get_stream().ptr
            with lock:
                pack(buf, 0, data_ptr, indices.data.ptr, out.data.ptr, 0, *pointers)
                launch(handle, g0, g1, g2, b0, b1, b2, shared, sptr, params, 0)
            return out
        return call

    capturing, synchronize = rt.streamIsCapturing, rt.streamSynchronize
    flags = backend.flags

    def checked_call(data_ptr, indices, pointers):
        if get_device() != device or device not in ready.devices:
            return None
        sptr = get_stream().ptr
        if capturing(sptr):
            raise RuntimeError(CAPTURE_ERROR)
        out = ndarray(shape, dtype)
        iptr = indices.data.ptr
        flag = flags.take()
        try:
            with lock:
                pack(buf, 0, data_ptr, iptr, out.data.ptr, flag, *pointers)
                launch(handle, g0, g1, g2, b0, b1, b2, shared, sptr, params, 0)
            synchronize(sptr)
        except BaseException:
            flags.give_back(flag)
            raise
        pos = flags.read_and_give(flag)
        if pos != NO_BAD:
            raise bad_index(bound, backend, indices, pos)
        return out
    return checked_call


def bad_index(bound: Bound, backend, indices, pos: int) -> IndexError:
    """The plan's IndexError for the first bad position ``pos`` of ``indices``."""
    return bound.plan.index_error(pos, backend.index_value(indices, pos), indices.shape)


def _pointers(extra: tuple, pointer) -> tuple:
    """The addresses of the arrays of ``extra`` pairs (0 for None)."""
    return tuple(0 if a is None else pointer(a) for _, a in extra) if extra else ()


def execute(bound: Bound, data, data_ptr: int, indices, out, stream, device: int,
            extra: tuple = ()):
    """Launch ``bound`` on validated arrays (``data`` at ``data_ptr``); returns the output.

    ``extra``: ``(name, array or None)`` pairs, the kernel's further inputs
    whose pointers follow raise mode's flag in its struct (None: a null
    pointer).  ``out``, when given, is checked here (shape, dtype, layout,
    device, no overlap with any input).
    """
    if out is None and stream is None:
        call = bound.call
        if call is not None:
            result = call(data_ptr, indices, _pointers(extra, bound.backend.pointer))
            if result is not None:
                return result
    return _execute(bound, data, data_ptr, indices, out, stream, device, extra)


def _execute(bound: Bound, data, data_ptr: int, indices, out, stream, device: int,
             extra: tuple):
    """execute() through the backend's methods: any backend, device, stream, out= or
    further inputs."""
    backend = bound.backend
    ptr = backend.pointer
    with backend.activate(device):
        fresh = out is None
        if fresh:
            out = backend.empty(bound.out_shape, bound.out_dtype)
        else:
            inputs = {"indices": indices} if data is None else {"data": data, "indices": indices}
            inputs.update((name, a) for name, a in extra if a is not None)
            validate.check_out(out, bound.out_shape, bound.out_dtype, device, inputs, backend)
        more = tuple(0 if a is None else ptr(a) for _, a in extra)
        sptr = backend.stream_pointer(stream)
        iptr, optr = ptr(indices), ptr(out)
        if not bound.checked:
            if bound.main is not None:
                bound.main.launch(sptr, data_ptr, iptr, optr, 0, *more)
            return out
        if backend.capturing(sptr):
            raise RuntimeError(CAPTURE_ERROR)
        flags = backend.flags
        flag = flags.take()
        try:
            if fresh and bound.main is not None:  # one launch: the gather checks
                bound.main.launch(sptr, data_ptr, iptr, optr, flag, *more)
            else:  # out= stays untouched: check first
                bound.check.launch(sptr, iptr, flag)
            backend.synchronize(sptr)
        except BaseException:
            flags.give_back(flag)
            raise
        pos = flags.read_and_give(flag)
        if pos != NO_BAD:
            raise bad_index(bound, backend, indices, pos)
        if not fresh and bound.main is not None:
            # Every index was just checked: the kernel's own check never fires,
            # so it gets no flag (a write through the null pointer would fault).
            bound.main.launch(sptr, data_ptr, iptr, optr, 0, *more)
    return out


def run_plan(plan, data, indices, *, fill: Optional[bytes] = None, out=None, stream=None,
             backend=None, extra: tuple = ()):
    """Bind ``plan`` (uncached) on ``data``'s device and launch it.

    For plans built outside an op -- a forced variant in tests and benchmarks,
    the aligned copy above; ``indices`` must be C-contiguous int32/int64 and
    ``fill`` one element's bytes for a fill-mode plan.  ``backend`` defaults
    to :data:`CUDA` (CuPy arrays).  ``out`` must be valid for the plan.
    """
    if plan.copy_data:
        raise ValueError(f"this plan needs data copied to a C-contiguous buffer first "
                         f"({plan.reason}); copy it and plan again")
    backend = backend or CUDA
    device = backend.device_of(data)
    bound = bind(plan, device, fill, backend,
                 data.dtype if plan.out_dtype is None else plan.out_dtype)
    return execute(bound, data, backend.pointer(data), indices, out, stream, device, extra)
