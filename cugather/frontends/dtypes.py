"""Dtypes of the front doors: one NumPy dtype per source dtype, and fill bytes.

A gather moves bytes, so the planner needs only an item size; but the plan
cache keys on the dtype (a fill value's bytes depend on it), so two source
dtypes of one size must never share a NumPy dtype.  torch's and JAX's
bfloat16 and float8 types map to ml_dtypes' NumPy dtypes (JAX's own dtypes
for them); a dtype ml_dtypes lacks, or any dtype where ml_dtypes is not
installed, maps to a one-field structured dtype named after it
(``[("float4_e2m1fn_x2", "u1")]``): the right size, distinct by name.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple

import numpy

from .. import validate

__all__ = ["numpy_dtype", "is_native", "unsigned_like", "float_fill_bytes", "ml_fill_bytes",
           "TORCH_NUMPY"]

#: torch dtype name -> NumPy dtype name, for the dtypes NumPy itself has.
TORCH_NUMPY = {
    "bool": "bool", "uint8": "uint8", "int8": "int8", "int16": "int16", "int32": "int32",
    "int64": "int64", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
    "float16": "float16", "float32": "float32", "float64": "float64",
    "complex64": "complex64", "complex128": "complex128",
}

#: torch dtypes of other libraries' design: ml_dtypes name when it has one.
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
              "float8_e8m0fnu")

_cache: Dict[Tuple[str, int], numpy.dtype[Any]] = {}


def _ml_dtypes() -> Optional[Any]:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


def numpy_dtype(name: str, itemsize: int) -> numpy.dtype[Any]:
    """The NumPy dtype standing for a source dtype called ``name`` of ``itemsize`` bytes.

    ``name`` without a library prefix (``"float8_e4m3fn"``, not
    ``"torch.float8_e4m3fn"``).
    """
    key = (name, itemsize)
    dt = _cache.get(key)
    if dt is None:
        dt = _cache[key] = _lookup(name, itemsize)
    return dt


def _lookup(name: str, itemsize: int) -> numpy.dtype[Any]:
    if name in TORCH_NUMPY:
        dt = numpy.dtype(TORCH_NUMPY[name])
    else:
        ml = _ml_dtypes() if name in _ML_DTYPES else None
        found = getattr(ml, name, None) if ml is not None else None
        dt = numpy.dtype(found) if found is not None else numpy.dtype([(name, f"V{itemsize}")])
    if dt.itemsize != itemsize:
        raise TypeError(f"dtype {name} has {itemsize}-byte items, but {dt} has {dt.itemsize}")
    return dt


def is_native(dtype: numpy.dtype[Any]) -> bool:
    """Whether ``dtype`` is one of NumPy's own (CuPy can hold it), not ml_dtypes' or a
    stand-in."""
    return dtype.kind in "biufc" and type(dtype).__module__.startswith("numpy")


def unsigned_like(dtype: numpy.dtype[Any]) -> numpy.dtype[Any]:
    """The unsigned integer dtype of ``dtype``'s item size (how CuPy holds its bytes)."""
    if dtype.itemsize not in (1, 2, 4, 8):
        raise TypeError(f"dtype {dtype} has {dtype.itemsize}-byte items; only 1-, 2-, 4- and "
                        f"8-byte dtypes outside NumPy's own can be gathered")
    return numpy.dtype(f"u{dtype.itemsize}")


def float_fill_bytes(fill_value: object, name: str, lo: float, hi: float,
                     convert: Callable[[float], Tuple[bytes, float]]) -> bytes:
    """One element's bytes for a floating dtype NumPy lacks (bfloat16, float8...).

    ``convert(x)`` gives the bytes of ``x`` in the dtype and the value they
    hold back as a float; ``[lo, hi]`` is the dtype's finite range.  Errors
    as :func:`cugather.validate.fill_bytes` names them: a complex value with
    an imaginary part is a TypeError, a value outside the range (float8
    types saturate or turn it to NaN), infinity where the dtype has none,
    and NaN where it has none, are ValueErrors.
    """
    value = validate.check_fill(fill_value)
    if value.dtype.kind == "c":
        if value.imag != 0:
            raise TypeError(f"fill_value {fill_value!r} is complex; data has dtype {name}")
        value = value.real
    x = float(value)
    data, back = convert(x)
    if math.isnan(x):
        if not math.isnan(back):
            raise ValueError(f"fill_value {fill_value!r} is NaN, which dtype {name} cannot hold")
    elif math.isinf(x):
        if back != x:
            raise ValueError(f"fill_value {fill_value!r} is out of range for dtype {name} "
                             f"[{lo}, {hi}], which has no infinity")
    elif not (lo <= x <= hi) or not math.isfinite(back):
        raise ValueError(f"fill_value {fill_value!r} is out of range for dtype {name} "
                         f"[{lo}, {hi}]")
    return data


def ml_fill_bytes(fill_value: object, dtype: numpy.dtype[Any]) -> bytes:
    """The bytes of ``fill_value`` as one element of an ml_dtypes floating dtype
    (JAX's bfloat16 and float8 types), converted by ml_dtypes."""
    ml = _ml_dtypes()
    try:
        info = ml.finfo(dtype) if ml is not None else None
    except (ValueError, TypeError, KeyError):
        info = None
    if info is None:
        raise TypeError(f"fill_value cannot be written as dtype {dtype}: only NumPy's dtypes "
                        f"and ml_dtypes' floating types take a fill value")

    def convert(x: float) -> Tuple[bytes, float]:
        with numpy.errstate(over="ignore", invalid="ignore"):
            a = numpy.array(x).astype(dtype)
            return a.tobytes(), float(a.astype(numpy.float64))

    return float_fill_bytes(fill_value, dtype.name, float(info.min), float(info.max), convert)
