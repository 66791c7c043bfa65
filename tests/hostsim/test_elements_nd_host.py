"""Host tier: the gather_elements / take_along_axis / gather_nd kernels, as
rendered for the GPU, compiled with the system C++ compiler and run through
the library's own runtime (tests/hostsim/runner.py: the ops' ``run`` with the
host backend, or ``run_plan`` for forced variants) against NumPy references
-- every kernel key, random shapes and views, all modes, out-of-range and
negative indices, the ONNX node cases.
"""

import math
import zlib

import numpy as np
import pytest

from cugather.plan.keys import all_kernel_keys
from support.reference_elements_nd import ELEMENTS_CASES, ND_CASES, elements_ref, nd_ref, onnx_cases

runner = pytest.importorskip("hostsim.runner", reason="tests/hostsim is not available")
build = pytest.importorskip("hostsim.build")
if build.no_compiler_reason():
    pytest.skip(build.no_compiler_reason(), allow_module_level=True)

pytestmark = pytest.mark.hostsim

ELEMENTS_ND_KINDS = ("elements", "elements_row", "nd", "check_nd")
UNIT_DTYPES = {1: "uint8", 2: "float16", 4: "float32", 8: "int64", 16: "complex128"}
DTYPES = ["bool", "int8", "uint16", "float16", "int32", "float32", "uint64", "float64",
          "complex64", "complex128"]
MODES = ["raise", "wrap", "clip", "fill"]
host_elements, host_nd = runner.host_elements, runner.host_nd


# ---------------------------------------------------------------- inputs
def _seed(*parts):
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def random_data(rng, shape, dtype):
    dtype = np.dtype(dtype)
    raw = rng.integers(0, 256, size=(max(1, math.prod(shape)) * dtype.itemsize,), dtype=np.uint8)
    if dtype.kind == "b":
        raw &= 1
    if dtype.kind in "fc":  # no NaN payloads: compare by bytes
        vals = rng.standard_normal(max(1, math.prod(shape)) * (2 if dtype.kind == "c" else 1))
        raw = vals.astype(dtype.char.lower() if dtype.kind == "c" else dtype).view(np.uint8)
    return raw[:math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)


def view_of(rng, arr, how):
    """``arr``'s values in a layout: contiguous, strided, transposed, reversed,
    or at an address ``misaligned`` by one element's worth of bytes less."""
    if how == "contiguous":
        return runner.device_copy(arr)
    if how == "strided":  # every other element of a bigger array, on every dimension
        big = runner.device_empty(tuple(2 * n for n in arr.shape), arr.dtype)
        big[...] = np.zeros((), arr.dtype)
        view = big[tuple(slice(None, None, 2) for _ in arr.shape)]
        view[...] = arr
        return view
    if how == "transposed":
        host = runner.device_copy(np.ascontiguousarray(arr.T))
        return host.T
    if how == "reversed":
        host = runner.device_copy(arr[tuple(slice(None, None, -1) for _ in arr.shape)])
        return host[tuple(slice(None, None, -1) for _ in arr.shape)]
    if how == "misaligned":  # an address only 1- or 2-byte aligned
        nbytes = arr.size * arr.itemsize
        off = 1 if arr.itemsize == 1 else arr.itemsize // 2 if arr.itemsize > 2 else 1
        buf = runner.device_empty((nbytes + 16,), np.uint8)[off:off + nbytes]
        view = buf.view(arr.dtype).reshape(arr.shape)
        view[...] = arr
        return view
    raise ValueError(how)


LAYOUTS = ["contiguous", "strided", "transposed", "reversed", "misaligned"]


def _indices(rng, shape, n, dtype, mode):
    lo, hi = (-n, n) if mode == "raise" and n else (-3 * n - 2, 3 * n + 3)
    return rng.integers(lo, hi, size=shape).astype(dtype)


