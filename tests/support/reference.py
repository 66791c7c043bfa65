"""Independent NumPy references for the gather family (no cugather code)."""

import numpy as np

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]
INDEX_DTYPES = ["int32", "int64"]
MODES = ["raise", "wrap", "clip", "fill"]


def random_data(rng, shape, dtype):
    """Random values of ``dtype`` covering its whole bit range."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raw = rng.integers(0, 256, size=tuple(shape) + (dtype.itemsize,), dtype=np.uint8)
    arr = raw.view(dtype).reshape(shape)
    if dtype.kind in "fc":  # keep NaN payloads out: compare by bytes anyway
        arr = rng.standard_normal(size=shape).astype(dtype)
        if dtype.kind == "c":
            arr = arr + 1j * rng.standard_normal(size=shape).astype(dtype)
    return np.ascontiguousarray(arr)


def random_indices(rng, shape, axis_len, dtype="int64", *, out_of_range=False):
    """Indices in [-n, n), plus some outside it when ``out_of_range``."""
    if axis_len == 0:
        lo, hi = -3, 3
    elif out_of_range:
        lo, hi = -3 * axis_len - 2, 3 * axis_len + 2
    else:
        lo, hi = -axis_len, axis_len
    return rng.integers(lo, hi, size=shape).astype(dtype)


def gather_ref(data, indices, axis, mode="raise", fill_value=0):
    """ONNX Gather with cugather's modes, from numpy.take alone."""
    data = np.asarray(data)
    idx = np.asarray(indices).astype(np.int64)
    axis = axis % data.ndim
    n = data.shape[axis]
    in_range = (idx >= -n) & (idx < n)
    if mode == "raise":
        if not in_range.all():
            raise IndexError("out of range")
        return np.take(data, np.where(idx < 0, idx + n, idx), axis=axis)
    if mode == "wrap":
        return np.take(data, idx, axis=axis, mode="wrap")
    if mode == "clip":
        return np.take(data, np.where(in_range & (idx < 0), idx + n, idx), axis=axis, mode="clip")
    if mode == "fill":
        safe = np.where(in_range, np.where(idx < 0, idx + n, idx), 0)
        out = np.take(data, safe, axis=axis) if n else np.zeros(
            data.shape[:axis] + idx.shape + data.shape[axis + 1:], data.dtype)
        mask = in_range.reshape((1,) * axis + idx.shape + (1,) * (data.ndim - axis - 1))
        return np.where(mask, out, np.asarray(fill_value).astype(data.dtype))
    raise ValueError(mode)


def assert_same(got, ref, context=""):
    """Bit-exact equality of shape, dtype and bytes, with a readable failure."""
    got = np.asarray(got)
    ref = np.asarray(ref)
    assert got.shape == ref.shape, f"shape {got.shape} != {ref.shape} {context}"
    assert got.dtype == ref.dtype, f"dtype {got.dtype} != {ref.dtype} {context}"
    if np.ascontiguousarray(got).tobytes() != np.ascontiguousarray(ref).tobytes():
        bad = np.argwhere(np.ascontiguousarray(got).view(np.uint8).reshape(got.shape + (-1,))
                          != np.ascontiguousarray(ref).view(np.uint8).reshape(ref.shape + (-1,)))
        first = tuple(bad[0][:-1]) if len(bad) else ()
        raise AssertionError(f"values differ {context}: {len(bad)} bytes, first at {first}: "
                             f"got {got[first]!r} expected {ref[first]!r}")
