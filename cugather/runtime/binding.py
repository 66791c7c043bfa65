"""Binding: a plan's launches tied to loaded kernels, with launchers built once.

:func:`bind` is the one place where a plan meets a device.  Each launch of
the plan becomes a :class:`BoundKernel`, a prebuilt launcher: the kernel
handle the backend loaded, the grid and block, and a NumPy structured array
holding the argument struct (every field but the pointers, the fill value
included).  The pointers lead every struct (``plan.layout.POINTER_FIELDS``),
so a call writes them with one ``pack_into`` and hands the block's address to
the backend's launch function, which copies the parameters at launch: the
block can be reused at once.
"""

from __future__ import annotations

import struct
import threading
from typing import Optional

import numpy

from ..plan.core import Launch, Plan
from ..plan.fastdiv import Divisor
from ..plan.layout import POINTER_FIELDS, new_args

__all__ = ["BoundKernel", "Bound", "bind", "pack_fields", "fill_words"]


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
    """One element's bytes repeated to 16 bytes, as two little-endian u64.

    A unit narrower than an element (misaligned data or out) takes its part
    of the pattern by position (``fill_at`` in kernels/common.cuh), so every
    element comes out whole.
    """
    block = (pattern * (16 // len(pattern) + 1))[:16] if pattern else bytes(16)
    return tuple(numpy.frombuffer(block, dtype="<u8").tolist())


class BoundKernel:
    """One loaded kernel with its launch configuration and a reusable argument block.

    ``launch(stream_ptr, *pointers)`` writes the leading pointers of the
    struct (in ``POINTER_FIELDS`` order; fewer leave the rest as bound) and
    launches.  The block is shared by the threads using this plan, so the
    write and the launch, which copies it, happen under a lock.
    """

    __slots__ = ("kernel", "grid", "block", "shared_mem", "args", "n_pointers", "_lock",
                 "_launch", "_handle", "_config", "_params_ptr", "_params", "_bytes", "_packs")

    def __init__(self, kernel, launch: Launch, fill: Optional[tuple] = None):
        fields = pack_fields(launch.fields)
        if fill is not None:
            fields["fill"] = fill
        self.kernel = kernel  # keeps the module loaded
        self.grid, self.block = tuple(launch.grid), tuple(launch.block)
        self.shared_mem = int(launch.shared_mem)
        self.args = new_args(launch.args_type, **fields)
        self.n_pointers = len(POINTER_FIELDS[launch.args_type])
        self._params = numpy.array([self.args.ctypes.data], dtype=numpy.uint64)
        self._params_ptr = self._params.ctypes.data
        self._bytes = memoryview(self.args.view(numpy.uint8))
        self._packs = {n: struct.Struct(f"<{n}Q").pack_into
                       for n in range(1, self.n_pointers + 1)}
        self._lock = threading.Lock()
        self._handle = kernel.handle
        self._launch = kernel.launch_fn  # cuLaunchKernel's signature
        self._config = (*self.grid, *self.block, self.shared_mem)

    def parts(self) -> tuple:
        """What a pre-built launcher closes over: ``(pack, block, lock, launch_fn,
        handle, (grid..., block..., shared), params)``; it writes every pointer with
        ``pack(block, 0, *pointers)`` and calls ``launch_fn(handle, *config, stream,
        params, 0)`` under ``lock``."""
        return (self._packs[self.n_pointers], self._bytes, self._lock, self._launch,
                self._handle, self._config, self._params_ptr)

    def launch(self, stream_ptr: int, *pointers: int) -> None:
        """Write ``pointers`` (the leading fields, in order) and launch on ``stream_ptr``."""
        g0, g1, g2, b0, b1, b2, shared = self._config
        pack = self._packs[len(pointers)]
        with self._lock:
            pack(self._bytes, 0, *pointers)
            self._launch(self._handle, g0, g1, g2, b0, b1, b2, shared, stream_ptr,
                         self._params_ptr, 0)


class Bound:
    """A plan with its kernels loaded and launchers built, on one device.

    ``checked``: raise mode, whose main kernel records the first bad index it
    reads; ``call``: the backend's pre-built cached path (None where it has
    none).
    """

    __slots__ = ("plan", "main", "check", "out_shape", "out_dtype", "copy_data", "checked",
                 "backend", "device", "call")

    def __init__(self, plan: Plan, main: Optional[BoundKernel], check: Optional[BoundKernel],
                 backend, out_dtype=None, device: int = 0):
        self.plan, self.main, self.check, self.backend = plan, main, check, backend
        self.out_shape = plan.out_shape
        self.out_dtype = out_dtype
        self.copy_data = plan.copy_data
        self.checked = check is not None
        self.device = device
        # The backend's pre-built cached path (launch.CudaBackend.cached_call), if any.
        make = getattr(backend, "cached_call", None)
        self.call = make(self) if make is not None else None


def bind(plan: Plan, device: int, fill: Optional[bytes] = None, backend=None,
         out_dtype=None) -> Bound:
    """Load the kernels of ``plan`` on ``device`` and build their launchers.

    Parameters
    ----------
    plan : Plan
        Any operator's plan.
    device : int
        Device to load the kernels on.
    fill : bytes, optional
        One element of the output's dtype, for plans in ``"fill"`` mode.
    backend : optional
        Where kernels are loaded and launched; default the CUDA backend.
    out_dtype : numpy.dtype, optional
        The output's dtype (the data's unless the operator says otherwise).
    """
    if backend is None:
        from .launch import CUDA as backend
    main = check = None
    if plan.main is not None:
        words = None
        if plan.main.key.mode == "fill":
            if fill is None:
                raise ValueError(f"{plan.main.key.entry} is a fill-mode kernel: pass the fill "
                                 f"value's bytes")
            words = fill_words(fill)
        main = BoundKernel(backend.load(plan.main.key, device), plan.main, words)
    if plan.check is not None:
        check = BoundKernel(backend.load(plan.check.key, device), plan.check)
    return Bound(plan, main, check, backend, out_dtype, device)