def _assert_same(got, ref, ctx):
    assert got.shape == ref.shape, f"shape {got.shape} != {ref.shape} ({ctx})"
    assert got.dtype == ref.dtype, ctx
    g, r = np.ascontiguousarray(got), np.ascontiguousarray(ref)
    if g.tobytes() != r.tobytes():
        bad = np.argwhere(g.view(np.uint8).reshape(g.shape + (-1,))
                          != r.view(np.uint8).reshape(r.shape + (-1,)))
        first = tuple(bad[0][:-1])
        raise AssertionError(f"{ctx}: first difference at {first}: got {g[first]!r}, "
                             f"expected {r[first]!r}")


# ---------------------------------------------------------------- every key
def _elements_nd_keys():
    return [k for k in all_kernel_keys() if k.kind in ELEMENTS_ND_KINDS]


def _key_id(key):
    return key.entry


@pytest.mark.parametrize("key", [k for k in _elements_nd_keys() if k.kind == "elements"], ids=_key_id)
def test_every_elements_key(key):
    rng = _seed("elements", key)
    dtype = UNIT_DTYPES[key.unit]
    data = runner.device_copy(random_data(rng, (5, 7, 3), dtype))
    idx = _indices(rng, (4, 6, 3), 7, key.index_dtype, key.mode)
    if key.mode == "raise":
        idx[1, 2, 0] = -7  # the most negative valid value
    for tiles in (False, True):
        got, plan = host_elements(data, idx, 1, key.mode, fill_value=1, math_name=key.math,
                                  max_grid=2, column_tiles=tiles)
        assert plan.key == key and bool(plan.fields["col_tiles"]) == tiles, plan.describe()
        _assert_same(got, elements_ref(data, idx, 1, key.mode, fill_value=1),
                     f"{key.entry} column_tiles={tiles}")
    assert key in runner.executed_keys()


@pytest.mark.parametrize("key", [k for k in _elements_nd_keys() if k.kind == "elements_row"],
                         ids=_key_id)
def test_every_elements_row_key(key):
    """The staged-row kernel: rows of 37 elements (the unit's staging loads and a
    tail), 300 picks per row (more than CG_ELEMENTS_ROW_PICKS per thread: the loop
    after the preloaded indices), outer dimensions narrower in the output than in
    data, a grid smaller than the rows."""
    rng = _seed("elements_row", key)
    dtype = UNIT_DTYPES[key.unit]
    data = runner.device_copy(random_data(rng, (4, 3, 37), dtype))
    for idx_shape in ((4, 3, 300), (3, 2, 5)):
        idx = _indices(rng, idx_shape, 37, key.index_dtype, key.mode)
        got, plan = host_elements(data, idx, 2, key.mode, fill_value=1, math_name=key.math,
                                  max_grid=2, kind="elements_row")
        assert plan.key == key, plan.describe()
        _assert_same(got, elements_ref(data, idx, 2, key.mode, fill_value=1),
                     f"{key.entry} indices {idx_shape}")
    assert key in runner.executed_keys()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
