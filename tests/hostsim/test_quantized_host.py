"""Host tier: gather_block_quantized's kernels, as rendered for the GPU, compiled
with the system C++ compiler and run through the library's own runtime (the
op's ``run`` with the host backend; forced variants bound and executed by
the runtime), against onnxruntime's CPU kernel on one-node com.microsoft
models and against the NumPy reference -- every kernel key, onnxruntime's own
test cases, odd rows, partial blocks, both quantize axes, with and without
zero points, int32 and int64 indices, every mode, aligned and misaligned
operands, out=.
"""

import zlib

import numpy as np
import pytest

from cugather.ops import quantized as quantized_op
from cugather.plan.keys import all_kernel_keys
from cugather.runtime.binding import bind
from cugather.runtime.launch import execute
from support.quantized_reference import (MODES, ORT_CASES, bfloat16, ort_reason, ort_run, out_dtype,
                                         quantize, quantized_ref, resolve, ulp_distance)

runner = pytest.importorskip("hostsim.runner", reason="tests/hostsim is not available")
build = pytest.importorskip("hostsim.build")
if build.no_compiler_reason():
    pytest.skip(build.no_compiler_reason(), allow_module_level=True)

pytestmark = pytest.mark.hostsim

HOST, DEV = runner.HOST, runner.HOST_DEVICE
ORT = ort_reason()
needs_ort = pytest.mark.skipif(ORT is not None, reason=ORT or "")
SCALE_DTYPES = ["float16", "float32", "bfloat16"]


def _rng(*parts):
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def _scale_dtype(name):
    dt = out_dtype(name)
    if dt is None:
        pytest.skip("bfloat16 needs ml_dtypes (installed with onnx)")
    return dt


def host_quantized(data, indices, scales, zero_points=None, *, quantize_axis=-1, block_size=128,
                   bits=4, mode="raise", fill_value=0, out=None, gather_axis=0, **force):
    """``(result, plan)`` of gather_block_quantized on the host: the op's ``run`` with
    the host backend, or (``force``: kind, max_grid) the op's plan bound and executed
    by the runtime."""
    indices = runner.host_indices(indices)
    inputs = [a for a in (data, indices, scales, zero_points) if a is not None]
    plan = None  # the op copies a table that is not C-contiguous, then plans
    if data.flags.c_contiguous:
        plan = quantized_op.plan_of(data, indices, scales, zero_points, gather_axis=gather_axis,
                                    quantize_axis=quantize_axis, block_size=block_size,
                                    bits=bits, mode=mode, out=out, backend=HOST, **force)
    if not force:
        def call():
            return quantized_op.run(data, indices, scales, zero_points, gather_axis,
                                    quantize_axis, block_size, bits, out, mode, fill_value, None,
                                    DEV, HOST)
    else:
        def call():
            fill = HOST.fill_bytes(fill_value, scales.dtype) if mode == "fill" else None
            bound = bind(plan, DEV, fill, HOST, plan.out_dtype)
            return execute(bound, data, HOST.pointer(data), indices, out, None, DEV,
                           (("scales", scales), ("zero_points", zero_points)))
    return runner.run_on_host(call, inputs, out), plan


