"""Pure tier for gather_elements / take_along_axis / gather_nd: shape rules,
plan choices (dimension merging, units, index math, grids), and a Python
emulation of the kernels' addressing -- the device's fast_divmod formula on
the plan's fields -- checked against NumPy references."""

import math
import zlib

import numpy as np
import pytest

import cugather
from cugather.plan.core import Operand, alignment as alignment_of, merge_dims
from cugather.plan.elements import along_axis_shape, elements_shape, plan_elements
from cugather.plan.fastdiv import fast_div
from cugather.plan.keys import KernelKey, all_kernel_keys
from cugather.plan.nd import nd_shape, plan_nd
from support.reference_elements_nd import elements_ref, nd_ref

AxisError = getattr(getattr(np, "exceptions", np), "AxisError")


def op(shape, dtype="float32", strides=None, align=256):
    itemsize = np.dtype(dtype).itemsize
    if strides is None:
        return Operand.contiguous(tuple(shape), itemsize, align)
    return Operand(tuple(shape), tuple(strides), itemsize, align)


# ---------------------------------------------------------------- shape rules
def test_elements_shape_rules():
    assert elements_shape((3, 4), (5, 2), 0) == (5, 2)
    assert elements_shape((3, 4), (2, 9), 1) == (2, 9)
    with pytest.raises(ValueError, match=r"rank of data \(2\)"):
        elements_shape((3, 4), (3,), 0)
    with pytest.raises(ValueError, match=r"on dimension 1 \(5 > 4\)"):
        elements_shape((3, 4), (2, 5), 0)


def test_along_axis_shape_broadcasts_like_numpy():
    for arr, idx, axis in [((3, 4, 5), (3, 2, 1), 1), ((1, 4), (6, 2), 1), ((3, 1), (1, 7), 0),
                           ((0, 3), (1, 2), 1), ((2, 3), (2, 0), 1)]:
        ref = np.take_along_axis(np.zeros(arr), np.zeros(idx, dtype=np.int64), axis).shape
        assert along_axis_shape(arr, idx, axis) == ref
    with pytest.raises(IndexError, match="shape mismatch"):
        along_axis_shape((3, 4), (2, 1), 1)
    with pytest.raises(ValueError, match="same number of dimensions"):
        along_axis_shape((3, 4), (2,), 0)


@pytest.mark.parametrize("data,idx,b,match", [
    ((), (1,), 0, "at least one dimension"),
    ((3,), (), 0, "indices must have at least one"),
    ((3, 4), (3, 1), 2, r"batch_dims must be in .* = \[0, 1\], got 2"),
    ((3, 4), (3, 1), -1, "batch_dims must be in"),
    ((3, 4), (2, 1), 1, "must be equal"),
    ((3, 4), (2, 3), 0, r"= \[1, 2\], got 3"),
    ((3, 4), (3, 2), 1, r"= \[1, 1\], got 2"),
    ((3, 4), (5, 0), 0, "got 0"),
    ((2,) * 10, (1, 9), 0, "exceed the supported 8"),
])
def test_nd_shape_errors(data, idx, b, match):
    with pytest.raises(ValueError, match=match):
        nd_shape(data, idx, b)


def test_nd_shape():
    assert nd_shape((2, 3, 4), (5, 2), 0) == (5, 4)
    assert nd_shape((2, 3, 4), (2, 7, 1), 1) == (2, 7, 4)
    assert nd_shape((2, 3, 4), (2, 3, 1), 2) == (2, 3)


def test_merge_dims():
    assert merge_dims([(3, 20, 0), (5, 4, 0), (4, 1, 0)]) == [(60, 1, 0)]
    assert merge_dims([(3, 40, 5), (5, 0, 1), (4, 1, 0)]) == [(3, 40, 5), (5, 0, 1), (4, 1, 0)]
    assert merge_dims([(1, 7), (6, 4), (1, 99)]) == [(6, 4)]


# ---------------------------------------------------------------- plan choices
def test_gather_elements_last_axis_is_one_divmod():
    p = plan_elements(op((64, 1000)), (64, 300), "int64", 1, "wrap")
    assert p.fields["ndim"] == 2 and len(p.divisors()) == 1 and p.key.unit == 4
    assert p.divisors()["dims[0]"].d == 300 and p.key.math == "fast32"
    assert p.check_key is None


