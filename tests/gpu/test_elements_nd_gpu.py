"""GPU tier: gather_elements, take_along_axis and gather_nd on a real device
against NumPy references, the ONNX node cases, views, modes, out=, streams
and errors."""

import math
import zlib

import numpy as np
import pytest

import cugather
from support.reference import DTYPES, INDEX_DTYPES, MODES, assert_same, random_data
from support.reference_elements_nd import ELEMENTS_CASES, ND_CASES, elements_ref, nd_ref, onnx_cases

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

AxisError = getattr(getattr(np, "exceptions", np), "AxisError")


def _rng(*parts):
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def _indices(rng, shape, n, dtype, mode):
    lo, hi = (-n, n) if mode == "raise" else (-3 * n - 2, 3 * n + 3)
    return rng.integers(lo, hi, size=shape).astype(dtype)


VIEWS = {
    "contiguous": lambda a: a,
    "slice": lambda a: a[1:, :-1, 1:],
    "transpose": lambda a: a.transpose(2, 0, 1),
    "negative": lambda a: a[::-1, :, ::-2],
    "step": lambda a: a[::2, 1::2, :],
}


# ---------------------------------------------------------------- gather_elements
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_matches_numpy(dtype, index_dtype, mode, axis):
    rng = _rng("el", dtype, index_dtype, mode, axis)
    data = random_data(rng, (5, 6, 7), dtype)
    a = axis % 3
    idx_shape = tuple(9 if d == a else n - 1 for d, n in enumerate(data.shape))
    idx = _indices(rng, idx_shape, data.shape[a], index_dtype, mode)
    got = cugather.gather_elements(cp.asarray(data), cp.asarray(idx), axis, mode=mode,
                                   fill_value=1)
    assert_same(got.get(), elements_ref(data, idx, axis, mode, fill_value=1),
                f"{dtype} {index_dtype} {mode} axis={axis}")


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64", "complex128"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,idx_shape", [
    ((300, 4096), (300, 1024)),           # the top-k pattern: more picks than preloaded
    ((7, 9, 1031), (7, 5, 2000)),          # odd rows, outer dims narrower than data
    ((50, 37), (40, 600)),
])
def test_gather_elements_staged_rows_match_numpy(dtype, index_dtype, mode, shape, idx_shape):
    """The last axis with 1024 picks per row or more stages each data row
    (elements_row, the rules' choice where a row of at most 32 KB fits in shared
    memory and there are rows for two blocks per SM); the planner's own choice
    (the tuning table on an H200) and either kernel forced, the same result."""
    from cugather.ops import elements as el
    from cugather.runtime import run_plan
    from cugather.runtime.key import call_key, geometry_of_key
    from cugather.runtime.launch import CUDA
    from cugather.validate import fill_bytes

    rng = _rng("elrow", dtype, index_dtype, mode, shape)
    host = random_data(rng, shape, dtype)
    data = cp.asarray(host)
    idx = cp.asarray(_indices(rng, idx_shape, shape[-1], index_dtype, mode))
    want = elements_ref(host, idx.get(), -1, mode, fill_value=1)
    got = cugather.gather_elements(data, idx, -1, mode=mode, fill_value=1)
    assert_same(got.get(), want, f"{dtype} {index_dtype} {mode} {shape}")
    geo = geometry_of_key("elements", call_key(None, 0, data, data.data.ptr, idx, 0),
                          len(shape) - 1, mode)
    limits = CUDA.limits(data.data.device_id)
    rules = type(limits)(limits.sm_count, limits.max_shared_mem, "")
    row = shape[-1] * data.itemsize
    fits = row <= limits.max_shared_mem
    staged = (fits and row <= 32768 and idx_shape[-1] >= 1024 and idx_shape[-1] * 32 >= row
              and math.prod(idx_shape[:-1]) >= 2 * limits.sm_count)
    assert el.plan_for(geo, rules).key.kind == ("elements_row" if staged else "elements")
    fill = fill_bytes(1, data.dtype) if mode == "fill" else None
    for kind in ("elements", "elements_row") if fits else ("elements",):
        plan = el.plan_for(geo, limits, kind=kind)
        assert plan.key.kind == kind
        got = run_plan(plan, data, idx, fill=fill)
        assert_same(got.get(), want, f"{dtype} {index_dtype} {mode} {shape} {kind}")


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "complex128"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,idx_shape,axis", [
    ((300, 70), (257, 70), 0),             # column tiles: a full and a partial tile of 32
    ((7, 40, 129), (7, 33, 100), 1),       # 100 of 129 columns, several row tiles
    ((2000, 2, 48), (1500, 2, 48), 0),     # columns over two merged dimensions
    ((64, 300), (64, 200), 1),             # gathered axis innermost: flat order
])
def test_gather_elements_column_tiles_match_numpy(shape, idx_shape, axis, mode, dtype):
    rng = _rng("el-tiles", shape, mode, dtype)
    data = random_data(rng, shape, dtype)
    idx = _indices(rng, idx_shape, shape[axis], "int64", mode)
    got = cugather.gather_elements(cp.asarray(data), cp.asarray(idx), axis, mode=mode,
                                   fill_value=1)
    assert_same(got.get(), elements_ref(data, idx, axis, mode, fill_value=1),
                f"{shape} {idx_shape} axis={axis} {mode} {dtype}")


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("mode", MODES)
def test_gather_elements_strided_data(view, mode):
    rng = _rng("el-view", view, mode)
    base = random_data(rng, (8, 9, 10), "float32")
    host = VIEWS[view](base)
    dev = VIEWS[view](cp.asarray(base))
    for axis in range(3):
        idx = _indices(rng, host.shape[:axis] + (4,) + host.shape[axis + 1:], host.shape[axis],
                       "int64", mode)
        got = cugather.gather_elements(dev, cp.asarray(idx), axis, mode=mode, fill_value=-2)
        assert_same(got.get(), elements_ref(host, idx, axis, mode, fill_value=-2),
                    f"{view} axis={axis}")


