"""GPU tier: cugather.gather / take / GatherOp against numpy.take on a real device."""

import math
import zlib

import numpy as np
import pytest

import cugather
from cugather.ops import gather as gather_op
from cugather.plan import tuning
from cugather.plan.gather import BCAST_KINDS
from support.reference import (DTYPES, INDEX_DTYPES, MODES, assert_same, gather_ref, random_data,
                               random_indices)

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")
AxisError = getattr(getattr(np, "exceptions", np), "AxisError")

SHAPES = [(7,), (5, 6), (3, 4, 5), (2, 3, 4, 3)]
CASES = [(shape, axis) for shape in SHAPES for axis in range(len(shape))]


def _case(rng, shape, axis, dtype, index_dtype, mode, idx_shape=(2, 3)):
    data = random_data(rng, shape, dtype)
    idx = random_indices(rng, idx_shape, shape[axis], index_dtype, out_of_range=mode != "raise")
    return data, idx


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,axis", CASES)
def test_gather_matches_numpy(dtype, index_dtype, mode, shape, axis):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, index_dtype, mode, shape, axis)).encode()))
    data, idx = _case(rng, shape, axis, dtype, index_dtype, mode)
    got = cugather.gather(cp.asarray(data), cp.asarray(idx), axis, mode=mode, fill_value=1)
    ctx = f"dtype={dtype} idx={index_dtype} mode={mode} shape={shape} axis={axis} indices={idx.tolist()}"
    assert_same(got.get(), gather_ref(data, idx, axis, mode, fill_value=1), ctx)


