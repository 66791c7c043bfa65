"""References for gather_block_quantized: NumPy, and onnxruntime's own CPU kernel.

:func:`quantized_ref` is written from onnxruntime's description, independently
of the library: unpack the table (two 4-bit values per byte, low nibble
first, along the last axis), subtract the zero point (unpacked the same way
along the quantize axis; ``2**(bits-1)`` without one), multiply by the
block's scale in float32, cast to the scales' dtype, then gather along axis
0 with the mode's index rule.  :func:`ort_run` runs a one-node
``com.microsoft.GatherBlockQuantized`` model on onnxruntime's CPU provider.
:func:`quantize` makes tables from float values; :data:`ORT_CASES` are
onnxruntime's own test cases (test/contrib_ops/gather_block_quantized_op_test.cc)
as data.
"""

from __future__ import annotations

import numpy as np

MODES = ("raise", "wrap", "clip", "fill")


def bfloat16():
    """ml_dtypes' bfloat16 NumPy dtype, or None where ml_dtypes is missing."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def out_dtype(name):
    return bfloat16() if name == "bfloat16" else np.dtype(name)


# ---------------------------------------------------------------- NumPy
def unpack(packed, bits, axis=-1):
    """uint8 -> int32 values along ``axis``: two per byte (low nibble first) for 4 bits."""
    packed = np.asarray(packed, dtype=np.uint8)
    if bits == 8:
        return packed.astype(np.int32)
    moved = np.moveaxis(packed, axis, -1)
    pairs = np.stack([moved & 0x0F, moved >> 4], axis=-1).astype(np.int32)
    return np.moveaxis(pairs.reshape(moved.shape[:-1] + (2 * moved.shape[-1],)), -1, axis)


def dequantize(data, scales, zero_points=None, *, quantize_axis=-1, block_size=128, bits=4):
    """The whole table dequantized, in the scales' dtype."""
    q = unpack(data, bits)
    axis = quantize_axis % q.ndim
    n = q.shape[axis]
    nb = -(-n // block_size)
    if zero_points is None:
        zp = np.full(scales.shape, 1 << (bits - 1), np.int32)
    else:
        zp = np.take(unpack(zero_points, bits, axis), np.arange(nb), axis=axis)
    block_of = np.arange(n) // block_size
    zp_full = np.take(zp, block_of, axis=axis)
    s_full = np.take(np.asarray(scales).astype(np.float32), block_of, axis=axis)
    values = (q - zp_full).astype(np.float32) * s_full
    return values.astype(scales.dtype)


def resolve(indices, n, mode):
    """(positions in [0, n), mask of the indices that take the fill value)."""
    idx = np.asarray(indices).astype(np.int64)
    bad = (idx < -n) | (idx >= n)
    if mode == "raise" and bad.any():
        pos = int(np.flatnonzero(bad.reshape(-1))[0])
        raise IndexError(f"index {int(idx.reshape(-1)[pos])} is out of bounds (position {pos})")
    if mode == "wrap":
        return np.mod(idx, n) if n else idx, np.zeros(idx.shape, bool)
    if mode == "clip":
        return np.clip(np.where(idx < 0, idx + n, idx), 0, max(n - 1, 0)), np.zeros(idx.shape, bool)
    return np.where(bad, 0, np.where(idx < 0, idx + n, idx)), bad


def quantized_ref(data, indices, scales, zero_points=None, *, quantize_axis=-1, block_size=128,
                  bits=4, mode="raise", fill_value=0):
    """gather_block_quantized's result, computed with NumPy."""
    table = dequantize(data, scales, zero_points, quantize_axis=quantize_axis,
                       block_size=block_size, bits=bits)
    n = table.shape[0]
    pos, fill = resolve(indices, n, mode)
    if table.size == 0 or pos.size == 0 or n == 0:
        return np.zeros(np.shape(indices) + table.shape[1:], table.dtype)
    out = np.take(table, pos, axis=0)
    if fill.any():
        out[fill] = np.asarray(fill_value).astype(np.float64).astype(table.dtype)
    return out


# ---------------------------------------------------------------- tables
def quantize(values, *, bits=4, block_size=128, with_zero_points=True, scale_dtype="float16",
             rng=None):
    """(data, scales, zero_points or None) of a random table of ``values.shape`` values
    along the last axis (the quantize axis); 4-bit tables pack pairs along it.

    ``values`` gives the shape only when ``rng`` is set: codes and scales are
    then random (every code, zero points anywhere in range).
    """
    shape = tuple(values.shape)
    rng = rng or np.random.default_rng(0)
    n = shape[-1]
    nb = -(-n // block_size)
    top = (1 << bits) - 1
    codes = rng.integers(0, top + 1, size=shape[:-1] + (n + (n % 2 if bits == 4 else 0),))
    scales = (rng.standard_normal(shape[:-1] + (nb,)) * 0.05).astype(out_dtype(scale_dtype))
    zps = rng.integers(0, top + 1, size=shape[:-1] + (nb,)) if with_zero_points else None
    return pack(codes, bits), scales, None if zps is None else pack(zps, bits)


def pack(codes, bits, axis=-1):
    """int codes -> uint8, two 4-bit codes per byte (low nibble first) along ``axis``."""
    codes = np.asarray(codes)
    if bits == 8:
        return codes.astype(np.uint8)
    moved = np.moveaxis(codes, axis, -1)
    if moved.shape[-1] % 2:
        moved = np.concatenate([moved, np.zeros(moved.shape[:-1] + (1,), moved.dtype)], -1)
    packed = (moved[..., 0::2] & 15) | ((moved[..., 1::2] & 15) << 4)
    return np.moveaxis(packed.astype(np.uint8), -1, axis)


# ---------------------------------------------------------------- onnxruntime
def ort_reason():
    """None where onnxruntime and onnx can run the operator, else why not."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        return f"onnxruntime is not importable ({e}): pip install -e '.[test]'"
    return None


_TYPES = {"uint8": 2, "float32": 1, "float16": 10, "bfloat16": 16, "int32": 6, "int64": 7}


def ort_model(*, index_dtype, scale_dtype, with_zero_points, gather_axis=0, quantize_axis=-1,
              block_size=128, bits=4):
    """Serialized one-node com.microsoft GatherBlockQuantized model."""
    from onnx import TensorProto, helper

    inputs = ["data", "indices", "scales"] + (["zero_points"] if with_zero_points else [])
    node = helper.make_node("GatherBlockQuantized", inputs, ["output"], domain="com.microsoft",
                            gather_axis=gather_axis, quantize_axis=quantize_axis,
                            block_size=block_size, bits=bits)
    types = {"data": "uint8", "indices": index_dtype, "scales": scale_dtype,
             "zero_points": "uint8"}
    graph = helper.make_graph(
        [node], "gbq", [helper.make_tensor_value_info(n, _TYPES[types[n]], None) for n in inputs],
        [helper.make_tensor_value_info("output", _TYPES[scale_dtype], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model.SerializeToString()


_sessions: dict = {}


def ort_run(data, indices, scales, zero_points=None, *, gather_axis=0, quantize_axis=-1,
            block_size=128, bits=4):
    """onnxruntime's CPU result for the same call (out-of-range indices give zeros)."""
    import onnxruntime as ort

    indices = np.asarray(indices)
    key = (indices.dtype.name, scales.dtype.name, zero_points is not None, gather_axis,
           quantize_axis, block_size, bits)
    sess = _sessions.get(key)
    if sess is None:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        model = ort_model(index_dtype=key[0], scale_dtype=key[1], with_zero_points=key[2],
                          gather_axis=gather_axis, quantize_axis=quantize_axis,
                          block_size=block_size, bits=bits)
        sess = _sessions[key] = ort.InferenceSession(model, opts,
                                                     providers=["CPUExecutionProvider"])
    feeds = {"data": np.ascontiguousarray(data), "indices": np.ascontiguousarray(indices),
             "scales": np.ascontiguousarray(scales)}
    if zero_points is not None:
        feeds["zero_points"] = np.ascontiguousarray(zero_points)
    return sess.run(None, feeds)[0]


# ---------------------------------------------------------------- comparisons
def ulp_distance(got, ref):
    """Largest distance in units in the last place between two float arrays of one dtype
    (sign-magnitude bit patterns mapped to a monotone integer line)."""
    got, ref = np.ascontiguousarray(got), np.ascontiguousarray(ref)
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, ref.dtype,
                                                               got.shape, ref.shape)
    if got.size == 0:
        return 0
    width = {2: np.int16, 4: np.int32}[got.dtype.itemsize]
    a, b = got.view(width).astype(np.int64), ref.view(width).astype(np.int64)
    top = 1 << (8 * got.dtype.itemsize - 1)
    a = np.where(a < 0, -(a + top), a)
    b = np.where(b < 0, -(b + top), b)
    return int(np.abs(a - b).max())


# ---------------------------------------------------------------- onnxruntime's cases
def _ort_pack4(values, shape):
    """onnxruntime's test helper for uint8 4-bit data: value + 8, pairs per row."""
    return pack(np.asarray(values).reshape(shape) + 8, 4)


def _case(name, data, shape, indices, scales, s_shape, zps, output, out_shape, bits,
          gather_axis=0, quantize_axis=2, block_size=16):
    data = np.asarray(data).reshape(shape)
    zp = None if zps is None else np.asarray(zps).reshape(s_shape)
    if bits == 4:
        packed, zp_packed = _ort_pack4(data, shape), None if zp is None else _ort_pack4(zp, s_shape)
    else:
        packed, zp_packed = (data + 128).astype(np.uint8), None if zp is None else (zp + 128).astype(np.uint8)
    return dict(name=name, data=packed, indices=np.asarray(indices), scales=np.asarray(
        scales, np.float32).reshape(s_shape), zero_points=zp_packed,
        output=np.asarray(output, np.float32).reshape(out_shape), bits=bits,
        gather_axis=gather_axis, quantize_axis=quantize_axis, block_size=block_size)


_D18 = [-8, -7, -6, -5, -8, -7, -6, -5, -8, -7, -6, -5, -8, -7, -6, -5, -8, 0,
        -4, -3, -2, -1, -4, -3, -2, -1, -4, -3, -2, -1, -4, -3, -2, -1, -4, 0,
        0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 0,
        4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 0,
        4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 0,
        -4, -3, -2, -1, -4, -3, -2, -1, -4, -3, -2, -1, -4, -3, -2, -1, -4, 0]
_S12 = [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 2.0, 2.0, 1.0, 1.0, 2.0, 1.0]
_Z12 = [-1, 1, 0, 0, 1, -1, 1, -1, 1, 0, -1, 1]
_O18 = [6, 8, 10, 12, 6, 8, 10, 12, 6, 8, 10, 12, 6, 8, 10, 12, 10, 2,
        3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 3, 4, 5, 6, 4, 0,
        -6, -4, -2, 0, -6, -4, -2, 0, -6, -4, -2, 0, -6, -4, -2, 0, -5, -1]
_D4 = [-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7, -4, -3, -2, -1]
_O4 = [8, 10, 12, 14, 4, 5, 6, 7, -8, -6, -4, -2]

#: onnxruntime's GatherAxis0WithZeroPoints_{4,8}Bits and GatherAxis0NoZeroPoints_{4,8}Bits
#: (uint8 data), each also with the negative axes (-3, -1) the test runs.
ORT_CASES = [
    _case(f"axis0_zero_points_{bits}bits{neg}", _D18, (2, 3, 18), [1], _S12, (2, 3, 2), _Z12,
          _O18, (1, 3, 18), bits, *((-3, -1) if neg else (0, 2)))
    for bits in (4, 8) for neg in ("", "_negative_axes")
] + [
    _case(f"axis0_no_zero_points_{bits}bits{neg}", _D4, (2, 3, 4), [1], [1.0, 2.0] * 3,
          (2, 3, 1), None, _O4, (1, 3, 4), bits, *((-3, -1) if neg else (0, 2)))
    for bits in (4, 8) for neg in ("", "_negative_axes")
]
for _c in ORT_CASES:  # the 4-bit tables of 4 values: data (2, 3, 2) packed, output 4 wide
    assert _c["data"].shape[-1] * (8 // _c["bits"]) == _c["output"].shape[-1], _c["name"]

#: onnxruntime's failure cases for uint8 data: (name, call overrides, error type, message part).
ORT_FAILURES = [
    ("gather_axis_1", dict(gather_axis=1), ValueError, "gather_axis must be 0"),
    ("block_size_17", dict(block_size=17), ValueError, "block_size must be a power of 2"),
    ("gather_axis_-4", dict(gather_axis=-4), ValueError, "gather_axis -4 is out of bounds"),
    ("quantize_axis_-4", dict(quantize_axis=-4), ValueError, "quantize_axis -4 is out of bounds"),
    ("scales_shape", dict(scales_shape=(2, 2, 1)), ValueError, "scales must have shape (2, 3, 1)"),
]


def quantized_shapes_of(data_shape, bits, block_size):
    """(scales shape, zero_points shape) of a table quantized along its last axis."""
    n = data_shape[-1] * (8 // bits)
    nb = -(-n // block_size)
    return tuple(data_shape[:-1]) + (nb,), tuple(data_shape[:-1]) + (
        (nb + 1) // 2 if bits == 4 else nb,)
