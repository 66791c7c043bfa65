"""View: what the op runtime reads of an array, for arrays that are not CuPy's.

The ops (``ops.*.run``), the geometry and ``validate.check_out`` read
``shape``, ``strides`` (bytes), ``dtype`` (NumPy), ``ndim``, ``size``,
``itemsize`` and ``flags.c_contiguous``; the backend reads ``ptr`` and
``device``.  ``base`` is the caller's tensor or array that owns the memory,
kept alive by the view.  Built per call, so it is a plain ``__slots__``
object with nothing computed up front but what every call reads.
"""

from __future__ import annotations

import math
from typing import Any, Tuple

import numpy

__all__ = ["View", "c_strides"]


class _Flags:
    __slots__ = ("c_contiguous",)

    def __init__(self, c_contiguous: bool) -> None:
        self.c_contiguous = c_contiguous


def c_strides(shape: Tuple[int, ...], itemsize: int) -> Tuple[int, ...]:
    """Byte strides of a C-contiguous array of ``shape``."""
    strides = []
    step = itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


class View:
    """An array of another library as the op runtime sees it.

    Subclasses say how a new base is wrapped (:meth:`wrap`), so that
    :meth:`reshape` works on any of them.
    """

    __slots__ = ("shape", "strides", "dtype", "ptr", "device", "base")

    def __init__(self, shape: Tuple[int, ...], strides: Tuple[int, ...], dtype: numpy.dtype[Any],
                 ptr: int, device: int, base: Any) -> None:
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.ptr = ptr
        self.device = device
        self.base = base

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return int(self.dtype.itemsize)

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    @property
    def flags(self) -> _Flags:
        contiguous = all(s == c for n, s, c in zip(self.shape, self.strides,
                                                   c_strides(self.shape, self.itemsize))
                         if n != 1) or self.size == 0
        return _Flags(contiguous)

    @classmethod
    def wrap(cls, base: Any, dtype: numpy.dtype[Any]) -> "View":
        """A view of ``base`` (this subclass's kind of array) holding ``dtype``."""
        raise NotImplementedError

    def reshape(self, shape: Tuple[int, ...]) -> "View":
        """The view of ``base.reshape(shape)`` (a copy where the library makes one)."""
        return self.wrap(self.base.reshape(shape), self.dtype)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(shape={self.shape}, strides={self.strides}, "
                f"dtype={self.dtype}, device={self.device})")