def test_gather_elements_first_axis_is_one_divmod():
    p = plan_elements(op((1000, 64)), (300, 64), "int32", 0, "raise")
    assert p.fields["ndim"] == 2 and p.divisors()["dims[0]"].d == 64
    assert p.check_key == KernelKey("check", 0, "int32", "fast64", "raise")
    assert p.check.fields == {"n": 300 * 64, "axis_len": 1000}


def test_gather_elements_column_tiles_when_a_warp_of_columns_sits_inside_the_axis():
    first = plan_elements(op((16384, 1024)), (4096, 1024), "int64", 0, "wrap")
    assert first.fields["cols"] == 1024 and first.fields["col_tiles"] == 1024 // 32
    assert first.fields["row_tiles"] == 4096 // 16  # 8 warps x 2 slots per tile
    assert first.grid == (32 * 256, 1, 1) and "column tiles" in first.reason
    # Columns stop at the gathered axis and at a broadcast data dimension.
    mid = plan_elements(op((6, 50, 40)), (6, 7, 40), "int32", 1, "clip")
    assert mid.fields["cols"] == 40 and mid.fields["row_tiles"] == -(-6 * 7 // 16)
    last = plan_elements(op((64, 1000)), (64, 300), "int64", 1, "wrap", kind="elements")
    narrow = plan_elements(op((1000, 31)), (300, 31), "int64", 0, "wrap")
    for p in (last, narrow):
        assert p.fields["col_tiles"] == 0 and "flat order" in p.reason, p.reason
    forced = plan_elements(op((64, 1000)), (64, 300), "int64", 1, "wrap", column_tiles=True)
    assert forced.fields["cols"] == 1 and forced.fields["row_tiles"] == 64 * 300 // 16


def test_gather_elements_stages_rows_where_the_picks_cover_them():
    """The last axis, contiguous, a row of at most 32 KB, at least one pick per 32
    bytes of row, 1024 picks (4 per thread) and rows for two blocks per SM:
    elements_row, one block per output row; fewer picks or rows, a row too long,
    or the axis not innermost: the elements kernel (the rules, no tuning table)."""
    row = plan_elements(op((300, 4000)), (300, 1100), "int64", 1, "wrap")
    assert row.key.kind == "elements_row" and row.shared_mem == 16000
    assert row.fields["cols"] == 1100 and row.fields["row_tiles"] == 300
    assert row.fields["stage_unit"] == 16 and row.grid == (300, 1, 1)
    few = plan_elements(op((300, 1000)), (300, 1000), "int64", 1, "wrap")   # < 1024 picks
    rows = plan_elements(op((263, 4000)), (263, 1100), "int64", 1, "wrap")  # < 2 per SM
    long = plan_elements(op((300, 9000)), (300, 9000), "int64", 1, "wrap")  # 36 KB row
    sparse = plan_elements(op((300, 12000)), (300, 1100), "int64", 1, "wrap")  # 47 KB, 1100 picks
    big = plan_elements(op((64, 13000)), (64, 13000), "int64", 1, "wrap")  # 52 KB row
    first = plan_elements(op((1000, 64)), (300, 64), "int64", 0, "wrap")
    assert [p.key.kind for p in (few, rows, long, sparse, big, first)] == ["elements"] * 6
    with pytest.raises(ValueError, match="data row of at most 49152 bytes"):
        plan_elements(op((64, 13000)), (64, 13000), "int64", 1, "wrap", kind="elements_row")
    with pytest.raises(ValueError, match="gathered axis innermost"):
        plan_elements(op((1000, 64)), (300, 64), "int64", 0, "wrap", kind="elements_row")
    odd = plan_elements(op((300, 1001)), (300, 1100), "int64", 1, "wrap")  # rows 4004 B apart
    assert odd.key.kind == "elements_row" and odd.fields["stage_unit"] == 4


def test_gather_elements_indices_smaller_than_data_keep_data_strides():
    p = plan_elements(op((10, 20, 30)), (4, 5, 6), "int64", 1, "clip")
    assert p.fields["ndim"] == 3
    assert p.fields["strides"][:3] == [4, 0, 20 * 30 * 4]
    assert p.fields["index_strides"][:3] == [1, 6, 30]
    assert p.fields["s_axis"] == 30 * 4


def test_take_along_axis_broadcast_rows_use_wide_units():
    p = plan_elements(op((8, 1000, 64)), (8, 50, 1), "int64", 1, "raise",
                      out_shape=(8, 50, 64))
    assert p.key.unit == 16 and p.fields["ndim"] == 3
    assert [d.d for d in p.fields["dims"][:3]] == [16, 50, 8]
    assert p.fields["index_strides"][:3] == [0, 1, 50]


def test_broadcast_data_dimension_has_stride_zero():
    p = plan_elements(op((1, 7)), (5, 3), "int64", 1, "wrap", out_shape=(5, 3))
    assert p.fields["ndim"] == 1  # data broadcast over rows: one flat dim, indices contiguous
    assert p.fields["strides"][0] == 0 and p.fields["index_strides"][0] == 1


def test_misaligned_data_narrows_the_unit():
    assert plan_elements(op((10, 10), "float64", align=4), (5, 10), "int64", 0, "wrap").key.unit == 4
    assert plan_nd(op((10, 8), "float32", align=8), (3, 1), "int64", 0, "wrap").key.unit == 8
    assert plan_nd(op((10, 8), "float32"), (3, 1), "int64", 0, "wrap", out_align=2).key.unit == 2


def test_math_switches_to_64_bit_at_2_to_the_31():
    small = plan_elements(op((2, 1 << 29)), (2, 1 << 29), "int64", 1, "wrap")
    big = plan_elements(op((4, 1 << 29)), (4, 1 << 29), "int64", 1, "wrap")
    assert small.key.math == "fast32" and big.key.math == "fast64"
    assert all(d.bits == 64 for d in big.fields["dims"])
    nd_small = plan_nd(op((1 << 20, 4)), ((1 << 31) - 1, 1), "int64", 0, "wrap")
    nd_big = plan_nd(op((1 << 20, 4)), (1 << 31, 1), "int64", 0, "wrap")
    assert nd_small.key.math == "fast32" and nd_big.key.math == "fast64"
    assert plan_nd(op((5, 4)), (3, 1), "int64", 0, "wrap", math_name="fast64").key.math == "fast64"


def test_nd_plan_rows_and_tiling():
    p = plan_nd(op((1000, 4, 256), "float16"), (4096, 2), "int64", 0, "wrap")
    assert (p.key.unit, p.fields["units"], p.fields["rows"]) == (16, 32, 4096)
    assert p.fields["ndim"] == 1 and p.divisors() == {} and p.fields["m"] == 2
    assert p.fields["comp_strides"][:2] == [4 * 256 * 2, 256 * 2]
    assert p.block == (32, 8, 1) and p.grid == (4096 // (8 * 2), 1, 1)  # 2 rows per thread
    big = plan_nd(op((100, 5000)), (7, 1), "int32", 0, "fill")
    assert big.fields["units"] == 1250 and big.fields["tile_cu"] == 4 and big.grid[1] >= 1
    assert big.block[0] * big.fields["tile_cu"] * big.grid[1] >= 1250


def test_nd_plan_batch_dims_and_strided_slices():
    # batch (4, 3) contiguous, J = 5, slice (6,) strided by 2 elements
    data = op((4, 3, 10, 6), "float32", strides=(3 * 10 * 12 * 4, 10 * 12 * 4, 12 * 4, 8))
    p = plan_nd(data, (4, 3, 5, 1), "int64", 2, "raise")
    dims = [d.d for d in p.fields["dims"][:p.fields["ndim"]]]
    assert dims == [6, 5, 12] and p.fields["tuple_dim"] == 1 and p.fields["units"] == 1
    assert p.fields["strides"][:3] == [8, 0, 10 * 12 * 4]
    assert p.check_key.kind == "check" and p.check.fields == {"n": 60, "axis_len": 10}


def test_too_many_dims_copy_strided_data_and_reject_contiguous():
    shape = (2,) * 9
    strided = op(shape, strides=tuple(8 * 4 ** (8 - d) for d in range(9)))
    assert plan_elements(strided, shape, "int64", 4, "wrap").copy_data
    with pytest.raises(ValueError, match="at most 8"):
        plan_elements(op((3,) * 9), shape, "int64", 4, "wrap")


def test_empty_outputs_and_empty_axes():
    p = plan_elements(op((3, 4)), (0, 4), "int64", 0, "raise")
    assert p.key is None and p.check_key is None and p.out_shape == (0, 4)
    with pytest.raises(IndexError, match="axis 0 of size 0"):
        plan_elements(op((0, 4)), (2, 4), "int64", 0, "clip")
    assert plan_elements(op((0, 4)), (2, 4), "int64", 0, "fill").key is not None
    assert plan_elements(op((0, 4)), (2, 4), "int64", 0, "raise").check_key is not None
    p = plan_nd(op((3, 0)), (2, 1), "int64", 0, "raise")
    assert p.key is None and p.check_key is not None  # indices are checked all the same


def test_index_error_message_names_axis_position_and_range():
    p = plan_nd(op((2, 3, 4)), (5, 2), "int64", 0, "raise")
    e = p.index_error(7, -9, (5, 2))
    assert str(e) == "index -9 is out of bounds for axis 1 with size 3 (at indices[3, 1]; " \
                     "valid range [-3, 2])"
    p = plan_elements(op((2, 3)), (2, 5), "int64", 1, "raise")
    assert "axis 1 with size 3 (at indices[1, 2]" in str(p.index_error(7, 3, (2, 5)))


def test_describe_lists_kernel_dims_and_check():
    text = plan_nd(op((10, 4, 6)), (3, 2), "int32", 0, "raise").describe()
    assert "cugather_nd_u8_i32_fast32_raise" in text and "check_nd" in text
    assert "nothing to launch" in plan_elements(op((3, 4)), (0, 4), "int64", 0, "wrap").describe()


def test_keys_registered():
    keys = [k for k in all_kernel_keys() if k.kind in ("elements", "nd", "check_nd")]
    assert len(keys) == 5 * 2 * 2 * 4 * 2 + 2
    assert KernelKey("check_nd", 0, "int64", "fast64", "raise").entry == "cugather_check_nd_i64"
    with pytest.raises(ValueError, match="mode"):
        KernelKey("nd", 4, "int64", "fast32", "clip_numpy")
    for name in ("gather_elements", "take_along_axis", "gather_nd"):
        assert name in cugather.__all__


# ---------------------------------------------------------------- emulation
def _resolve(i, s, mode):
    if mode == "raise":
        return (i + s if i < 0 else i), True
    if mode == "wrap":
        return i % s, True
    if mode == "clip":
        i = i + s if i < 0 else i
        return min(max(i, 0), s - 1), True
    i = i + s if i < 0 else i
    return i, 0 <= i < s


def _split(fields, n, math_name):
    """Coordinates of n, innermost first, as the device computes them."""
    coords = []
    for d in range(fields["ndim"]):
        if d < fields["ndim"] - 1:
            q = fast_div(n, fields["dims"][d])
            coords.append(n - q * fields["dims"][d].d)
            n = q
        else:
            coords.append(n)
    return coords


def _memory(data):
    """(buffer of bytes holding ``data``, byte offset of its first element)."""
    lo = sum((n - 1) * s for n, s in zip(data.shape, data.strides) if s < 0 and n)
    base = data.ctypes.data + lo
    size = sum((n - 1) * abs(s) for n, s in zip(data.shape, data.strides) if n) + data.itemsize
    buf = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * size).from_address(base))
    return buf, -lo