def test_elements_row_is_planned_for_the_last_axis_and_matches(layout, mode):
    """GatherElements on the last axis with many picks per row, and rows for two
    blocks per SM, stages the row (the planner's own choice, by the rules), on every
    layout it applies to; the others keep the elements kernel.  Both against the
    reference."""
    rng = _seed("elements_row_auto", layout, mode)
    host = random_data(rng, (270, 64), "float32")
    data = view_of(rng, host, layout)
    idx = _indices(rng, (265, 1030), 64, "int64", mode)
    got, plan = host_elements(data, idx, 1, mode, fill_value=1)
    contiguous_rows = data.strides[1] == 4 and data.ctypes.data % 4 == 0
    assert (plan.key.kind == "elements_row") == contiguous_rows, (layout, plan.describe())
    _assert_same(got, elements_ref(data, idx, 1, mode, fill_value=1), f"{layout} {mode}")
    few = _indices(rng, (2, 90), 64, "int64", mode)   # fewer than 1024 picks: direct
    _, plan = host_elements(data, few, 1, mode, fill_value=1)
    assert plan.key.kind == "elements", plan.describe()


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape,idx_shape,axis", [
    ((40, 70), (33, 70), 0),           # 70 columns: a full and a partial column tile
    ((3, 9, 45), (3, 20, 40), 1),      # columns narrower in the output than in data
    ((50, 2, 33), (17, 2, 33), 0),     # 66 columns over two merged dimensions
    ((2, 40, 32), (2, 40, 32), 2),     # gathered axis innermost: flat order
])
def test_elements_column_tiles_match_flat_order(shape, idx_shape, axis, index_dtype):
    rng = _seed("coltiles", shape, index_dtype)
    data = runner.device_copy(random_data(rng, shape, "float32"))
    for mode in MODES:
        idx = _indices(rng, idx_shape, shape[axis], index_dtype, mode)
        ref = elements_ref(data, idx, axis, mode, fill_value=1)
        auto, plan = host_elements(data, idx, axis, mode, fill_value=1)
        assert bool(plan.fields["col_tiles"]) == (axis != 2), plan.describe()
        _assert_same(auto, ref, f"{shape} {mode} auto")
        for grid in (1, 3):
            got, _ = host_elements(data, idx, axis, mode, fill_value=1, max_grid=grid,
                                   column_tiles=True)
            _assert_same(got, ref, f"{shape} {mode} column tiles, grid {grid}")


@pytest.mark.parametrize("key", [k for k in _elements_nd_keys() if k.kind == "nd"], ids=_key_id)
def test_every_nd_key(key):
    rng = _seed("nd", key)
    dtype = UNIT_DTYPES[key.unit]
    data = runner.device_copy(random_data(rng, (3, 4, 5, 3), dtype))
    idx = np.stack([_indices(rng, (3, 7), n, key.index_dtype, key.mode) for n in (4, 5)], -1)
    got, plan = host_nd(data, idx, 1, key.mode, fill_value=1, math_name=key.math, max_grid=2)
    assert plan.key == key, plan.describe()
    _assert_same(got, nd_ref(data, idx, 1, key.mode, fill_value=1), key.entry)
    assert key in runner.executed_keys()


@pytest.mark.parametrize("key", [k for k in _elements_nd_keys() if k.kind == "check_nd"], ids=_key_id)
def test_every_check_nd_key(key):
    data = runner.device_copy(np.arange(60, dtype=np.float32).reshape(3, 4, 5))
    idx = np.zeros((300, 3), dtype=key.index_dtype)  # more values than one check block
    idx[:, 0] = np.arange(300) % 3 - 3
    idx[250, 2] = 5
    idx[260, 1] = -5
    message = (r"index 5 is out of bounds for axis 2 with size 5 "
               r"\(at indices\[250, 2\]; valid range \[-5, 4\]\)")
    with pytest.raises(IndexError, match=message):  # the nd kernel checks what it reads
        host_nd(data, idx, 0, "raise")
    assert [k.kind for k, *_ in runner.last_launches()] == ["nd"]
    out = runner.guarded_out((300,), data.dtype)
    with pytest.raises(IndexError, match=message):  # out=: the check runs first
        host_nd(data, idx, 0, "raise", out=out)
    assert [k.kind for k, *_ in runner.last_launches()] == ["check_nd"]
    assert (out.view(np.uint8) == runner.POISON).all(), "out= was written"
    assert key in runner.executed_keys()
    idx[250, 2], idx[260, 1] = -5, 3
    got, _ = host_nd(data, idx, 0, "raise")
    _assert_same(got, nd_ref(data, idx), key.entry)


# ---------------------------------------------------------------- ONNX node cases
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("name", ELEMENTS_CASES + ND_CASES)
def test_onnx_node_cases(name, index_dtype):
    attrs, (data, indices), expected = onnx_cases()[name]
    data = runner.device_copy(data)
    indices = indices.astype(index_dtype)
    if name in ELEMENTS_CASES:
        got, _ = host_elements(data, indices, attrs.get("axis", 0))
    else:
        got, _ = host_nd(data, indices, attrs.get("batch_dims", 0))
    _assert_same(got, expected, name)


