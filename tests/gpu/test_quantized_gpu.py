"""GPU tier: gather_block_quantized on a real device against onnxruntime's CPU
kernel (one-node com.microsoft models) and the NumPy reference -- every kernel
key, onnxruntime's own test cases, odd rows, partial blocks, both quantize
axes, with and without zero points, every scales dtype, int32 and int64
indices, every mode, misaligned tables, out=, streams and errors."""

import zlib

import numpy as np
import pytest

import cugather
from cugather.ops import quantized as quantized_op
from cugather.plan.keys import all_kernel_keys
from cugather.runtime.binding import bind
from cugather.runtime.launch import CUDA, execute
from support.quantized_reference import (MODES, ORT_CASES, ort_reason, ort_run, out_dtype, quantize,
                                         quantized_ref, resolve, ulp_distance)
from support.reference import assert_same

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

ORT = ort_reason()
SCALE_DTYPES = ["float16", "float32", "bfloat16"]


def _rng(*parts):
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def _dev(host):
    """``host`` on the GPU; bfloat16 skips with a reason where CuPy cannot hold it."""
    try:
        return cp.asarray(host)
    except (TypeError, ValueError) as e:
        pytest.skip(f"CuPy cannot hold {host.dtype} arrays here: {e}")


def _table(rng, shape, bits, block, zp, scale_dtype, quantize_axis=-1):
    """Host (data, scales, zero_points): random codes, scales and zero points."""
    dt = out_dtype(scale_dtype)
    if dt is None:
        pytest.skip("bfloat16 needs ml_dtypes (installed with onnx)")
    values = shape[:-1] + (shape[-1] * (8 // bits),)
    if bits == 4:
        data, scales, zps = quantize(np.empty(values), bits=4, block_size=block,
                                     with_zero_points=zp, scale_dtype="float32", rng=rng)
    else:
        q = quantize_axis % len(shape)
        moved = values[:q] + values[q + 1:] + (values[q],)
        data, scales, zps = quantize(np.empty(moved), bits=8, block_size=block,
                                     with_zero_points=zp, scale_dtype="float32", rng=rng)
        data = np.ascontiguousarray(np.moveaxis(data, -1, q))
        scales = np.ascontiguousarray(np.moveaxis(scales, -1, q))
        zps = None if zps is None else np.ascontiguousarray(np.moveaxis(zps, -1, q))
    return data, (scales * 4).astype(dt), zps


def _indices(rng, shape, n, dtype, mode):
    lo, hi = (-n, n) if mode == "raise" else (-3 * n - 2, 3 * n + 3)
    return rng.integers(lo, hi, size=shape).astype(dtype)


def _call(data, idx, scales, zps, **kw):
    """gather_block_quantized on device copies of host arrays; the result on the host."""
    got = cugather.gather_block_quantized(_dev(data), cp.asarray(idx), _dev(scales),
                                          None if zps is None else cp.asarray(zps), **kw)
    assert isinstance(got, cp.ndarray)
    return got.get()


def _vs_ort(got, data, idx, scales, zps, mode, ctx, **kw):
    n = data.shape[0]
    pos, fill = resolve(idx, n, mode)
    # onnxruntime's CPU kernel refuses out-of-range indices in some releases and
    # writes zeros in others: give it row 0 there and zero those rows here.
    want = ort_run(data, np.where(fill, 0, pos).astype(idx.dtype), scales, zps, **kw)
    want[fill] = 0
    if got.dtype == np.float32:
        assert_same(got, want, f"{ctx} vs onnxruntime")
    else:
        assert ulp_distance(got, want) <= 1, f"{ctx} vs onnxruntime"


# ---------------------------------------------------------------- every key
@pytest.mark.parametrize("key", [k for k in all_kernel_keys() if k.kind.startswith("quantized")],
                         ids=lambda k: k.entry)
def test_every_quantized_key(key):
    """Each key forced, its plan bound and executed by the runtime on the device."""
    general = key.kind.startswith("quantized_general")
    name = "bfloat16" if key.kind.endswith("bf16") else {2: "float16", 4: "float32"}[key.unit]
    rng = _rng("key", key)
    for bits, shape, q in ((4, (9, 3, 20), -1), (4, (33, 64), -1),
                           (8, (9, 40, 3), 1 if general else -1), (8, (17, 48), -1)):
        data, scales, zps = _table(rng, shape, bits, 16, bits == 4, name, q)
        idx = _indices(rng, (4, 3), shape[0], key.index_dtype, key.mode)
        kw = dict(quantize_axis=q, block_size=16, bits=bits)
        d, i, s = _dev(data), cp.asarray(idx), _dev(scales)
        z = None if zps is None else cp.asarray(zps)
        plan = quantized_op.plan_of(d, i, s, z, mode=key.mode,
                                    kind="general" if general else "rows", max_grid=2, **kw)
        assert plan.key == key, plan.describe()
        fill = CUDA.fill_bytes(1.5, s.dtype) if key.mode == "fill" else None
        bound = bind(plan, d.data.device_id, fill, CUDA, plan.out_dtype)
        got = execute(bound, d, d.data.ptr, i, None, None, d.data.device_id,
                      (("scales", s), ("zero_points", z)))
        assert_same(got.get(), quantized_ref(data, idx, scales, zps, mode=key.mode,
                                             fill_value=1.5, **kw), f"{key.entry} {shape}")


# ---------------------------------------------------------------- onnxruntime's cases
@pytest.mark.parametrize("case", ORT_CASES, ids=lambda c: c["name"])
@pytest.mark.parametrize("scale_dtype", ["float32", "float16"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_onnxruntime_cases(case, scale_dtype, index_dtype):
    scales = case["scales"].astype(scale_dtype)
    idx = case["indices"].astype(index_dtype)
    kw = dict(gather_axis=case["gather_axis"], quantize_axis=case["quantize_axis"],
              block_size=case["block_size"], bits=case["bits"])
    got = _call(case["data"], idx, scales, case["zero_points"], **kw)
    assert_same(got, case["output"].astype(scale_dtype), case["name"])
    if ORT is None:
        assert_same(got, ort_run(case["data"], idx, scales, case["zero_points"], **kw),
                    f"{case['name']} vs onnxruntime")


# ---------------------------------------------------------------- random tables
SHAPES = [
    ((7, 9), 4, 16),          # 18 values: a last block of 2
    ((5, 3, 13), 4, 32),      # 26 values in one partial block
    ((300, 64), 4, 16),       # vector loads
    ((1000, 1152), 4, 32),    # Gemma's row: 2304 values, 72 blocks
    ((6, 40), 8, 16),         # a last block of 8
    ((40, 2, 48), 8, 16),     # vector loads of 16 bytes
    ((3, 1), 4, 16),          # two values a row
]


@pytest.mark.parametrize("shape,bits,block", SHAPES, ids=str)
@pytest.mark.parametrize("zp", [True, False], ids=["zero_points", "default_zp"])
@pytest.mark.parametrize("scale_dtype", SCALE_DTYPES)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_random_tables_match_onnxruntime_and_numpy(shape, bits, block, zp, scale_dtype,
                                                   index_dtype):
    rng = _rng("random", shape, bits, zp, scale_dtype, index_dtype)
    data, scales, zps = _table(rng, shape, bits, block, zp, scale_dtype)
    idx = _indices(rng, (3, 50), shape[0], index_dtype, "raise")
    kw = dict(block_size=block, bits=bits)
    got = _call(data, idx, scales, zps, **kw)
    ctx = f"{shape} {bits}-bit {scale_dtype}"
    assert_same(got, quantized_ref(data, idx, scales, zps, **kw), ctx)
    if ORT is None and scale_dtype != "bfloat16":  # onnxruntime's CPU kernel has no bfloat16
        _vs_ort(got, data, idx, scales, zps, "raise", ctx, **kw)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,bits,block", [SHAPES[0], SHAPES[2], SHAPES[5]], ids=str)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_modes_match_onnxruntime_and_numpy(mode, shape, bits, block, index_dtype):
    rng = _rng("modes", mode, shape, index_dtype)
    data, scales, zps = _table(rng, shape, bits, block, True, "float16")
    idx = _indices(rng, (200,), shape[0], index_dtype, mode)
    kw = dict(block_size=block, bits=bits)
    got = _call(data, idx, scales, zps, mode=mode, fill_value=0, **kw)
    assert_same(got, quantized_ref(data, idx, scales, zps, mode=mode, **kw), f"{mode} {shape}")
    if ORT is None:
        _vs_ort(got, data, idx, scales, zps, mode, f"{mode} {shape}", **kw)


@pytest.mark.parametrize("shape,q,block", [((5, 40, 3), 1, 16), ((4, 3, 50, 2), -2, 16),
                                           ((30, 33, 2, 2), 1, 32)], ids=str)
@pytest.mark.parametrize("zp", [True, False], ids=["zero_points", "default_zp"])
@pytest.mark.parametrize("mode", MODES)
def test_middle_quantize_axis_matches_numpy(shape, q, block, zp, mode):
    rng = _rng("middle", shape, q, zp, mode)
    data, scales, zps = _table(rng, shape, 8, block, zp, "float32", q)
    idx = _indices(rng, (2, 3), shape[0], "int32", mode)
    kw = dict(quantize_axis=q, block_size=block, bits=8)
    got = _call(data, idx, scales, zps, mode=mode, fill_value=-2.0, **kw)
    assert_same(got, quantized_ref(data, idx, scales, zps, mode=mode, fill_value=-2.0, **kw),
                f"{shape} q={q}")


def test_many_rows_and_large_grid():
    rng = _rng("large")
    data, scales, zps = _table(rng, (4096, 1152), 4, 32, False, "float16")
    idx = rng.integers(-4096, 4096, size=70000).astype(np.int64)
    got = _call(data, idx, scales, zps, block_size=32, mode="wrap")
    assert_same(got, quantized_ref(data, idx, scales, zps, block_size=32, mode="wrap"), "large")


@pytest.mark.parametrize("bits,values", [(4, 32), (4, 16), (8, 16)])
@pytest.mark.parametrize("ru", [1, 2, 4])
@pytest.mark.parametrize("mode", ["wrap", "fill", "raise"])
def test_forced_chunk_widths_and_rows_per_thread(bits, values, ru, mode):
    """The plan knobs the variants benchmark forces, on a Gemma-width table."""
    rng = _rng("forced", bits, values, ru, mode)
    data, scales, zps = _table(rng, (512, 1152 * bits // 4), bits, 32, ru == 2, "float16")
    idx = _indices(rng, (3001,), 512, "int64", mode)
    d, i, s = cp.asarray(data), cp.asarray(idx), cp.asarray(scales)
    z = None if zps is None else cp.asarray(zps)
    kw = dict(block_size=32, bits=bits)
    plan = quantized_op.plan_of(d, i, s, z, mode=mode, values_per_thread=values,
                                rows_per_thread=ru, **kw)
    assert (plan.fields["values"], plan.fields["row_unroll"]) == (values, ru)
    fill = CUDA.fill_bytes(0.5, scales.dtype) if mode == "fill" else None
    bound = bind(plan, d.data.device_id, fill, CUDA, plan.out_dtype)
    got = execute(bound, d, d.data.ptr, i, None, None, d.data.device_id,
                  (("scales", s), ("zero_points", z)))
    assert_same(got.get(), quantized_ref(data, idx, scales, zps, mode=mode, fill_value=0.5, **kw),
                f"{bits}-bit {values} values x {ru} rows {mode}")


# ---------------------------------------------------------------- layouts, out=, streams
@pytest.mark.parametrize("bits,offset", [(4, 4), (8, 8), (4, 1)])
def test_misaligned_table_takes_byte_loads(bits, offset):
    rng = _rng("misaligned", bits, offset)
    data, scales, zps = _table(rng, (60, 64), bits, 16, True, "float32")
    buf = cp.empty(data.nbytes + offset, cp.uint8)
    view = buf[offset:].reshape(data.shape)
    view[...] = cp.asarray(data)
    idx = _indices(rng, (50,), 60, "int64", "raise")
    d, s, z = view, cp.asarray(scales), cp.asarray(zps)
    assert quantized_op.plan_of(d, cp.asarray(idx), s, z, block_size=16, bits=bits).fields["vec"] == 0
    got = cugather.gather_block_quantized(d, idx, s, z, block_size=16, bits=bits)
    assert_same(got.get(), quantized_ref(data, idx, scales, zps, block_size=16, bits=bits),
                f"offset {offset}")


def test_strided_table_is_copied_first():
    rng = _rng("strided")
    data, scales, zps = _table(rng, (8, 2, 32), 4, 16, True, "float16")
    big = cp.zeros((8, 2, 64), cp.uint8)
    big[..., ::2] = cp.asarray(data)
    idx = _indices(rng, (4,), 8, "int32", "raise")
    got = cugather.gather_block_quantized(big[..., ::2], idx, cp.asarray(scales), cp.asarray(zps),
                                          block_size=16)
    assert_same(got.get(), quantized_ref(data, idx, scales, zps, block_size=16), "strided")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("offset", [0, 8])
def test_out_is_written_in_place(mode, offset):
    rng = _rng("out", mode, offset)
    data, scales, zps = _table(rng, (9, 32), 4, 32, True, "float16")
    idx = _indices(rng, (2, 3), 9, "int64", mode)
    buf = cp.empty(2 * 3 * 64 * 2 + offset, cp.uint8)
    out = buf[offset:].view(cp.float16).reshape(2, 3, 64)
    got = cugather.gather_block_quantized(cp.asarray(data), cp.asarray(idx), cp.asarray(scales),
                                          cp.asarray(zps), block_size=32, mode=mode,
                                          fill_value=3, out=out)
    assert got.data.ptr == out.data.ptr
    assert_same(out.get(), quantized_ref(data, idx, scales, zps, block_size=32, mode=mode,
                                         fill_value=3), f"{mode} offset {offset}")


def test_raise_names_the_first_bad_index_and_leaves_out_untouched():
    rng = _rng("raise")
    data, scales, _ = _table(rng, (5, 16), 4, 16, False, "float32")
    d, s = cp.asarray(data), cp.asarray(scales)
    idx = cp.asarray(np.array([[1, 4], [-6, 7]], np.int64))
    out = cp.full((2, 2, 32), 7.0, cp.float32)
    msg = (r"index -6 is out of bounds for axis 0 with size 5 \(at indices\[1, 0\]; valid range "
           r"\[-5, 4\]\)")
    with pytest.raises(IndexError, match=msg):
        cugather.gather_block_quantized(d, idx, s, block_size=16, out=out)
    assert bool((out == 7).all())
    with pytest.raises(IndexError, match=msg):
        cugather.gather_block_quantized(d, idx, s, block_size=16)
    ok = cugather.gather_block_quantized(d, cp.asarray([0, 4]), s, block_size=16)  # still usable
    assert_same(ok.get(), quantized_ref(data, [0, 4], scales, block_size=16), "after the error")


def test_stream_and_host_indices():
    rng = _rng("stream")
    data, scales, zps = _table(rng, (20, 48), 8, 16, True, "float16")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        d, s, z = cp.asarray(data), cp.asarray(scales), cp.asarray(zps)
    stream.synchronize()
    got = cugather.gather_block_quantized(d, [3, -1, 0], s, z, block_size=16, bits=8,
                                          stream=stream)
    stream.synchronize()
    assert_same(got.get(), quantized_ref(data, [3, -1, 0], scales, zps, block_size=16, bits=8),
                "stream")


def test_argument_errors():
    d = cp.zeros((4, 8), cp.uint8)
    s = cp.ones((4, 1), cp.float16)
    with pytest.raises(TypeError, match="data must have dtype uint8"):
        cugather.gather_block_quantized(d.view(cp.int8), [0], s, block_size=16)
    with pytest.raises(TypeError, match="scales must have dtype float16, bfloat16 or float32"):
        cugather.gather_block_quantized(d, [0], s.astype(cp.float64), block_size=16)
    with pytest.raises(ValueError, match=r"scales must have shape \(4, 1\)"):
        cugather.gather_block_quantized(d, [0], cp.ones((4, 2), cp.float16), block_size=16)
    with pytest.raises(ValueError, match="bits must be 4 or 8"):
        cugather.gather_block_quantized(d, [0], s, block_size=16, bits=2)
    with pytest.raises(ValueError, match="block_size must be a power of 2"):
        cugather.gather_block_quantized(d, [0], s, block_size=24)
    with pytest.raises(ValueError, match="gather_axis must be 0"):
        cugather.gather_block_quantized(d, [0], s, block_size=16, gather_axis=1)
    with pytest.raises(TypeError, match="zero_points must have dtype uint8"):
        cugather.gather_block_quantized(d, [0], s, cp.zeros((4, 1), cp.int8), block_size=16)
    with pytest.raises(ValueError, match="mode must be one of"):
        cugather.gather_block_quantized(d, [0], s, block_size=16, mode="nearest")
    with pytest.raises(TypeError, match="out has dtype"):
        cugather.gather_block_quantized(d, [0], s, block_size=16, out=cp.empty((1, 16), cp.float32))


def test_repeated_calls_hit_the_plan_cache():
    rng = _rng("cache")
    data, scales, zps = _table(rng, (64, 64), 4, 32, True, "float16")
    d, s, z = cp.asarray(data), cp.asarray(scales), cp.asarray(zps)
    i = cp.asarray(rng.integers(0, 64, 10))
    quantized_op.cache_clear()
    first = cugather.gather_block_quantized(d, i, s, z, block_size=32, mode="wrap")
    for _ in range(3):
        again = cugather.gather_block_quantized(d, i, s, z, block_size=32, mode="wrap")
    info = quantized_op.cache_info()
    assert (info.misses, info.hits) == (1, 3)
    assert_same(again.get(), first.get(), "cached call")


def test_the_cached_path_takes_only_what_it_cached():
    """A repeated call is a key comparison and a launch; scales or zero points laid
    out otherwise (not contiguous) must not take the cached plan of contiguous ones."""
    rng = _rng("cached")
    data, scales, zps = _table(rng, (64, 32), 4, 16, True, "float16")
    idx = _indices(rng, (40,), 64, "int64", "wrap")
    d, s, z, i = _dev(data), _dev(scales), cp.asarray(zps), cp.asarray(idx)
    want = quantized_ref(data, idx, scales, zps, block_size=16, bits=4, mode="wrap")
    before = quantized_op.cache_info().hits
    for _ in range(3):
        got = cugather.gather_block_quantized(d, i, s, z, block_size=16, mode="wrap")
        assert_same(got.get(), want, "cached call")
    assert quantized_op.cache_info().hits >= before + 2
    wide = cp.zeros((scales.shape[0], 2 * scales.shape[1]), s.dtype)
    wide[:, ::2] = s
    strided = wide[:, ::2]  # the same values, every other element
    assert not strided.flags.c_contiguous
    got = cugather.gather_block_quantized(d, i, strided, z, block_size=16, mode="wrap")
    assert_same(got.get(), want, "strided scales")