def test_gather_elements_matches_torch_gather():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    rng = _rng("torch")
    data = cp.asarray(random_data(rng, (16, 33, 5), "float32"))
    idx = cp.asarray(rng.integers(0, 33, size=(16, 40, 5)))
    got = cugather.gather_elements(data, idx, 1)
    ref = torch.gather(torch.from_dlpack(data), 1, torch.from_dlpack(idx))
    cp.cuda.Device().synchronize()
    assert bool((got == cp.from_dlpack(ref.contiguous())).all())


# ---------------------------------------------------------------- take_along_axis
@pytest.mark.parametrize("arr_shape,idx_shape,axis", [
    ((4, 5, 6), (4, 3, 6), 1),
    ((4, 5, 6), (4, 3, 1), 1),      # one index per row: rows moved whole
    ((4, 1, 6), (4, 3, 6), 0),      # arr broadcast
    ((1, 5, 6), (3, 5, 2), 2),
    ((7,), (12,), 0),
    ((3, 4), (3, 0), 1),
    ((0, 4), (1, 2), 1),
])
def test_take_along_axis_matches_numpy(arr_shape, idx_shape, axis):
    rng = _rng("tal", arr_shape, idx_shape, axis)
    arr = random_data(rng, arr_shape, "float64")
    idx = _indices(rng, idx_shape, max(arr_shape[axis], 1), "int64", "raise")
    got = cugather.take_along_axis(cp.asarray(arr), cp.asarray(idx), axis)
    assert_same(got.get(), np.take_along_axis(arr, idx, axis), f"{arr_shape} {idx_shape}")


def test_take_along_axis_default_axis_none_and_argsort():
    rng = _rng("tal2")
    arr = random_data(rng, (6, 7), "float32")
    order = np.argsort(arr, axis=-1)
    d = cp.asarray(arr)
    assert_same(cugather.take_along_axis(d, cp.asarray(order)).get(), np.sort(arr, axis=-1))
    flat = rng.integers(-42, 42, size=10)
    assert_same(cugather.take_along_axis(d, cp.asarray(flat), axis=None).get(),
                np.take_along_axis(arr, flat, axis=None))
    assert_same(cugather.take_along_axis(d.T, cp.asarray(flat), axis=None).get(),
                np.take_along_axis(arr.T, flat, axis=None))
    assert_same(cugather.take_along_axis(d, np.array([[1], [0], [2], [1], [0], [6]]), 1).get(),
                np.take_along_axis(arr, np.array([[1], [0], [2], [1], [0], [6]]), 1))


def test_take_along_axis_errors_like_numpy():
    d = cp.zeros((3, 4), cp.float32)
    with pytest.raises(IndexError, match="integer array"):
        cugather.take_along_axis(d, cp.zeros((3, 1), cp.float32), 1)
    with pytest.raises(IndexError, match="integer array"):
        cugather.take_along_axis(d, cp.zeros((3, 1), bool), 1)
    with pytest.raises(ValueError, match="same number of dimensions"):
        cugather.take_along_axis(d, cp.zeros((3,), cp.int64), 1)
    with pytest.raises(ValueError, match="single dimension"):
        cugather.take_along_axis(d, cp.zeros((3, 1), cp.int64), None)
    with pytest.raises(IndexError, match="shape mismatch"):
        cugather.take_along_axis(d, cp.zeros((2, 1), cp.int64), 1)
    with pytest.raises(AxisError):
        cugather.take_along_axis(d, cp.zeros((3, 1), cp.int64), 2)
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 1 with size 4"):
        cugather.take_along_axis(d, cp.asarray([[0], [4], [-5]]), 1)