@pytest.mark.parametrize("mode", ["raise", "wrap", "clip"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take_matches_numpy(mode, axis):
    rng = np.random.default_rng(3)
    a = random_data(rng, (4, 5, 6), "float32")
    n = a.size if axis is None else a.shape[axis]
    idx = rng.integers(-n if mode == "raise" else -3 * n, n if mode == "raise" else 3 * n, size=(3, 2))
    got = cugather.take(cp.asarray(a), cp.asarray(idx), axis=axis, mode=mode)
    assert_same(got.get(), np.take(a, idx, axis=axis, mode=mode), f"axis={axis} mode={mode}")


@pytest.mark.parametrize("kind", ["rows", "chunks", "chunks16", "scalar", "inner", "slab", "slabw",
                                  "flat", "slabf", "flatv", "weave", "slabr", "lean", "strided"])
@pytest.mark.parametrize("math_name", ["fast32", "fast64"])
@pytest.mark.parametrize("mode", MODES)
def test_forced_variants(kind, math_name, mode):
    """Every variant computes the same function when forced on one shape
    (through the library's own bind and launch path, cugather.runtime.run_plan)."""
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    rng = np.random.default_rng(4)
    staged = kind in ("inner", "slab", "slabw")
    # chunks16: 4-byte units (rows of 1001 float32), 16 per thread
    # weave: rows of 3 units under 16 bytes
    cols = (1 if kind in ("scalar", "flatv") or staged else 1001 if kind == "chunks16"
            else 3 if kind == "weave" else 6)
    # slabw: 301 picks start the 9 outer rows at every phase of its 8-byte words;
    # slabf: rows of 3 units, 9 outer rows, chunks that straddle outer rows;
    # slabr: the same rows, 300 picks from each of 9 outer rows cross its tiles
    data = (random_data(rng, (9, 50), "float32") if staged
            else random_data(rng, (9, 50, 3), "float32") if kind in ("slabf", "slabr")
            else random_data(rng, (50, cols), "float32"))
    axis = 1 if staged or kind in ("slabf", "slabr") else 0
    idx = random_indices(rng, (301 if kind == "slabw" else 300,), data.shape[axis], "int64",
                         out_of_range=mode != "raise")
    op = cugather.GatherOp(axis, mode=mode, fill_value=-2)
    plan = op.plan(data, idx, kind=kind, math_name=math_name, max_grid=3)
    assert plan.key.kind == kind and plan.key.math == math_name
    fill = fill_bytes(-2, data.dtype) if mode == "fill" else None
    got = run_plan(plan, cp.asarray(data), cp.asarray(idx), fill=fill)
    assert_same(got.get(), gather_ref(data, idx, axis, mode, -2), f"{plan.key}")


@pytest.mark.parametrize("order", [0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_slabr_orders(order, mode, monkeypatch):
    """slabr in both orders (tuning.SLABR_ORDER_PICKS and SLABR_ORDER_INDEX_BYTES moved so that each runs):
    3-byte rows of outer rows not back to back, 150 picks each (every outer row
    at another place in a 16-byte chunk); rows of three 2-byte units, 1300 picks;
    16 outer rows of 3-byte rows from a table one byte past an aligned address,
    60000 int32 picks; against numpy.take, through the library's bind and launch."""
    from cugather.plan import tuning
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    monkeypatch.setattr(tuning, "SLABR_ORDER_PICKS", 1 if order else 1 << 40)
    monkeypatch.setattr(tuning, "SLABR_ORDER_INDEX_BYTES", 0 if order else 1 << 62)
    rng = np.random.default_rng(11 + order)
    for shape, dtype, axis, picks, index_dtype in (((1200, 23, 3), "uint8", 1, 150, "int64"),
                                                  ((700, 50, 3), "int16", 1, 1300, "int64"),
                                                  ((4, 4, 337, 3), "int8", 2, 60000, "int32")):
        whole = random_data(rng, (shape[0] * 2,) + shape[1:], dtype) if picks == 150 else None
        data = whole[::2] if whole is not None else random_data(rng, shape, dtype)
        dev = cp.asarray(whole)[::2] if whole is not None else cp.asarray(data)
        if shape[0] == 4:  # one byte past an aligned address
            raw = cp.zeros(data.nbytes + 16, cp.uint8)
            dev = raw[1:1 + data.nbytes].view(dtype).reshape(shape)
            dev[...] = cp.asarray(data)
        idx = random_indices(rng, (picks,), shape[axis], index_dtype, out_of_range=mode != "raise")
        op = cugather.GatherOp(axis, mode=mode, fill_value=3)
        plan = op.plan(dev, idx, kind="slabr")
        assert plan.key.kind == "slabr" and plan.fields["group"] >= 2, plan.describe()
        assert plan.fields["stage_unit"] == order, plan.describe()
        fill = fill_bytes(3, data.dtype) if mode == "fill" else None
        got = run_plan(plan, dev, cp.asarray(idx), fill=fill)
        assert_same(got.get(), gather_ref(data, idx, axis, mode, 3), f"{shape} {plan.key}")


@pytest.mark.parametrize("kind", ["rows", "chunks", "chunks16", "scalar", "inner", "slab", "slabw",
                                  "window", "pack", "weave", "slabr", "flat", "slabf", "flatv",
                                  "lean", "span", "strided"])
@pytest.mark.parametrize("mode", ["fill", "raise"])
def test_empty_axis_reads_no_data(kind, mode):
    """An axis of size 0, each kind forced: fill mode fills every output unit, raise
    mode names index 0, and no kernel reads the table (it has no bytes)."""
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    for shape, axis, dtype in (((3, 0, 5), 1, "float32"), ((0, 7), 0, "uint8"),
                               ((4, 0), 1, "int16")):
        data = np.zeros(shape, dtype)
        idx = np.array([0, -1, 2, 5], np.int64)
        op = cugather.GatherOp(axis, mode=mode, fill_value=3)
        try:
            plan = op.plan(data, idx, kind=kind)
        except ValueError:
            continue  # the kind does not apply to these rows
        fill = fill_bytes(3, data.dtype) if mode == "fill" else None
        if mode == "raise":
            with pytest.raises(IndexError, match="index 0 is out of bounds"):
                run_plan(plan, cp.asarray(data), cp.asarray(idx))
            continue
        got = run_plan(plan, cp.asarray(data), cp.asarray(idx), fill=fill)
        assert_same(got.get(), gather_ref(data, idx, axis, "fill", 3), f"{plan.key}")


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize("mode", MODES)
def test_flatv_aligned_and_misaligned_indices(index_dtype, dtype, mode):
    """flatv's vector index loads from an aligned index array, and its one-by-one
    loads from the same indices one element past it (a GPU faults on a misaligned
    vector load), with outer slices, on a grid that loops."""
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    rng = np.random.default_rng(zlib.crc32(f"{index_dtype}/{dtype}/{mode}".encode()))
    data = random_data(rng, (7, 301), dtype)
    wide = random_indices(rng, (40_001,), 301, index_dtype, out_of_range=mode != "raise")
    base = cp.asarray(wide)
    fill = fill_bytes(3, data.dtype) if mode == "fill" else None
    for idx in (base[:40_000], base[1:]):
        plan = cugather.GatherOp(1, mode=mode, fill_value=3).plan(data, idx, kind="flatv",
                                                                   max_grid=64)
        got = run_plan(plan, cp.asarray(data), idx, fill=fill)
        assert_same(got.get(), gather_ref(data, idx.get(), 1, mode, 3), str(plan.key))


@pytest.mark.parametrize("dtype", ["bool", "int16", "float32", "complex64", "complex128"])
@pytest.mark.parametrize("api,mode", [("gather", "wrap"), ("gather", "clip"), ("take", "wrap"),
                                      ("take", "clip"), ("gather", "fill"), ("gather", "raise")])
def test_axis_of_length_one(dtype, api, mode):
    """An axis of length 1: wrap and clip mode take the bcast kernel (every index is
    0, none is read) over several blocks and rows of 1 to 9 units; fill and raise
    mode still read every index."""
    rng = np.random.default_rng(11)
    for shape, axis, idx_shape in (((300, 1, 9), 1, (2, 700)), ((1, 5), 0, (40_000,)),
                                   ((7, 1), 1, (3,)), ((1,), 0, (100_001,))):
        data = random_data(rng, shape, dtype)
        idx = rng.integers(-4, 4, size=idx_shape)
        if mode == "raise":
            idx = np.clip(idx, -1, 0)
        d, i = cp.asarray(data), cp.asarray(idx)
        if api == "take":
            got = cugather.take(d, i, axis=axis, mode=mode)
            want = np.take(data, idx, axis=axis, mode=mode)
        else:
            got = cugather.gather(d, i, axis, mode=mode, fill_value=1)
            want = gather_ref(data, idx, axis, mode, 1)
        assert_same(got.get(), want, f"{shape} axis {axis} {api} {mode}")
        plan = (cugather.GatherOp(axis, mode=mode) if api == "gather"
                else gather_op.take_op(axis, mode)).plan(d, i)
        assert (plan.key.kind in BCAST_KINDS) == (mode in ("wrap", "clip")), str(plan.key)
    if mode == "raise":
        with pytest.raises(IndexError, match="index 1 is out of bounds"):
            cugather.gather(cp.zeros((4, 1), dtype), cp.asarray([0, -1, 1, 0]), 1)


@pytest.mark.parametrize("row_bytes", [16, 23, 37, 257, 4619, 24673])
@pytest.mark.parametrize("mode", ["wrap", "clip"])
def test_bcastw_rows(row_bytes, mode):
    """bcastw and bcast against numpy.take: an axis of length 1, rows of 16 bytes
    or more from tables at several offsets from a 16-byte boundary, one outer
    slice and several, index counts large enough for many blocks; the planner's
    choice between the two follows tuning.BCASTW_MIN_ROW and BCASTW_MIN_OUT."""
    from cugather.runtime import run_plan
    rng = np.random.default_rng(row_bytes + len(mode))
    for shift in range(0, 16, 3):
        for shape, axis in (((1, row_bytes), 0), ((5, 1, row_bytes), 1)):
            host = rng.integers(0, 256, shape, dtype=np.uint8)
            raw = cp.zeros(host.size + 32, cp.uint8)
            data = raw[shift:shift + host.size].reshape(shape)
            data[...] = cp.asarray(host)
            n = int(rng.integers(1, 3_000_000 // row_bytes + 2))
            idx = cp.asarray(rng.integers(-50, 50, size=n))
            want = gather_ref(host, idx.get(), axis, mode)
            op = cugather.GatherOp(axis, mode=mode)
            plan = op.plan(data, idx)
            least = tuning.BCASTW_MIN_ROW.get(math.gcd(row_bytes, shift or 16, 16), 1 << 62)
            wide = row_bytes >= least and want.nbytes > tuning.BCASTW_MIN_OUT
            assert plan.key.kind == ("bcastw" if wide else "bcast"), str(plan.key)
            assert_same(op(data, idx).get(), want, f"{shape} at offset {shift}, {n} picks")
            for kind in BCAST_KINDS:
                forced = op.plan(data, idx, kind=kind)
                assert_same(run_plan(forced, data, idx).get(), want, f"{kind} {shape} at {shift}")


def _shifted_rows(rng, n, row_bytes, shifts):
    """(shift, shape, axis, host, data) for tables of n random rows of ``row_bytes``
    bytes, on a leading axis and on the middle one of 3 outer slices, placed
    ``shift`` bytes past an allocation's start (every alignment the kernels meet)."""
    for shift in shifts:
        for shape, axis in (((n, row_bytes), 0), ((3, n, row_bytes), 1)):
            host = rng.integers(0, 256, shape, dtype=np.uint8)
            raw = cp.zeros(host.size + 32, cp.uint8)
            data = raw[shift:shift + host.size].reshape(shape)
            data[...] = cp.asarray(host)
            yield shift, shape, axis, host, data


@pytest.mark.parametrize("row_bytes", range(3, 16))
@pytest.mark.parametrize("mode", ["wrap", "fill", "raise"])
def test_pack_rows_of_every_length_and_offset(row_bytes, mode):
    """The pack kernel on rows of 3 to 15 bytes at every offset from a 16-byte
    boundary, from a leading and a middle axis, over several blocks."""
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    rng = np.random.default_rng(row_bytes)
    n = 1000
    for shift, shape, axis, host, data in _shifted_rows(rng, n, row_bytes, (0, 1, 5, 8, 15)):
        idx = random_indices(rng, (5000,), n, "int32", out_of_range=mode != "raise")
        plan = cugather.GatherOp(axis, mode=mode, fill_value=0xA5).plan(data, idx, kind="pack")
        assert plan.key.kind == "pack"
        fill = fill_bytes(0xA5, data.dtype) if mode == "fill" else None
        got = run_plan(plan, data, cp.asarray(idx), fill=fill)
        want = gather_ref(host, idx, axis, mode, 0xA5)
        assert_same(got.get(), want, f"rows of {row_bytes} B at offset {shift}, {shape}")


@pytest.mark.parametrize("row_bytes", range(3, 16))
@pytest.mark.parametrize("mode", ["wrap", "fill", "raise"])
def test_weave_rows_of_every_length_and_offset(row_bytes, mode):
    """The weave kernel on rows of 3 to 15 bytes at offsets from a 16-byte boundary
    that give 1-, 2- and 4-byte units, from a leading and a middle axis, int32
    and int64 indices, over many tiles and on a grid whose warps loop."""
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    rng = np.random.default_rng(row_bytes + 100 * len(mode))
    n = 1000
    for shift, shape, axis, host, data in _shifted_rows(rng, n, row_bytes, (0, 1, 2, 4, 8, 15)):
        for index_dtype, grid in (("int32", None), ("int64", 5)):
            idx = random_indices(rng, (int(rng.integers(3000, 9000)),), n, index_dtype,
                                 out_of_range=mode != "raise")
            op = cugather.GatherOp(axis, mode=mode, fill_value=0xA5)
            try:
                plan = op.plan(data, idx, kind="weave", max_grid=grid)
            except ValueError as e:  # rows of one unit (4 or 8 bytes at an aligned offset)
                assert row_bytes in (4, 8) and shift % row_bytes == 0, e
                continue
            assert plan.key.kind == "weave"
            fill = fill_bytes(0xA5, data.dtype) if mode == "fill" else None
            got = run_plan(plan, data, cp.asarray(idx), fill=fill)
            assert_same(got.get(), gather_ref(host, idx, axis, mode, 0xA5),
                        f"rows of {row_bytes} B at offset {shift}, {shape}, {index_dtype}")


@pytest.mark.parametrize("row_bytes", [256, 263, 1000, 4096, 4099, 16417, 40960])
@pytest.mark.parametrize("mode", ["wrap", "fill", "raise"])
def test_span_rows_of_every_offset(row_bytes, mode):
    """The span kernel on long rows at every offset from a 16-byte boundary, from a
    leading and a middle axis, with int32 and int64 indices, over many blocks (rows
    of more than 16 KB in several segments)."""
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    rng = np.random.default_rng(row_bytes + len(mode))
    n = 60
    for shift, shape, axis, host, data in _shifted_rows(rng, n, row_bytes, (0, 1, 4, 7, 8, 13)):
        for index_dtype in ("int32", "int64"):
            idx = random_indices(rng, (int(rng.integers(200, 900)),), n, index_dtype,
                                 out_of_range=mode != "raise")
            plan = cugather.GatherOp(axis, mode=mode, fill_value=0xA5).plan(data, idx, kind="span")
            assert plan.key.kind == "span"
            fill = fill_bytes(0xA5, data.dtype) if mode == "fill" else None
            got = run_plan(plan, data, cp.asarray(idx), fill=fill)
            assert_same(got.get(), gather_ref(host, idx, axis, mode, 0xA5),
                        f"rows of {row_bytes} B at offset {shift}, {shape}, {index_dtype}")


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize("mode", ["wrap", "fill", "raise"])
def test_flat_rows_of_every_length(dtype, mode):
    """The flat kernel on rows of 1 to 17 units of each width, from a leading and a
    middle axis, over many blocks with a partial last chunk."""
    from cugather.runtime import run_plan
    from cugather.validate import fill_bytes

    rng = np.random.default_rng(len(dtype) * 17 + len(mode))
    n, item = 700, np.dtype(dtype).itemsize
    for units in range(1, 18):
        if units * item % 16 == 0:
            continue
        for shape, axis in (((n, units), 0), ((3, n, units), 1)):
            host = random_data(rng, shape, dtype)
            idx = random_indices(rng, (int(rng.integers(3000, 9000)),), n, "int64",
                                 out_of_range=mode != "raise")
            data = cp.asarray(host)
            plan = cugather.GatherOp(axis, mode=mode, fill_value=3).plan(data, idx, kind="flat")
            assert plan.key.kind == "flat"
            fill = fill_bytes(3, host.dtype) if mode == "fill" else None
            got = run_plan(plan, data, cp.asarray(idx), fill=fill)
            assert_same(got.get(), gather_ref(host, idx, axis, mode, 3),
                        f"{units} units of {dtype}, {shape}, axis {axis}")


@pytest.mark.parametrize("view", ["slice", "transpose", "negative", "step", "offset1"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_strided_data(view, axis, mode):
    rng = np.random.default_rng(5)
    base = random_data(rng, (8, 9, 10), "float64")
    views = {
        "slice": lambda a: a[1:7, 2:8, 1:9],
        "transpose": lambda a: a.transpose(2, 0, 1),
        "negative": lambda a: a[::-1, :, ::-2],
        "step": lambda a: a[::2, 1::3, :],
        "offset1": lambda a: a[:, :, 1:],
    }
    host = views[view](base)
    dev = views[view](cp.asarray(base))
    idx = random_indices(rng, (4, 2), host.shape[axis], "int32", out_of_range=mode != "raise")
    got = cugather.gather(dev, cp.asarray(idx)[:, ::-1], axis, mode=mode)
    assert_same(got.get(), gather_ref(host, idx[:, ::-1], axis, mode), f"{view} axis={axis}")


def test_misaligned_bytes():
    """uint8 views at odd offsets force narrow units; results stay exact."""
    rng = np.random.default_rng(6)
    base = random_data(rng, (40, 33), "uint8")
    for off in range(4):
        host = base[:, off:off + 17]
        idx = random_indices(rng, (25,), 40, "int64")
        got = cugather.gather(cp.asarray(base)[:, off:off + 17], cp.asarray(idx), 0)
        assert_same(got.get(), np.take(host, np.where(idx < 0, idx + 40, idx), axis=0))


def test_misaligned_complex_fill():
    """A complex128 view at an 8-byte offset: the fill value keeps both halves."""
    host = (np.arange(11) + 1j).astype(np.complex128)
    raw = cp.zeros(16 * 11 + 8, dtype=cp.uint8)
    raw[8:] = cp.asarray(host.view(np.uint8))  # CuPy's own kernels need aligned complex
    data = raw[8:].view(cp.complex128)
    assert data.data.ptr % 16 == 8
    op = cugather.GatherOp(0, mode="fill", fill_value=3 - 4j)
    assert op.plan(data, [0]).key.unit == 8
    got = op(data, cp.asarray([0, 20, -1]))
    assert got.get().tolist() == [1j, 3 - 4j, 10 + 1j]
    wrap = cugather.gather(data, cp.asarray([1, -12]), mode="wrap")  # no copy: 8-byte units
    assert wrap.get().tolist() == [1 + 1j, 10 + 1j]
    # A misaligned out= in fill mode: narrow units, each element's fill stays whole.
    raw_out = cp.zeros(16 * 3 + 8, dtype=cp.uint8)
    out = raw_out[8:].view(cp.complex128)
    res = cugather.gather(cp.asarray(host), cp.asarray([2, 99, -1]), mode="fill",
                          fill_value=3 - 4j, out=out)
    assert res is out
    assert np.frombuffer(raw_out[8:].get().tobytes(), np.complex128).tolist() == [2 + 1j, 3 - 4j, 10 + 1j]


def test_scalar_and_empty_indices():
    rng = np.random.default_rng(7)
    data = random_data(rng, (6, 5), "int16")
    d = cp.asarray(data)
    assert_same(cugather.gather(d, 2, 1).get(), np.take(data, 2, axis=1))
    assert_same(cugather.gather(d, cp.asarray(-1), 0).get(), np.take(data, -1, axis=0))
    assert_same(cugather.gather(d, [], 0).get(), np.take(data, np.array([], int), axis=0))
    assert_same(cugather.gather(d, cp.zeros((2, 0), cp.int32), 1).get(),
                np.take(data, np.zeros((2, 0), int), axis=1))
    empty = cp.zeros((0, 5), cp.float32)
    assert cugather.gather(empty, cp.zeros((3, 0), cp.int64), 0).shape == (3, 0, 5)
    with pytest.raises(IndexError):
        cugather.gather(empty, [0], 0)
    assert cugather.gather(empty, [0, 5], 0, mode="fill", fill_value=2).get().shape == (2, 5)


def test_host_and_list_indices():
    data = cp.arange(10, dtype=cp.float32)
    assert cugather.gather(data, [1, -1, 3]).get().tolist() == [1, 9, 3]
    assert cugather.gather(data, np.array([[2]], np.uint16)).get().tolist() == [[2]]
    assert cugather.gather(data, (np.uint64(2**64 - 1),)).get().tolist() == [9]
    # Scalar indices that need converting stay scalars (the axis is dropped).
    two_d = cp.arange(12, dtype=cp.int8).reshape(3, 4)
    for scalar in (np.uint16(2), np.uint64(1), cp.asarray(2, dtype=cp.uint8)):
        got = cugather.take(two_d, scalar, axis=1, mode="wrap")
        assert got.shape == (3,) and got.get().tolist() == np.take(
            np.arange(12, dtype=np.int8).reshape(3, 4), int(scalar), axis=1).tolist()
    with pytest.raises(TypeError, match="integer"):
        cugather.gather(data, [1.5])


def test_raise_reports_first_bad_index_and_leaves_out_untouched():
    data = cp.arange(20, dtype=cp.int32).reshape(4, 5)
    idx = cp.asarray([[0, 1], [7, -9], [9, 2]])
    out = cp.full((3, 2, 5), 77, cp.int32)
    with pytest.raises(IndexError) as err:
        cugather.gather(data, idx, 0, out=out)
    msg = str(err.value)
    assert "index 7" in msg and "[1, 0]" in msg and "size 4" in msg and "[-4, 3]" in msg
    assert bool((out == 77).all())
    # The device is still usable and the same op works on good indices.
    assert cugather.gather(data, cp.asarray([3, -4]), 0).get().tolist() == [
        [15, 16, 17, 18, 19], [0, 1, 2, 3, 4]]


def test_out_argument():
    data = cp.arange(12, dtype=cp.float64).reshape(3, 4)
    out = cp.empty((3, 2), cp.float64)
    res = cugather.gather(data, [3, 0], 1, out=out)
    assert res is out and out.get().tolist() == [[3, 0], [7, 4], [11, 8]]
    with pytest.raises(ValueError, match="shape"):
        cugather.gather(data, [3, 0], 1, out=cp.empty((2, 3)))
    with pytest.raises(TypeError, match="dtype"):
        cugather.gather(data, [3, 0], 1, out=cp.empty((3, 2), cp.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        cugather.gather(data, [3, 0], 1, out=cp.empty((2, 3)).T)
    with pytest.raises(ValueError, match="overlaps"):
        cugather.gather(data, [0, 1, 2], 0, out=data)


def test_gather_op_caches_plans():
    op = cugather.GatherOp(axis=1, mode="wrap")
    data = cp.ones((4, 8), cp.float16)
    idx = cp.asarray([1, 2, 3], cp.int32)
    for _ in range(5):
        op(data, idx)
    info = op.cache_info()
    assert (info.hits, info.misses, info.currsize) == (4, 1, 1)
    op(cp.ones((4, 9), cp.float16), idx)
    assert op.cache_info().misses == 2
    op.cache_clear()
    assert op.cache_info() == (0, 0, info.maxsize, 0)


def test_stream_argument():
    s = cp.cuda.Stream(non_blocking=True)
    data = cp.arange(1000, dtype=cp.float32)
    idx = cp.asarray([5, 999, -1])
    with s:
        pass
    got = cugather.gather(data, idx, mode="wrap", stream=s)
    s.synchronize()
    assert got.get().tolist() == [5, 999, 999]


def test_gather_past_2_31_elements():
    """Index math past 2^31: a large table and an output with > 2^31 rows."""
    free, _ = cp.cuda.runtime.memGetInfo()
    if free < 48 * 2**30:
        pytest.skip(f"needs 48 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    n = 3 * 2**30
    table = cp.zeros(n, dtype=cp.int8)
    picks = [0, 2**31 + 5, n - 1, 2**31 - 1]
    table[cp.asarray(picks)] = cp.asarray([1, 2, 3, 4], cp.int8)
    got = cugather.gather(table, cp.asarray(picks + [-1, -(2**31)]), mode="raise")
    assert got.get().tolist() == [1, 2, 3, 4, 3, int(table[n - 2**31].get())]
    del table
    # An output of 2^31 + 16 elements: rows counted in 64-bit math.
    small = cp.arange(10, dtype=cp.int8)
    idx = (cp.arange(2**31 + 16, dtype=cp.int64) % 10).astype(cp.int32)
    op = cugather.GatherOp(0, mode="wrap")
    assert op.plan(small, idx).key.math == "fast64"
    out = op(small, idx)
    assert out.size == 2**31 + 16
    assert bool((out[-16:] == idx[-16:].astype(cp.int8)).all())
    assert bool((out[:4096] == idx[:4096].astype(cp.int8)).all())
    assert int(out[2**31 + 3].get()) == (2**31 + 3) % 10


def test_negative_zero_fill_after_positive_zero():
    """gather(..., fill_value=-0.0) after a call with 0.0 must write -0.0."""
    data = cp.arange(12, dtype=cp.float32).reshape(3, 4)
    idx = cp.asarray([0, 7])
    for fill in (0.0, -0.0, 0.0, -0.0):
        got = cugather.gather(data, idx, 0, mode="fill", fill_value=fill).get()
        assert np.signbit(got[1]).all() == np.signbit(fill), (fill, got)
        got = cugather.gather_elements(data, cp.asarray([[5, 0, 1, 2]]), 0, mode="fill",
                                       fill_value=fill).get()
        assert np.signbit(got[0, 0]) == np.signbit(fill), (fill, got)


@pytest.mark.parametrize("axis", [0, -1])
def test_take_of_a_0d_array_is_numpys(axis):
    a = cp.asarray(5.0)
    got = cugather.take(a, 0, axis=axis)
    assert got.shape == () and float(got) == 5.0
    assert cugather.take(a, cp.asarray([0, 0]), axis=axis).get().tolist() == [5.0, 5.0]
    with pytest.raises(IndexError, match="index 1 is out of bounds for axis 0 with size 1"):
        cugather.take(a, 1, axis=axis)
    assert float(cugather.take(a, 3, axis=axis, mode="wrap")) == 5.0


def test_take_errors_name_a():
    with pytest.raises(TypeError, match=r"^a must be a cupy.ndarray"):
        cugather.take([1, 2, 3], [0], axis=0)
    with pytest.raises(AxisError):
        cugather.take(cp.asarray(5.0), 0, axis=1)