# ---------------------------------------------------------------- random shapes
def _random_elements_case(rng, broadcast):
    r = int(rng.integers(1, 5))
    shape = tuple(int(n) for n in rng.integers(1, 6, size=r))
    axis = int(rng.integers(-r, r))
    a = axis % r
    idx_shape = []
    for d, n in enumerate(shape):
        if d == a:
            idx_shape.append(int(rng.integers(0 if rng.random() < 0.1 else 1, 6)))
        elif broadcast:
            idx_shape.append(int(rng.choice([n, 1])))
        else:
            idx_shape.append(int(rng.integers(1, n + 1)))
    if broadcast and rng.random() < 0.5:  # broadcast data against larger indices instead
        d = int(rng.integers(0, r))
        if d != a:
            shape = shape[:d] + (1,) + shape[d + 1:]
            idx_shape[d] = int(rng.integers(1, 5))
    return shape, axis, tuple(idx_shape)


@pytest.mark.parametrize("seed", range(40))
def test_gather_elements_random(seed):
    rng = _seed("gather_elements", seed)
    shape, axis, idx_shape = _random_elements_case(rng, broadcast=False)
    dtype = DTYPES[seed % len(DTYPES)]
    layout = LAYOUTS[seed % len(LAYOUTS)]
    index_dtype = ["int32", "int64"][seed % 2]
    data = view_of(rng, random_data(rng, shape, dtype), layout)
    for mode in MODES:
        idx = _indices(rng, idx_shape, shape[axis], index_dtype, mode)
        ctx = f"shape={shape} {layout} {dtype} axis={axis} idx={idx.tolist()} mode={mode}"
        got, plan = host_elements(data, idx, axis, mode, fill_value=1, out_offset=seed % 3 * 8,
                                  max_grid=int(rng.integers(1, 4)),
                                  column_tiles=[None, True, False][seed % 3])
        _assert_same(got, elements_ref(data, idx, axis, mode, fill_value=1), ctx)
    idx = _indices(rng, idx_shape, shape[axis], index_dtype, "raise")
    if idx.size:
        _expect_first_bad(rng, idx, lambda k: shape[axis], axis % len(shape),
                          lambda bad: host_elements(data, bad, axis, max_grid=2))


def _expect_first_bad(rng, valid, bound_of, axis_of, call):
    """Two out-of-range values planted among valid ones; raise mode must name the first."""
    p, q = sorted(int(x) for x in rng.choice(valid.size, size=2, replace=valid.size < 2))
    m = valid.shape[-1]
    n = bound_of(p % m)
    bad = valid.copy()
    bad.flat[q] = -bound_of(q % m) - 1
    bad.flat[p] = n + int(rng.integers(0, 3))
    where = [int(i) for i in np.unravel_index(p, valid.shape)]
    axis = axis_of if isinstance(axis_of, int) else axis_of(p % m)
    msg = (rf"index {bad.flat[p]} is out of bounds for axis {axis} with size {n} "
           rf"\(at indices\[{', '.join(map(str, where))}\]; valid range \[{-n}, {n - 1}\]\)")
    with pytest.raises(IndexError, match=msg):
        call(bad)


@pytest.mark.parametrize("seed", range(30))
def test_take_along_axis_random(seed):
    rng = _seed("take_along_axis", seed)
    shape, axis, idx_shape = _random_elements_case(rng, broadcast=True)
    dtype = DTYPES[(seed * 3) % len(DTYPES)]
    layout = LAYOUTS[seed % len(LAYOUTS)]
    data = view_of(rng, random_data(rng, shape, dtype), layout)
    idx = _indices(rng, idx_shape, shape[axis], "int64", "raise")
    got, _ = host_elements(data, idx, axis, broadcast=True, max_grid=int(rng.integers(1, 4)))
    _assert_same(got, np.take_along_axis(np.asarray(data), np.where(
        idx < 0, idx + shape[axis], idx), axis), f"shape={shape} idx={idx_shape} axis={axis}")
    if got.size:
        _expect_first_bad(rng, idx, lambda k: shape[axis], axis % len(shape),
                          lambda bad: host_elements(data, bad, axis, broadcast=True))