# ---------------------------------------------------------------- gather_nd
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("batch_dims,m", [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (2, 1)])
def test_gather_nd_matches_numpy(dtype, index_dtype, mode, batch_dims, m):
    rng = _rng("nd", dtype, index_dtype, mode, batch_dims, m)
    data = random_data(rng, (3, 4, 5, 6), dtype)
    b = batch_dims
    lead = data.shape[:b] + (2, 3)
    idx = np.stack([_indices(rng, lead, n, index_dtype, mode) for n in data.shape[b:b + m]], -1)
    got = cugather.gather_nd(cp.asarray(data), cp.asarray(idx), b, mode=mode, fill_value=1)
    assert_same(got.get(), nd_ref(data, idx, b, mode, fill_value=1),
                f"{dtype} {index_dtype} {mode} b={b} m={m}")


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("mode", MODES)
def test_gather_nd_strided_data(view, mode):
    rng = _rng("nd-view", view, mode)
    base = random_data(rng, (8, 9, 10), "float16")
    host = VIEWS[view](base)
    dev = VIEWS[view](cp.asarray(base))
    for b, m in [(0, 1), (0, 2), (1, 1), (1, 2)]:
        idx = np.stack([_indices(rng, host.shape[:b] + (5,), n, "int64", mode)
                        for n in host.shape[b:b + m]], -1)
        got = cugather.gather_nd(dev, cp.asarray(idx), b, mode=mode, fill_value=-2)
        assert_same(got.get(), nd_ref(host, idx, b, mode, fill_value=-2), f"{view} b={b} m={m}")


def test_gather_nd_large_rows_and_misaligned_fill():
    rng = _rng("nd-big")
    data = random_data(rng, (64, 3000), "float32")
    idx = rng.integers(-64, 64, size=(50, 1))
    got = cugather.gather_nd(cp.asarray(data), cp.asarray(idx))
    assert_same(got.get(), nd_ref(data, idx), "rows of 12000 B")
    host = (np.arange(12) + 1j).astype(np.complex128).reshape(4, 3)
    raw = cp.zeros(16 * 12 + 8, dtype=cp.uint8)
    raw[8:] = cp.asarray(host.view(np.uint8).reshape(-1))
    dev = raw[8:].view(cp.complex128).reshape(4, 3)
    assert dev.data.ptr % 16 == 8
    idx = np.array([[1], [9], [-4]])
    got = cugather.gather_nd(dev, cp.asarray(idx), mode="fill", fill_value=3 - 4j)
    assert_same(got.get(), nd_ref(host, idx, 0, "fill", fill_value=3 - 4j), "misaligned")
    el = cugather.gather_elements(dev, cp.asarray([[0, 7, -1]]), 0, mode="fill", fill_value=2j)
    assert_same(el.get(), elements_ref(host, np.array([[0, 7, -1]]), 0, "fill", fill_value=2j))


# ---------------------------------------------------------------- ONNX
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("name", ELEMENTS_CASES + ND_CASES)
def test_onnx_node_cases(name, index_dtype):
    attrs, (data, indices), expected = onnx_cases()[name]
    d, i = cp.asarray(data), cp.asarray(indices.astype(index_dtype))
    if name in ELEMENTS_CASES:
        got = cugather.gather_elements(d, i, attrs.get("axis", 0))
    else:
        got = cugather.gather_nd(d, i, attrs.get("batch_dims", 0))
    assert_same(got.get(), expected, name)


# ---------------------------------------------------------------- raise, out=, streams
def test_raise_names_the_first_bad_index_and_leaves_out_untouched():
    d = cp.arange(20, dtype=cp.float32).reshape(4, 5)
    out = cp.full((3, 5), -1, cp.float32)
    idx = cp.zeros((3, 5), cp.int64)
    idx[1, 2] = 4
    idx[2, 0] = -9
    with pytest.raises(IndexError, match=r"index 4 is out of bounds for axis 0 with size 4 "
                                         r"\(at indices\[1, 2\]; valid range \[-4, 3\]\)"):
        cugather.gather_elements(d, idx, 0, out=out)
    assert bool((out == -1).all())
    nd_idx = cp.asarray([[0, 1], [3, 5], [9, 0]])
    out = cp.full((3,), -1, cp.float32)
    with pytest.raises(IndexError, match=r"index 5 is out of bounds for axis 1 with size 5 "
                                         r"\(at indices\[1, 1\]; valid range \[-5, 4\]\)"):
        cugather.gather_nd(d, nd_idx, out=out)
    assert bool((out == -1).all())