def emulate_elements(plan, data, indices, fill=b"\0"):
    f, unit = plan.fields, plan.key.unit
    buf, origin = _memory(data)
    flat = indices.reshape(-1)
    pattern = (fill * 16)[:16]
    out = bytearray()
    for t in range(f["total"]):
        coords = _split(f, t, plan.key.math)
        off = sum(c * s for c, s in zip(coords, f["strides"]))
        ipos = sum(c * s for c, s in zip(coords, f["index_strides"]))
        i, keep = _resolve(int(flat[ipos]), f["axis_len"], plan.key.mode)
        if keep:
            start = origin + off + i * f["s_axis"]
            out += buf[start:start + unit].tobytes()
        else:
            out += pattern[(t * unit) % 16:(t * unit) % 16 + unit]
    return np.frombuffer(bytes(out), data.dtype).reshape(plan.out_shape)


def emulate_nd(plan, data, indices, fill=b"\0"):
    f, unit = plan.fields, plan.key.unit
    buf, origin = _memory(data)
    flat = indices.reshape(-1)
    pattern = (fill * 16)[:16]
    out = bytearray()
    for row in range(f["rows"]):
        coords = _split(f, row, plan.key.math)
        off = sum(c * s for c, s in zip(coords, f["strides"]))
        tuple_pos = row
        for d in range(min(f["tuple_dim"], f["ndim"])):
            tuple_pos //= f["dims"][d].d
        keep = True
        for k in range(f["m"]):
            i, ok = _resolve(int(flat[tuple_pos * f["m"] + k]), f["bounds"][k], plan.key.mode)
            keep &= ok
            off += i * f["comp_strides"][k]
        for u in range(f["units"]):
            t = row * f["units"] + u
            if keep:
                start = origin + off + u * unit
                out += buf[start:start + unit].tobytes()
            else:
                out += pattern[(t * unit) % 16:(t * unit) % 16 + unit]
    return np.frombuffer(bytes(out), data.dtype).reshape(plan.out_shape)