def _random_nd_case(rng):
    r = int(rng.integers(1, 5))
    shape = tuple(int(n) for n in rng.integers(1, 5, size=r))
    b = int(rng.integers(0, r))
    m = int(rng.integers(1, r - b + 1))
    j = tuple(int(n) for n in rng.integers(0 if rng.random() < 0.1 else 1, 5,
                                           size=int(rng.integers(0, 3))))
    return shape, b, shape[:b] + j + (m,)


@pytest.mark.parametrize("seed", range(40))
def test_gather_nd_random(seed):
    rng = _seed("gather_nd", seed)
    shape, b, idx_shape = _random_nd_case(rng)
    dtype = DTYPES[(seed * 7) % len(DTYPES)]
    layout = LAYOUTS[seed % len(LAYOUTS)]
    index_dtype = ["int64", "int32"][seed % 2]
    data = view_of(rng, random_data(rng, shape, dtype), layout)
    for mode in MODES:
        m = idx_shape[-1]
        idx = np.stack([_indices(rng, idx_shape[:-1], n, index_dtype, mode)
                        for n in shape[b:b + m]], -1).reshape(idx_shape)
        ctx = f"shape={shape} {layout} {dtype} b={b} idx={idx.tolist()} mode={mode}"
        got, plan = host_nd(data, idx, b, mode, fill_value=1, out_offset=seed % 3 * 4,
                            max_grid=int(rng.integers(1, 4)))
        _assert_same(got, nd_ref(data, idx, b, mode, fill_value=1), ctx)
    idx = np.stack([_indices(rng, idx_shape[:-1], n, index_dtype, "raise")
                    for n in shape[b:b + m]], -1).reshape(idx_shape)
    if idx.size:
        _expect_first_bad(rng, idx, lambda k: shape[b + k], lambda k: b + k,
                          lambda bad: host_nd(data, bad, b, max_grid=2))


# ---------------------------------------------------------------- targeted
@pytest.mark.parametrize("mode", MODES)
def test_wide_units_for_broadcast_rows(mode):
    """take_along_axis((B, N, D), (B, K, 1)) moves each D-element row as 16 B units."""
    rng = _seed("rows", mode)
    data = runner.device_copy(random_data(rng, (3, 9, 12), "float32"))
    idx = _indices(rng, (3, 5, 1), 9, "int64", mode)
    got, plan = host_elements(data, idx, 1, mode, fill_value=-1.5, broadcast=True)
    assert plan.key.unit == 16 and plan.fields["ndim"] == 3, plan.describe()
    _assert_same(got, elements_ref(data, idx, 1, mode, fill_value=-1.5, broadcast=True), mode)


@pytest.mark.parametrize("dtype", ["float64", "complex128", "int32"])
def test_fill_with_units_narrower_than_elements(dtype):
    """Misaligned data forces units narrower than an element; the fill value
    must still land whole."""
    rng = _seed("narrow", dtype)
    data = view_of(rng, random_data(rng, (6, 5), dtype), "misaligned")
    idx = _indices(rng, (4, 5), 6, "int64", "fill")
    fill = -3.25 if dtype != "int32" else -123456789
    got, plan = host_elements(data, idx, 0, "fill", fill_value=fill)
    assert plan.key.unit < np.dtype(dtype).itemsize, plan.describe()
    _assert_same(got, elements_ref(data, idx, 0, "fill", fill_value=fill), dtype)
    idx3 = np.stack([idx % 7 - 1, idx % 6], -1)
    got, plan = host_nd(data, idx3, 0, "fill", fill_value=fill, out_offset=2)
    assert plan.key.unit < np.dtype(dtype).itemsize, plan.describe()
    _assert_same(got, nd_ref(data, idx3, 0, "fill", fill_value=fill), dtype)