def test_out_argument():
    d = cp.arange(24, dtype=cp.int16).reshape(4, 6)
    out = cp.empty((4, 2), cp.int16)
    res = cugather.gather_elements(d, cp.asarray([[0, 5]] * 4), 1, out=out)
    assert res is out and out.get().tolist() == [[r * 6, r * 6 + 5] for r in range(4)]
    out = cp.empty((2, 6), cp.int16)
    assert cugather.gather_nd(d, cp.asarray([[3], [0]]), out=out) is out
    assert out.get().tolist() == [list(range(18, 24)), list(range(6))]
    with pytest.raises(ValueError, match="shape"):
        cugather.gather_nd(d, cp.asarray([[3]]), out=out)
    with pytest.raises(TypeError, match="dtype"):
        cugather.gather_nd(d, cp.asarray([[3], [0]]), out=cp.empty((2, 6), cp.int32))
    with pytest.raises(ValueError, match="C-contiguous"):
        cugather.gather_elements(d, cp.asarray([[0, 1]] * 4), 1, out=cp.empty((2, 4), cp.int16).T)
    with pytest.raises(ValueError, match="overlaps data"):
        cugather.gather_elements(d, cp.asarray([[0]] * 4), 1, out=d.reshape(-1)[:4].reshape(4, 1))


def test_stream_and_cache():
    from cugather.ops import elements as elements_op

    d = cp.arange(1000, dtype=cp.float32).reshape(10, 100)
    idx = cp.asarray(np.arange(10 * 7).reshape(10, 7) % 100)
    s = cp.cuda.Stream(non_blocking=True)
    before = elements_op.cache_info()
    got = cugather.gather_elements(d, idx, 1, mode="wrap", stream=s)
    s.synchronize()
    again = cugather.gather_elements(d, idx, 1, mode="wrap", stream=s)
    s.synchronize()
    after = elements_op.cache_info()
    assert after.hits >= before.hits + 1
    assert bool((got == again).all())
    assert_same(got.get(), np.take_along_axis(np.arange(1000, dtype=np.float32).reshape(10, 100),
                                              idx.get(), 1))


def test_argument_errors():
    d = cp.zeros((3, 4), cp.float32)
    with pytest.raises(ValueError, match="mode must be one of"):
        cugather.gather_elements(d, cp.zeros((3, 4), cp.int64), mode="bogus")
    with pytest.raises(ValueError, match="rank of data"):
        cugather.gather_elements(d, cp.zeros((3,), cp.int64))
    with pytest.raises(ValueError, match=r"exceed data .* on dimension 1"):
        cugather.gather_elements(d, cp.zeros((3, 5), cp.int64))
    with pytest.raises(TypeError, match="integer"):
        cugather.gather_elements(d, cp.zeros((3, 4), cp.float32))
    with pytest.raises(ValueError, match="at least one dimension"):
        cugather.gather_elements(cp.zeros(()), cp.zeros((), cp.int64))
    with pytest.raises(TypeError, match="batch_dims must be an integer"):
        cugather.gather_nd(d, cp.zeros((3, 1), cp.int64), 1.0)
    with pytest.raises(ValueError, match="batch_dims must be in"):
        cugather.gather_nd(d, cp.zeros((3, 1), cp.int64), 2)
    with pytest.raises(ValueError, match="index tuple length"):
        cugather.gather_nd(d, cp.zeros((3, 3), cp.int64))
    with pytest.raises(ValueError, match="fill_value"):
        cugather.gather_nd(cp.zeros((3,), cp.uint8), cp.zeros((1, 1), cp.int64), mode="fill",
                           fill_value=300)
    with pytest.raises(IndexError, match="axis 1 of size 0"):
        cugather.gather_elements(cp.zeros((3, 0)), cp.zeros((3, 2), cp.int64), 1, mode="wrap")


def test_bench_elements_nd_cases_agree_with_their_peers():
    """Every benchmark case's timed cugather call gives its peers' result, bit for bit;
    the raise-mode variant too (the ceiling, a copy, runs)."""
    from cugather.bench import elements_nd as bench_elements_nd

    rng = cp.random.default_rng(1)
    for case in bench_elements_nd.cases(quick=False):
        state = case["setup"](cp, rng)
        got = case["cugather"](state).get()
        for name, fn in [*case["peers"].items(), *case["variants"].items()]:
            ref = fn(state)
            ref = ref if isinstance(ref, cp.ndarray) else cp.from_dlpack(ref)
            assert_same(ref.get(), got, f"{case['name']}: cugather vs {name}")
        case["ceiling"][0](state)
        cp.cuda.Device().synchronize()
        del state
