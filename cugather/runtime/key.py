"""Call keys and geometries: what a cached plan depends on.

Every call builds a :func:`call_key`, one flat tuple of what its plan depends
on (backend, device, shapes, strides, dtypes, the low address bits that set
the alignments, and the op's own parameters).  The op runtime compares it
with the key of the op's last call (one comparison) and looks it up in the
plan cache only when they differ; the named :class:`Geometry` a planner reads
is built from the key only when a plan must be made.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple, Tuple

import numpy

from ..plan.core import alignment

__all__ = ["Geometry", "call_key", "geometry_of_key", "with_data", "fill_token", "out_bits"]

Shape = Tuple[int, ...]


class Geometry(NamedTuple):
    """Everything a plan depends on, named (the planners' input).

    ``fill`` is :func:`fill_token` of the fill value (None unless the mode
    fills): keyed by its bytes, so ``-0.0`` and ``0.0`` are different plans.
    ``extra`` holds an operator's further parameters (GatherBlockQuantized's
    scales, for one), hashable.
    """

    op: str              # "gather", "take", "elements", "along", "nd", ...
    backend: Any         # where kernels run (cugather.runtime.launch.CUDA)
    device: int
    data_shape: Shape
    data_strides: Shape
    dtype: numpy.dtype
    indices_shape: Shape
    index_dtype: numpy.dtype
    data_align: int      # largest power of two (<= 256) dividing data's address
    out_align: int       # the same for out= (256 without one)
    axis: int            # normalised gather axis; batch_dims for GatherND
    mode: str            # kernel mode
    fill: object = None
    extra: tuple = ()


def out_bits(out: Any, backend: Any) -> int:
    """The low 8 address bits of ``out`` (0 without one, or for something that is
    not an array of ``backend``: check_out reports that)."""
    if out is None or not isinstance(out, backend.array_type):
        return 0
    return backend.pointer(out) & 255


def call_key(backend: Any, device: int, data: Any, data_ptr: int, indices: Any, out_low: int,
             params: tuple = ()) -> tuple:
    """The plan-cache key of a call on validated arrays.

    ``data_ptr`` is data's address, ``out_low`` :func:`out_bits` of ``out``,
    ``params`` the op's parameters that are not fixed per runtime (axis, mode,
    fill token ...).  Ops with a cached fast path build this very tuple
    inline; :func:`geometry_of_key` reads it back, so keep the three in step.
    """
    return (backend, device, data.shape, data.strides, data.dtype, data_ptr & 255,
            indices.shape, indices.strides, indices.dtype, out_low) + params


def geometry_of_key(op: str, key: tuple, axis: int, mode: str, fill: object = None,
                    extra: tuple = ()) -> Geometry:
    """The :class:`Geometry` of a :func:`call_key` (``axis`` normalised)."""
    backend, device, shape, strides, dtype, low, ishape, _, idtype, out_low = key[:10]
    return Geometry(op, backend, device, tuple(shape), tuple(strides), dtype, tuple(ishape),
                    idtype, alignment(low), alignment(out_low), axis, mode, fill, extra)


def with_data(key: tuple, data: Any, data_ptr: int) -> tuple:
    """``key`` with ``data`` (a copy of the original, at ``data_ptr``) in its place."""
    return key[:2] + (data.shape, data.strides, data.dtype, data_ptr & 255) + key[6:]


def fill_token(fill_value: Any) -> object:
    """A hashable stand-in for ``fill_value`` made of its bytes (``-0.0`` is not
    ``0.0``, ``1`` is not ``True``'s numpy bool), or None when unhashable."""
    t = type(fill_value)
    if t is int:
        return fill_value
    if t is float:
        return struct.pack("<d", fill_value)
    if t is complex:
        return struct.pack("<dd", fill_value.real, fill_value.imag)
    try:
        value = numpy.asarray(fill_value)
        return (t.__name__, value.dtype.str, value.shape, value.tobytes())
    except Exception:  # the op's checks report what is wrong with it
        return None