def test_gather_nd_contiguous_slices_use_16_byte_units():
    rng = _seed("nd16")
    data = runner.device_copy(random_data(rng, (6, 5, 128), "float16"))
    idx = _indices(rng, (30, 2), 5, "int32", "wrap") % 5
    got, plan = host_nd(data, idx, 0, "wrap")
    assert plan.key.unit == 16 and plan.fields["units"] == 16, plan.describe()
    _assert_same(got, nd_ref(data, idx, 0, "wrap"), "nd16")


def test_gather_nd_large_slices_split_over_grid_y():
    rng = _seed("ndbig")
    data = runner.device_copy(random_data(rng, (4, 2000), "float32"))
    idx = np.array([[3], [-1], [0], [-4], [2]])
    got, plan = host_nd(data, idx, 0, "raise")
    assert plan.grid[1] > 1 or plan.fields["tile_cu"] > 1, plan.describe()
    _assert_same(got, nd_ref(data, idx), "ndbig")


def test_raise_reports_the_first_bad_position():
    data = runner.device_copy(np.arange(20, dtype=np.int16).reshape(4, 5))
    idx = np.zeros((600, 5), np.int64)
    idx[400, 3] = 4
    idx[500, 1] = -5
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 0 with size 4 "
                                         r"\(at indices\[400, 3\]; valid range \[-4, 3\]\)"):
        host_elements(data, idx, 0, "raise")
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 0"):
        host_elements(data, idx, 0, "raise", broadcast=True)


def test_more_dims_than_the_kernel_takes_copy_the_data():
    """A strided 9-d view cannot be merged into 8 dims; the data is copied first."""
    rng = _seed("nine")
    base = random_data(rng, (2,) * 9, "float32")
    data = view_of(rng, base, "strided")
    idx = rng.integers(-2, 2, size=(2,) * 9)
    got, plan = host_elements(data, idx, 4, "raise")
    _assert_same(got, elements_ref(base, idx, 4), "nine")
    idx_nd = rng.integers(-2, 2, size=(2, 2, 1))
    got, plan = host_nd(data, idx_nd, 1, "raise")
    _assert_same(got, nd_ref(base, idx_nd, 1), "nine nd")


def test_empty_axis_fill_and_empty_outputs():
    data = runner.device_copy(np.zeros((3, 0, 2), np.float32))
    got, plan = host_elements(data, np.zeros((3, 4, 2), np.int64), 1, "fill", fill_value=7)
    assert plan.key is not None and (got == 7).all() and got.shape == (3, 4, 2)
    with pytest.raises(IndexError, match="axis 1 of size 0"):
        host_elements(data, np.zeros((3, 4, 2), np.int64), 1, "wrap")
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 0"):
        host_elements(data, np.zeros((3, 4, 2), np.int64), 1, "raise")
    got, plan = host_nd(data, np.zeros((5, 2), np.int64), 0, "fill", fill_value=2)
    assert (got == 2).all() and got.shape == (5, 2)
    got, plan = host_nd(data, np.zeros((5, 0, 2), np.int64), 0, "raise")
    assert got.shape == (5, 0, 2) and plan.key is None and plan.check_key is None


def test_negative_zero_fill_after_positive_zero():
    """The plan cache keys the fill value by its bytes: -0.0 after 0.0 writes -0.0."""
    data = runner.device_copy(np.arange(12, dtype=np.float64).reshape(3, 4))
    idx = np.array([[0, 9, 1, -1]])
    for fill in (0.0, -0.0, 0.0):
        got, _ = host_elements(data, idx, 0, "fill", fill_value=fill)
        assert np.signbit(got[0, 1]) == np.signbit(fill), (fill, got)
        got, _ = host_nd(data, np.array([[5]]), 0, "fill", fill_value=fill)
        assert np.signbit(got).all() == np.signbit(fill), (fill, got)