def _table(rng, shape, bits, block, zp, scale_dtype, quantize_axis=-1):
    """(data, scales, zero_points) in aligned host memory: random codes, scales and zero
    points for a table of ``shape`` bytes quantized along ``quantize_axis``."""
    dt = _scale_dtype(scale_dtype)
    values = shape[:-1] + (shape[-1] * (8 // bits),)
    if bits == 4:  # packed along the last axis, which is the quantize axis
        data, scales, zps = quantize(np.empty(values), bits=4, block_size=block,
                                     with_zero_points=zp, scale_dtype="float32", rng=rng)
    else:  # quantized along the last axis, then moved to quantize_axis
        q = quantize_axis % len(shape)
        moved = values[:q] + values[q + 1:] + (values[q],)
        data, scales, zps = quantize(np.empty(moved), bits=8, block_size=block,
                                     with_zero_points=zp, scale_dtype="float32", rng=rng)
        data, scales = np.moveaxis(data, -1, q), np.moveaxis(scales, -1, q)
        zps = None if zps is None else np.moveaxis(zps, -1, q)
    scales = (scales * 4).astype(dt)
    return (runner.device_copy(data), runner.device_copy(scales),
            None if zps is None else runner.device_copy(zps))


def _indices(rng, n_idx, n, dtype, mode):
    lo, hi = (-n, n) if mode == "raise" else (-3 * n - 2, 3 * n + 3)
    return rng.integers(lo, hi, size=n_idx).astype(dtype)


def _same(got, ref, ctx):
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape, got.dtype,
                                                               ref.dtype, ctx)
    g, r = np.ascontiguousarray(got), np.ascontiguousarray(ref)
    if g.tobytes() != r.tobytes():
        bad = np.argwhere(g.view(np.uint8).reshape(g.shape + (-1,))
                          != r.view(np.uint8).reshape(r.shape + (-1,)))
        first = tuple(bad[0][:-1])
        raise AssertionError(f"{ctx}: first difference at {first}: got {g[first]!r}, "
                             f"expected {r[first]!r}")


def _ref(data, idx, scales, zps, **kw):
    return quantized_ref(data, idx, scales, zps, **kw)


def _vs_ort(got, data, idx, scales, zps, n, mode, ctx, **kw):
    """got against onnxruntime given the indices the mode resolves to (rows the mode
    fills are given row 0 and zeroed here: onnxruntime's CPU kernel writes zeros for
    out-of-range indices in some releases and refuses them in others)."""
    pos, fill = resolve(idx, n, mode)
    want = ort_run(data, np.where(fill, 0, pos).astype(idx.dtype), scales, zps, **kw)
    want[fill] = 0
    if got.dtype == np.float32:
        _same(got, want, f"{ctx} vs onnxruntime")
    else:
        assert ulp_distance(got, want) <= 1, f"{ctx} vs onnxruntime"


# ---------------------------------------------------------------- every key
def _quantized_keys():
    return [k for k in all_kernel_keys() if k.kind.startswith("quantized")]


@pytest.mark.parametrize("key", _quantized_keys(), ids=lambda k: k.entry)
def test_every_quantized_key(key):
    general = key.kind.startswith("quantized_general")
    name = "bfloat16" if key.kind.endswith("bf16") else {2: "float16", 4: "float32"}[key.unit]
    rng = _rng("key", key)
    for bits, shape, q in ((4, (9, 3, 20), -1), (8, (9, 40, 3), 1 if general else -1)):
        data, scales, zps = _table(rng, shape, bits, 16, bits == 4, name, q)
        idx = _indices(rng, (4, 3), 9, key.index_dtype, key.mode)
        kw = dict(quantize_axis=q, block_size=16, bits=bits)
        got, plan = host_quantized(data, idx, scales, zps, mode=key.mode, fill_value=1.5,
                                   kind="general" if general else "rows", max_grid=2, **kw)
        assert plan.key == key, plan.describe()
        _same(got, _ref(data, idx, scales, zps, mode=key.mode, fill_value=1.5, **kw),
              f"{key.entry} bits={bits}")
    assert key in runner.executed_keys()


# ---------------------------------------------------------------- onnxruntime's cases
@pytest.mark.parametrize("case", ORT_CASES, ids=lambda c: c["name"])
@pytest.mark.parametrize("scale_dtype", ["float32", "float16"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_onnxruntime_cases(case, scale_dtype, index_dtype):
    data = runner.device_copy(case["data"])
    scales = runner.device_copy(case["scales"].astype(scale_dtype))
    zps = None if case["zero_points"] is None else runner.device_copy(case["zero_points"])
    idx = case["indices"].astype(index_dtype)
    kw = dict(quantize_axis=case["quantize_axis"], block_size=case["block_size"],
              bits=case["bits"])
    got, _ = host_quantized(data, idx, scales, zps, gather_axis=case["gather_axis"], **kw)
    _same(got, case["output"].astype(scale_dtype), case["name"])  # small integers: exact
    if ORT is None:
        _same(got, ort_run(data, idx, scales, zps, gather_axis=case["gather_axis"], **kw),
              f"{case['name']} vs onnxruntime")


def test_onnxruntime_invalid_index_case_gives_zeros_in_fill_mode():
    case = ORT_CASES[0]  # onnxruntime's InvalidIndices: index 2 of 2 rows
    data, scales = runner.device_copy(case["data"]), runner.device_copy(case["scales"])
    zps = runner.device_copy(case["zero_points"])
    kw = dict(quantize_axis=2, block_size=16, bits=case["bits"])
    got, _ = host_quantized(data, np.array([2], np.int32), scales, zps, mode="fill", **kw)
    assert got.shape == (1, 3, 18) and not got.any()
    with pytest.raises(IndexError, match=r"index 2 is out of bounds for axis 0 with size 2 "
                                         r"\(at indices\[0\]; valid range \[-2, 1\]\)"):
        host_quantized(data, np.array([2], np.int32), scales, zps, **kw)


# ---------------------------------------------------------------- random tables
SHAPES = [  # (bytes shape, bits, block): odd rows, partial blocks, odd value counts, vector rows
    ((7, 9), 4, 16),          # 18 values: a last block of 2
    ((5, 3, 13), 4, 32),      # 26 values in one partial block, 3 middle rows
    ((11, 64), 4, 16),        # vector loads: 64 bytes a row
    ((6, 1152), 4, 32),       # Gemma's row: 2304 values, 72 blocks
    ((6, 40), 8, 16),         # a last block of 8
    ((4, 2, 48), 8, 16),      # vector loads of 16 bytes
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
    idx = _indices(rng, (3, 5), shape[0], index_dtype, "raise")
    kw = dict(block_size=block, bits=bits)
    got, plan = host_quantized(data, idx, scales, zps, **kw)
    ctx = f"{shape} {bits}-bit {scale_dtype} {plan.reason}"
    _same(got, _ref(data, idx, scales, zps, **kw), ctx)
    if ORT is None and scale_dtype != "bfloat16":  # onnxruntime's CPU kernel has no bfloat16
        _vs_ort(got, data, idx, scales, zps, shape[0], "raise", ctx, **kw)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,bits,block", [SHAPES[0], SHAPES[2], SHAPES[5]], ids=str)
def test_modes_match_onnxruntime_and_numpy(mode, shape, bits, block):
    rng = _rng("modes", mode, shape)
    data, scales, zps = _table(rng, shape, bits, block, True, "float16")
    idx = _indices(rng, (13,), shape[0], "int64", mode)
    kw = dict(block_size=block, bits=bits)
    got, _ = host_quantized(data, idx, scales, zps, mode=mode, fill_value=0, **kw)
    _same(got, _ref(data, idx, scales, zps, mode=mode, **kw), f"{mode} {shape}")
    if ORT is None:
        _vs_ort(got, data, idx, scales, zps, shape[0], mode, f"{mode} {shape}", **kw)


@pytest.mark.parametrize("shape,q,block", [((5, 40, 3), 1, 16), ((4, 3, 50, 2), -2, 16),
                                           ((3, 33, 2, 2), 1, 32)], ids=str)
@pytest.mark.parametrize("zp", [True, False], ids=["zero_points", "default_zp"])
@pytest.mark.parametrize("mode", MODES)
def test_middle_quantize_axis_matches_numpy(shape, q, block, zp, mode):
    """8-bit tables quantized along a middle axis (the schema allows it; onnxruntime's
    CPU kernel takes only the last, so NumPy is the reference)."""
    rng = _rng("middle", shape, q, zp, mode)
    data, scales, zps = _table(rng, shape, 8, block, zp, "float32", q)
    idx = _indices(rng, (2, 3), shape[0], "int32", mode)
    kw = dict(quantize_axis=q, block_size=block, bits=8)
    got, plan = host_quantized(data, idx, scales, zps, mode=mode, fill_value=-2.0, **kw)
    assert plan.key.kind == "quantized_general"
    _same(got, _ref(data, idx, scales, zps, mode=mode, fill_value=-2.0, **kw), f"{shape} q={q}")


@pytest.mark.parametrize("shape,bits,block", [SHAPES[1], SHAPES[3], SHAPES[5]], ids=str)
def test_general_kernel_agrees_on_the_last_axis(shape, bits, block):
    rng = _rng("general-last", shape, bits)
    data, scales, zps = _table(rng, shape, bits, block, True, "float16")
    idx = _indices(rng, (7,), shape[0], "int64", "wrap")
    kw = dict(block_size=block, bits=bits, mode="wrap")
    rows, p1 = host_quantized(data, idx, scales, zps, **kw)
    general, p2 = host_quantized(data, idx, scales, zps, kind="general", **kw)
    assert p1.key.kind == "quantized" and p2.key.kind == "quantized_general"
    _same(rows, _ref(data, idx, scales, zps, **kw), "rows")
    _same(general, rows, "general")


# ---------------------------------------------------------------- layouts and out=
def _at_offset(arr, offset):
    """``arr``'s values, C-contiguous, ``offset`` bytes past a 256-aligned address."""
    buf = runner.device_empty((arr.nbytes + offset,), np.uint8)[offset:]
    view = buf.view(arr.dtype).reshape(arr.shape)
    view[...] = arr
    return view


@pytest.mark.parametrize("bits,offset", [(4, 4), (8, 8), (4, 1)])
def test_misaligned_table_takes_byte_loads(bits, offset):
    rng = _rng("misaligned", bits, offset)
    data, scales, zps = _table(rng, (6, 64), bits, 16, True, "float32")
    data = _at_offset(data, offset)
    idx = _indices(rng, (5,), 6, "int64", "raise")
    got, plan = host_quantized(data, idx, scales, zps, block_size=16, bits=bits)
    assert plan.fields["vec"] == 0, plan.describe()
    _same(got, _ref(data, idx, scales, zps, block_size=16, bits=bits), f"offset {offset}")


def test_strided_operands_are_copied_first():
    rng = _rng("strided")
    data, scales, zps = _table(rng, (8, 2, 32), 4, 16, True, "float16")
    big = runner.device_empty((8, 2, 64), np.uint8)
    big[..., ::2] = data
    view = big[..., ::2]
    idx = _indices(rng, (4,), 8, "int32", "raise")
    got, _ = host_quantized(view, idx, scales, zps, block_size=16)
    _same(got, _ref(data, idx, scales, zps, block_size=16), "strided data")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("offset", [0, 8])
def test_out_is_written_in_place(mode, offset):
    rng = _rng("out", mode, offset)
    data, scales, zps = _table(rng, (9, 32), 4, 32, True, "float16")
    idx = _indices(rng, (2, 3), 9, "int64", mode)
    out = runner.guarded_out((2, 3, 64), np.float16, offset)
    got, plan = host_quantized(data, idx, scales, zps, block_size=32, mode=mode, fill_value=3,
                               out=out)
    assert plan.fields["vec"] == int(offset == 0)
    ref = _ref(data, idx, scales, zps, block_size=32, mode=mode, fill_value=3)
    _same(got, ref, f"{mode} offset {offset}")
    _same(out, ref, "out")


def test_raise_leaves_out_untouched_and_names_the_first_bad_index():
    rng = _rng("raise")
    data, scales, zps = _table(rng, (5, 16), 4, 16, False, "float32")
    idx = np.array([[1, 4], [-6, 7]], np.int64)
    out = runner.guarded_out((2, 2, 32), np.float32)
    before = out.tobytes()
    with pytest.raises(IndexError, match=r"index -6 is out of bounds for axis 0 with size 5 "
                                         r"\(at indices\[1, 0\]; valid range \[-5, 4\]\)"):
        host_quantized(data, idx, scales, zps, block_size=16, out=out)
    assert out.tobytes() == before
    with pytest.raises(IndexError, match=r"index -6 .*at indices\[1, 0\]"):
        host_quantized(data, idx, scales, zps, block_size=16)  # one launch: the kernel checks


def test_empty_and_zero_row_tables():
    rng = _rng("empty")
    data, scales, zps = _table(rng, (4, 8), 4, 16, True, "float16")
    got, plan = host_quantized(data, np.zeros((0, 2), np.int64), scales, zps, block_size=16)
    assert got.shape == (0, 2, 16) and plan.main is None
    none = runner.device_copy(np.zeros((0, 8), np.uint8))
    s0 = runner.device_copy(np.zeros((0, 1), np.float16))
    with pytest.raises(IndexError, match="index 0 is out of bounds for axis 0 with size 0"):
        host_quantized(none, np.array([0]), s0, None, block_size=16)
    filled, _ = host_quantized(none, np.array([0, 1]), s0, None, block_size=16, mode="fill",
                               fill_value=2)
    assert filled.tolist() == [[2.0] * 16] * 2


def test_fill_value_in_the_scales_dtype():
    rng = _rng("fill")
    for name in SCALE_DTYPES:
        data, scales, zps = _table(rng, (4, 24), 8, 16, False, name)
        idx = np.array([9, 0, -9], np.int64)
        got, _ = host_quantized(data, idx, scales, zps, block_size=16, bits=8, mode="fill",
                                fill_value=-0.0)
        _same(got, _ref(data, idx, scales, zps, block_size=16, bits=8, mode="fill",
                        fill_value=-0.0), name)
        assert np.signbit(got[0].astype(np.float32)).all()


def test_plans_are_cached_per_call_key():
    rng = _rng("cache")
    data, scales, zps = _table(rng, (4, 16), 4, 16, True, "float32")
    idx = runner.host_indices(np.array([0, 1]))
    quantized_op.cache_clear()

    def call():
        return quantized_op.run(data, idx, scales, zps, 0, -1, 16, 4, None, "wrap", 0, None,
                                DEV, HOST)

    runner.run_on_host(call, [data, idx, scales, zps])
    runner.run_on_host(call, [data, idx, scales, zps])
    info = quantized_op.cache_info()
    assert (info.hits, info.misses, info.currsize) == (1, 1, 1)
    with pytest.raises(ValueError, match="scales must have shape"):
        quantized_op.run(data, idx, scales[:, :0], zps, 0, -1, 16, 4, None, "wrap", 0, None,
                         DEV, HOST)
    with pytest.raises(ValueError, match="bits must be 4 or 8"):
        quantized_op.run(data, idx, scales, zps, 0, -1, 16, 2, None, "wrap", 0, None, DEV, HOST)


def test_bfloat16_needs_no_onnxruntime():
    if bfloat16() is None:
        pytest.skip("bfloat16 needs ml_dtypes (installed with onnx)")
    rng = _rng("bf16")
    data, scales, zps = _table(rng, (6, 21), 4, 16, True, "bfloat16")
    idx = _indices(rng, (4,), 6, "int32", "raise")
    got, plan = host_quantized(data, idx, scales, zps, block_size=16)
    assert plan.key.kind == "quantized_bf16" and got.dtype == bfloat16()
    _same(got, _ref(data, idx, scales, zps, block_size=16), "bfloat16")


# ---------------------------------------------------------------- the vector path's tiles
TILES = [  # (bytes shape, bits, block, values per thread): rows of one chunk step or several
    ((7, 64), 4, 32, 32),       # 4 chunks of 32 values a row: 64 threads per row
    ((7, 64), 4, 16, 16),
    ((5, 2, 48), 8, 16, 16),    # middle rows: output row r reads data row idx * 2 + r % 2
    ((3, 4160), 4, 64, 32),     # 260 chunks: more than 256 threads, the chunk loop steps
    ((4, 1152), 4, 32, 16),     # Gemma's row in 16-value chunks
]


@pytest.mark.parametrize("shape,bits,block,values", TILES, ids=str)
@pytest.mark.parametrize("ru", [1, 2, 3, 4])
@pytest.mark.parametrize("mode", MODES)
def test_rows_per_thread_and_chunk_widths(shape, bits, block, values, ru, mode):
    """Forced chunk widths and rows per thread, one block (row tiles in a grid-stride
    loop, the last tile partial), bad rows in every mode."""
    rng = _rng("tiles", shape, bits, values, ru, mode)
    data, scales, zps = _table(rng, shape, bits, block, ru % 2 == 0, "float16")
    idx = _indices(rng, (75,), shape[0], "int32" if ru % 2 else "int64", mode)
    kw = dict(block_size=block, bits=bits)
    got, plan = host_quantized(data, idx, scales, zps, mode=mode, fill_value=-1.25,
                               values_per_thread=values, rows_per_thread=ru, max_grid=1, **kw)
    f = plan.fields
    assert (f["vec"], f["values"], f["row_unroll"], plan.grid[0]) == (1, values, ru, 1), \
        plan.describe()
    _same(got, _ref(data, idx, scales, zps, mode=mode, fill_value=-1.25, **kw),
          f"{shape} {bits}-bit {values} values x {ru} rows {mode}")


@pytest.mark.parametrize("scale_dtype", SCALE_DTYPES)
def test_wide_chunks_in_every_output_type(scale_dtype):
    rng = _rng("wide", scale_dtype)
    data, scales, zps = _table(rng, (9, 128), 4, 32, True, scale_dtype)
    idx = _indices(rng, (37,), 9, "int64", "raise")
    got, plan = host_quantized(data, idx, scales, zps, block_size=32, values_per_thread=32,
                               rows_per_thread=4)
    assert (plan.fields["values"], plan.fields["row_unroll"]) == (32, 4)
    _same(got, _ref(data, idx, scales, zps, block_size=32), scale_dtype)