def _strided(rng, arr, how):
    if how == "strided":
        big = np.zeros(tuple(2 * n for n in arr.shape), arr.dtype)
        view = big[tuple(slice(None, None, 2) for _ in arr.shape)]
    elif how == "reversed":
        big = np.zeros(arr.shape, arr.dtype)
        view = big[tuple(slice(None, None, -1) for _ in arr.shape)]
    else:
        return np.ascontiguousarray(arr)
    view[...] = arr
    return view


@pytest.mark.parametrize("seed", range(60))
def test_emulated_elements_match_numpy(seed):
    rng = np.random.default_rng(zlib.crc32(b"emu-el%d" % seed))
    r = int(rng.integers(1, 4))
    shape = tuple(int(n) for n in rng.integers(1, 5, size=r))
    axis = int(rng.integers(0, r))
    broadcast = seed % 3 == 0
    idx_shape = tuple(int(rng.integers(1, 5)) if d == axis else
                      (int(rng.choice([1, n])) if broadcast else int(rng.integers(1, n + 1)))
                      for d, n in enumerate(shape))
    dtype = ["int8", "float16", "float32", "complex128"][seed % 4]
    data = _strided(rng, rng.integers(-100, 100, size=shape).astype(dtype),
                    ["contiguous", "strided", "reversed"][seed % 3])
    mode = ["raise", "wrap", "clip", "fill"][seed % 4]
    n = shape[axis]
    idx = rng.integers(-n if mode == "raise" else -3 * n, n if mode == "raise" else 3 * n,
                       size=idx_shape)
    out_shape = along_axis_shape(shape, idx_shape, axis) if broadcast else idx_shape
    plan = plan_elements(Operand(data.shape, data.strides, data.itemsize,
                                 alignment_of(data.ctypes.data)), idx_shape, "int64", axis, mode,
                         out_shape=out_shape)
    fill = np.array(5, dtype).tobytes()
    got = emulate_elements(plan, data, idx, fill)
    ref = elements_ref(data, idx, axis, mode, fill_value=5, broadcast=broadcast)
    assert got.tobytes() == np.ascontiguousarray(ref).tobytes(), plan.describe()


