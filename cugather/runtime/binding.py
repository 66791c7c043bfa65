"""Binding: a plan's launches tied to loaded kernels, with argument blocks built once.

:func:`bind` is the one place where a plan meets a device.  Each launch of
the plan becomes a :class:`BoundKernel`: the kernel handle the backend loaded
plus a NumPy structured array holding the argument struct (every field but
the pointers, the fill value included).  A call writes the pointers into that
block and hands its address to the backend's launch function, which copies
the parameters at launch, so the block can be reused at once.
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


_pack3 = struct.Struct("<QQQ").pack_into  # the three leading pointers, in one call


class BoundKernel:
    """One loaded kernel plus a reusable argument block for one launch of a plan."""

    __slots__ = ("kernel", "grid", "block", "shared_mem", "args", "_words", "_slots",
                 "_params", "_params_ptr", "_lock", "_launch", "_handle", "_bytes", "_config")

    def __init__(self, kernel, launch: Launch, fill: Optional[tuple] = None):
        fields = pack_fields(launch.fields)
        if fill is not None:
            fields["fill"] = fill
        self.kernel = kernel  # keeps the module loaded
        self.grid, self.block = tuple(launch.grid), tuple(launch.block)
        self.shared_mem = int(launch.shared_mem)
        self.args = new_args(launch.args_type, **fields)
        self._words = self.args.view(numpy.uint64)
        self._slots = tuple(self.args.dtype.fields[n][1] // 8
                            for n in POINTER_FIELDS[launch.args_type])
        self._params = numpy.array([self.args.ctypes.data], dtype=numpy.uint64)
        self._params_ptr = self._params.ctypes.data
        self._bytes = memoryview(self.args.view(numpy.uint8))
        self._lock = threading.Lock()
        self._handle = kernel.handle
        self._launch = kernel.launch_fn  # cuLaunchKernel's signature
        self._config = (*self.grid, *self.block, self.shared_mem)

    def launch3(self, p0: int, p1: int, p2: int, stream_ptr: int) -> None:
        """:meth:`launch` for blocks whose three pointers lead (data, indices, out)."""
        g0, g1, g2, b0, b1, b2, shared = self._config
        # The block is shared by the threads using this plan; the launch copies it.
        with self._lock:
            _pack3(self._bytes, 0, p0, p1, p2)
            self._launch(self._handle, g0, g1, g2, b0, b1, b2, shared, stream_ptr,
                         self._params_ptr, 0)

    def launch(self, pointers, stream_ptr: int) -> None:
        """Write ``pointers`` (in POINTER_FIELDS order) and launch on ``stream_ptr``."""
        g, b = self.grid, self.block
        with self._lock:
            words = self._words
            for slot, ptr in zip(self._slots, pointers):
                words[slot] = ptr
            self._launch(self._handle, g[0], g[1], g[2], b[0], b[1], b[2],
                         self.shared_mem, stream_ptr, self._params_ptr, 0)


class Bound:
    """A plan with its kernels loaded and argument blocks built, on one device."""

    __slots__ = ("plan", "main", "check", "out_shape", "copy_data", "fast", "backend")

    def __init__(self, plan: Plan, main: Optional[BoundKernel], check: Optional[BoundKernel],
                 backend):
        self.plan, self.main, self.check, self.backend = plan, main, check, backend
        self.out_shape = plan.out_shape
        self.copy_data = plan.copy_data
        # fast: one launch and nothing else (no check, no copy, non-empty output)
        self.fast = backend.fast_path and main is not None and check is None


def bind(plan: Plan, device: int, fill: Optional[bytes] = None, backend=None) -> Bound:
    """Load the kernels of ``plan`` on ``device`` and build their argument blocks.

    Parameters
    ----------
    plan : Plan
        Any operator's plan.
    device : int
        Device to load the kernels on.
    fill : bytes, optional
        One element of the data's dtype, for plans in ``"fill"`` mode.
    backend : optional
        Where kernels are loaded and launched; default the CUDA backend.
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
    return Bound(plan, main, check, backend)