@pytest.mark.parametrize("seed", range(60))
def test_emulated_nd_matches_numpy(seed):
    rng = np.random.default_rng(zlib.crc32(b"emu-nd%d" % seed))
    r = int(rng.integers(1, 5))
    shape = tuple(int(n) for n in rng.integers(1, 5, size=r))
    b = int(rng.integers(0, r))
    m = int(rng.integers(1, r - b + 1))
    idx_shape = shape[:b] + tuple(int(n) for n in rng.integers(1, 4, size=seed % 3)) + (m,)
    dtype = ["uint8", "int16", "float64", "complex64"][seed % 4]
    data = _strided(rng, rng.integers(-100, 100, size=shape).astype(dtype),
                    ["contiguous", "strided", "reversed"][seed % 3])
    mode = ["raise", "wrap", "clip", "fill"][seed % 4]
    bounds = np.array(shape[b:b + m])
    lo, hi = (-bounds, bounds) if mode == "raise" else (-3 * bounds, 3 * bounds)
    idx = rng.integers(lo, hi, size=idx_shape)
    plan = plan_nd(Operand(data.shape, data.strides, data.itemsize,
                           alignment_of(data.ctypes.data)), idx_shape, "int64", b, mode)
    fill = np.array(5, dtype).tobytes()
    got = emulate_nd(plan, data, idx, fill)
    ref = nd_ref(data, idx, b, mode, fill_value=5)
    assert got.tobytes() == np.ascontiguousarray(ref).tobytes(), plan.describe()
