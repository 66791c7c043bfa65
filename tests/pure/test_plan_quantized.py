"""Pure tier: GatherBlockQuantized's shapes, plans and validation, and the NumPy
reference against values computed by hand and onnxruntime's own expectations."""

import numpy as np
import pytest

from cugather.ops import quantized as quantized_op
from cugather.plan.core import DeviceLimits
from cugather.plan.keys import KernelKey, all_kernel_keys
from cugather.plan.quantized import plan_quantized, quantized_shapes
from cugather.plan.tuning import MAX_THREADS, QUANT_MAX_RU, QUANT_VALUES, QUANT_WIDE_VALUES
from cugather.runtime.key import Geometry
from support.quantized_reference import (ORT_CASES, bfloat16, dequantize, pack, quantized_ref,
                                         ulp_distance, unpack)


# ---------------------------------------------------------------- shapes
@pytest.mark.parametrize("shape,bits,block,q,values,scales,zps", [
    ((10, 7), 4, 16, -1, (10, 14), (10, 1), (10, 1)),
    ((10, 9), 4, 16, 1, (10, 18), (10, 2), (10, 1)),
    ((5, 2, 40), 4, 16, -1, (5, 2, 80), (5, 2, 5), (5, 2, 3)),
    ((262144, 1152), 4, 32, -1, (262144, 2304), (262144, 72), (262144, 36)),
    ((6, 33), 8, 16, -1, (6, 33), (6, 3), (6, 3)),
    ((4, 40, 3), 8, 16, 1, (4, 40, 3), (4, 3, 3), (4, 3, 3)),
    ((4, 5, 6, 7), 8, 32, -3, (4, 5, 6, 7), (4, 1, 6, 7), (4, 1, 6, 7)),
])
def test_shapes_by_hand(shape, bits, block, q, values, scales, zps):
    s = quantized_shapes(shape, bits, block, 0, q)
    assert (s.values, s.scales, s.zero_points) == (values, scales, zps)
    assert s.gather_axis == 0 and s.quantize_axis == q % len(shape)


@pytest.mark.parametrize("kwargs,exc,part", [
    (dict(bits=2), ValueError, "bits must be 4 or 8 for uint8 data, got 2"),
    (dict(bits=3), ValueError, "got 3"),
    (dict(bits=4.0), TypeError, "bits must be an integer, got float 4.0"),
    (dict(bits=True), TypeError, "bits must be an integer"),
    (dict(block_size=8), ValueError, "block_size must be a power of 2 and not less than 16, got 8"),
    (dict(block_size=17), ValueError, "got 17"),
    (dict(block_size=48), ValueError, "got 48"),
    (dict(gather_axis=1), ValueError, "gather_axis must be 0 (or -3) for uint8 data"),
    (dict(gather_axis=3), ValueError, "gather_axis 3 is out of bounds for data of rank 3"),
    (dict(quantize_axis=-4), ValueError, "quantize_axis -4 is out of bounds"),
    (dict(quantize_axis=0, bits=8), ValueError, "quantize_axis (0) and gather_axis (0) must differ"),
    (dict(quantize_axis=1), ValueError, "with bits=4 the values are packed along the last axis"),
])
def test_shape_errors_name_the_argument(kwargs, exc, part):
    args = dict(bits=4, block_size=16, gather_axis=0, quantize_axis=-1) | kwargs
    with pytest.raises(exc, match=None) as info:
        quantized_shapes((2, 3, 4), **args)
    assert part in str(info.value)


def test_rank_one_is_refused():
    with pytest.raises(ValueError, match="at least two dimensions"):
        quantized_shapes((16,), 8, 16, 0, 0)


# ---------------------------------------------------------------- plans
def _plan(shape, n_idx=5, **kw):
    args = dict(out_dtype="float16", bits=4, block_size=32, mode="wrap") | kw
    idx_shape = n_idx if isinstance(n_idx, tuple) else (n_idx,)
    return plan_quantized(shape, idx_shape, "int64", **args)


def test_rows_plan_of_an_embedding_table():
    p = _plan((262144, 1152), 65536)
    k = p.key
    assert k == KernelKey("quantized", 2, "int64", "fast64", "wrap") and k in set(all_kernel_keys())
    f = p.fields
    assert (f["rows"], f["m1"], f["nq"], f["m2"], f["nb"], f["nzq"], f["row_bytes"]) == (
        65536, 1, 2304, 1, 72, 36, 1152)
    # 16 values (one 8-byte load) of 4 rows per thread, 144 threads per row, one
    # row per block row: 4 rows per block.
    assert f["chunks"] == 2304 // QUANT_VALUES == 144 and f["vec"] == 1
    assert (f["values"], f["row_unroll"]) == (QUANT_VALUES, QUANT_MAX_RU) == (16, 4)
    assert p.block == (144, 1, 1) and p.grid == (65536 // 4, 1, 1)
    assert (f["bits"], f["log2_block"], f["default_zp"]) == (4, 5, 8)
    assert p.out_shape == (65536, 2304) and p.check is None


@pytest.mark.parametrize("shape,bits,data_align,out_align,vec", [
    ((100, 64), 4, 256, 256, 1),
    ((100, 60), 4, 256, 256, 0),     # 60 packed bytes: not a multiple of 8
    ((100, 64), 4, 4, 256, 0),       # table at an address only 4-byte aligned
    ((100, 64), 4, 256, 8, 0),       # out= only 8-byte aligned
    ((100, 64), 8, 256, 256, 1),
    ((100, 72), 8, 256, 256, 0),     # 72 bytes: not a multiple of 16
    ((100, 64), 8, 8, 256, 0),
])
def test_vector_loads_need_aligned_rows(shape, bits, data_align, out_align, vec):
    p = _plan(shape, bits=bits, block_size=16, data_align=data_align, out_align=out_align)
    assert p.fields["vec"] == vec, p.describe()


@pytest.mark.parametrize("nq_bytes,chunks,block", [(1, 1, (1, 256, 1)), (8, 1, (1, 256, 1)),
                                                   (9, 2, (2, 128, 1)), (100, 13, (13, 19, 1)),
                                                   (4096, 512, (256, 1, 1))])
def test_rows_block_shape(nq_bytes, chunks, block):
    p = _plan((7, nq_bytes), 3)
    assert p.fields["chunks"] == chunks and p.block == block
    assert block[0] * block[1] <= MAX_THREADS
    assert p.grid[0] == -(-3 // block[1])


@pytest.mark.parametrize("shape,bits,block,values", [
    ((9, 64), 4, 32, 16),    # 8-byte loads of 16 values (32 only when forced)
    ((9, 64), 4, 16, 16),    # block 16: a chunk of 32 would span two blocks
    ((9, 40), 4, 32, 16),    # 40 bytes: whole 8-byte loads only
    ((9, 64), 8, 32, 16),    # 8-bit: one 16-byte load of 16 values
    ((9, 60), 4, 32, 0),     # byte loads
])
def test_values_per_chunk(shape, bits, block, values):
    f = _plan(shape, bits=bits, block_size=block).fields
    assert (f["vec"], f["values"]) == (int(values > 0), values or QUANT_VALUES)
    assert f["chunks"] == -(-(shape[1] * 8 // bits) // f["values"])


def test_rows_per_thread_follow_the_waves():
    lim = DeviceLimits(sm_count=132)
    big, mid, small = (_plan((262144, 1152), n, limits=lim).fields["row_unroll"]
                       for n in (65536, 8192, 64))
    assert (big, mid, small) == (4, 4, 1)
    few = _plan((262144, 1152), 8192, limits=DeviceLimits(sm_count=16)).fields["row_unroll"]
    assert few == 4
    scalar = _plan((9, 60), 65536)  # byte loads: one row per thread
    assert scalar.fields["row_unroll"] == 1 and scalar.grid[0] == -(-65536 // scalar.block[1])


@pytest.mark.parametrize("v,ru", [(16, 1), (16, 2), (32, 1), (32, 4)])
def test_forced_values_and_rows_per_thread(v, ru):
    p = _plan((262144, 1152), 65536, values_per_thread=v, rows_per_thread=ru)
    f = p.fields
    assert (f["values"], f["row_unroll"], f["chunks"]) == (v, ru, 2304 // v)
    ty = MAX_THREADS // (2304 // v)
    assert p.block == (2304 // v, ty, 1) and p.grid[0] == -(-65536 // (ty * ru))


def test_forced_knobs_are_checked():
    with pytest.raises(ValueError, match=r"values_per_thread must be one of \(16,\) with bits=8"):
        _plan((9, 64), bits=8, values_per_thread=32)
    with pytest.raises(ValueError, match="values_per_thread=32 needs chunks of one block"):
        _plan((9, 64), block_size=16, values_per_thread=32)
    with pytest.raises(ValueError, match="values_per_thread=16 needs"):
        _plan((9, 60), values_per_thread=16)
    with pytest.raises(ValueError, match=r"rows_per_thread must be in \[1, 4\], got 5"):
        _plan((9, 64), rows_per_thread=5)


def test_middle_quantize_axis_takes_the_general_kernel():
    p = _plan((6, 40, 5), (2, 3), bits=8, block_size=16, quantize_axis=1, out_dtype="bfloat16")
    assert p.key == KernelKey("quantized_general_bf16", 2, "int64", "fast64", "wrap")
    f = p.fields
    assert (f["total"], f["m1"], f["nq"], f["m2"], f["nb"], f["nzq"]) == (2 * 3 * 40 * 5, 1, 40, 5, 3, 3)
    assert p.out_shape == (2, 3, 40, 5) and p.block == (MAX_THREADS, 1, 1)


def test_forced_kinds():
    assert _plan((4, 3, 8), kind="general").key.kind == "quantized_general"
    assert _plan((4, 3, 8), out_dtype="float32").key.unit == 4
    with pytest.raises(ValueError, match="quantize axis last"):
        _plan((6, 40, 5), bits=8, block_size=16, quantize_axis=1, kind="rows")
    with pytest.raises(ValueError, match="kind must be"):
        _plan((4, 8), kind="strided")
    with pytest.raises(TypeError, match="scales must be float16, bfloat16 or float32, got float64"):
        _plan((4, 8), out_dtype="float64")


def test_raise_mode_plans_a_check_and_empty_outputs_no_gather():
    p = _plan((9, 8), 4, mode="raise")
    assert p.check.key.kind == "check" and p.check.fields["axis_len"] == 9
    assert p.main.key.mode == "raise"
    empty = _plan((9, 8), 0, mode="raise")
    assert empty.main is None and empty.check is None and empty.out_shape == (0, 16)
    no_rows = _plan((0, 8), 3, mode="raise")
    assert no_rows.main is not None and no_rows.check is not None
    with pytest.raises(IndexError, match="cannot take indices from axis 0 of size 0"):
        _plan((0, 8), 3, mode="clip")


def test_index_error_names_value_position_axis_and_range():
    p = _plan((9, 8), 4, mode="raise")
    e = p.index_error(2, -10, (2, 2))
    assert str(e) == ("index -10 is out of bounds for axis 0 with size 9 (at indices[1, 0]; "
                      "valid range [-9, 8])")


# ---------------------------------------------------------------- validation (no GPU)
def _geo(data_shape=(4, 8), scales_shape=(4, 1), zp_shape=None, *, data_dtype="uint8",
         scales_dtype="float16", zp_dtype="uint8", bits=4, block=16, q=-1):
    return Geometry("quantized", None, 0, data_shape,
                    tuple(int(s) for s in np.empty(data_shape, np.uint8).strides),
                    np.dtype(scales_dtype), (3,), np.dtype("int32"), 256, 256, 0, "raise", None,
                    (q, block, bits, np.dtype(data_dtype), scales_shape, np.dtype(scales_dtype),
                     zp_shape, None if zp_shape is None else np.dtype(zp_dtype)))


@pytest.mark.parametrize("kwargs,exc,part", [
    (dict(data_dtype="int8"), TypeError, "data must have dtype uint8 (packed 4-bit or 8-bit "
                                         "values), got int8"),
    (dict(scales_dtype="float64"), TypeError, "scales must have dtype float16, bfloat16 or "
                                              "float32, got float64"),
    (dict(scales_shape=(4, 2)), ValueError, "scales must have shape (4, 1) for data of shape "
                                            "(4, 8) with bits=4, block_size=16, "
                                            "quantize_axis=-1; got (4, 2)"),
    (dict(zp_shape=(4, 1), zp_dtype="int8"), TypeError, "zero_points must have dtype uint8"),
    (dict(data_shape=(4, 40), scales_shape=(4, 5), zp_shape=(4, 5)), ValueError,
     "zero_points must have shape (4, 3) (two 4-bit zero points per byte)"),
    (dict(data_shape=(4, 40), scales_shape=(4, 3), zp_shape=(4, 2), bits=8), ValueError,
     "zero_points must have shape (4, 3) for data"),
])
def test_operand_errors(kwargs, exc, part):
    with pytest.raises(exc) as info:
        quantized_op.plan_for(_geo(**kwargs), DeviceLimits())
    assert part in str(info.value)


def test_valid_operands_plan():
    p = quantized_op.plan_for(_geo((4, 40), (4, 5), (4, 3)), DeviceLimits())
    assert p.key.kind == "quantized" and p.out_shape == (3, 80)


# ---------------------------------------------------------------- the reference
def test_unpack_is_low_nibble_first():
    packed = np.array([[0x21, 0xF3]], np.uint8)
    assert unpack(packed, 4).tolist() == [[1, 2, 3, 15]]
    assert unpack(packed, 8).tolist() == [[0x21, 0xF3]]
    assert pack(np.array([[1, 2, 3]]), 4).tolist() == [[0x21, 0x03]]
    col = pack(np.array([[1], [2], [3]]), 4, axis=0)
    assert col.tolist() == [[0x21], [0x03]] and unpack(col, 4, axis=0)[:, 0].tolist() == [1, 2, 3, 0]


def test_reference_by_hand():
    # 2 rows of 32 4-bit values, block 16: scales per half row, zero points 2 per byte.
    codes = np.arange(64).reshape(2, 32) % 16
    data = pack(codes, 4)
    scales = np.array([[0.5, 2.0], [1.0, -1.0]], np.float32)
    zps = pack(np.array([[3, 8], [0, 15]]), 4)  # (2, 1): one byte per row
    got = quantized_ref(data, [1, 0, -1], scales, zps, block_size=16, bits=4)
    want = np.empty((3, 32), np.float32)
    for o, r in enumerate([1, 0, 1]):
        zp = [[3, 8], [0, 15]][r]
        for j in range(32):
            want[o, j] = (codes[r, j] - zp[j // 16]) * scales[r, j // 16]
    assert got.dtype == np.float32 and np.array_equal(got, want)
    default = quantized_ref(data, [0], scales, None, block_size=16, bits=4)
    assert default[0, 17] == (codes[0, 17] - 8) * 2.0


def test_reference_modes_by_hand():
    data = np.array([[136], [152], [168]], np.uint8)  # one 8-bit value per row: 8, 24, 40 above 128
    scales = np.ones((3, 1), np.float32)
    ref = lambda idx, mode: quantized_ref(data, idx, scales, bits=8, block_size=16, mode=mode,
                                          fill_value=-1)[:, 0].tolist()
    assert ref([0, 2, -1, -3], "raise") == [8, 40, 40, 8]
    assert ref([3, -4, 7], "wrap") == [8, 40, 24]
    assert ref([3, -4, 7, -1], "clip") == [40, 8, 40, 40]
    assert ref([3, -4, 1], "fill") == [-1, -1, 24]
    with pytest.raises(IndexError, match="index 3 is out of bounds"):
        ref([0, 3], "raise")


def test_reference_rounds_once_to_the_scales_dtype():
    data = np.array([[0x9F]], np.uint8)  # codes 15, 9
    scales = np.array([[0.1]], np.float16)
    got = dequantize(data, scales, block_size=16, bits=4)
    f = np.float32(np.float16(0.1))
    assert got.dtype == np.float16
    assert got.tolist() == [[np.float16(np.float32(7) * f), np.float16(np.float32(1) * f)]]
    bf16 = bfloat16()
    if bf16 is not None:
        s = np.array([[0.1]], np.float32).astype(bf16)
        out = dequantize(data, s, block_size=16, bits=4)
        assert out.dtype == bf16
        assert out.astype(np.float32)[0, 0] == np.float32(7 * s.astype(np.float32)[0, 0]).astype(
            bf16).astype(np.float32)


@pytest.mark.parametrize("case", ORT_CASES, ids=lambda c: c["name"])
def test_reference_matches_onnxruntimes_expected_outputs(case):
    got = quantized_ref(case["data"], case["indices"], case["scales"], case["zero_points"],
                        quantize_axis=case["quantize_axis"], block_size=case["block_size"],
                        bits=case["bits"])
    assert np.array_equal(got, case["output"]), (got, case["output"])


def test_ulp_distance():
    a = np.array([1.0, -0.0, 2.0], np.float16)
    b = np.array([np.nextafter(np.float16(1), np.float16(2)), 0.0, 2.0], np.float16)
    assert ulp_distance(a, b) == 1 and ulp_distance(a, a) == 0
    c = np.array([-np.float32(1e-45), np.float32(1e-45)], np.float32)
    assert ulp_distance(c, np.zeros(2, np.float32)) == 1


# ---------------------------------------------------------------- the benchmark's pieces
@pytest.mark.parametrize("bits,zp", [(4, False), (4, True), (8, False), (8, True)])
def test_bench_composed_version_matches_the_reference(bits, zp, monkeypatch):
    """The CuPy composition the benchmark times, run with NumPy standing in for CuPy
    (the same calls), on a table of the benchmark's row width."""
    from cugather.bench import quantized as bench

    monkeypatch.setattr(bench, "ROWS", 40)
    rng = np.random.default_rng(bits + zp)
    nb = bench.VALUES // bench.BLOCK
    t = {"data": rng.integers(0, 256, (40, bench.VALUES * bits // 8)).astype(np.uint8),
         "scales": (rng.standard_normal((40, nb)) * 0.02).astype(np.float16),
         "zp": (rng.integers(0, 256, (40, (nb + 1) // 2 if bits == 4 else nb)).astype(np.uint8)
                if zp else None), "bits": bits}
    idx = rng.integers(0, 40, 9)
    got = bench._cupy_composed(np, t)(idx)
    want = quantized_ref(t["data"], idx, t["scales"], t["zp"], block_size=bench.BLOCK, bits=bits)
    assert got.dtype == np.float16 and got.tobytes() == want.tobytes()
    assert bench._moved(t, 9) == bench.moved_bytes(bits, 9, zp)
    assert bench.moved_bytes(4, 65536) == 65536 * (1152 + 144 + 4608)


def test_bench_table_formats_a_result():
    from cugather.bench.quantized import table

    st = {"ms": 0.1, "gbps": 3000.0, "spread": 0.01}
    case = {"name": "q4_gemma_65536", "moved_bytes": 386924544,
            "impl": {"copy": st, "cugather": dict(st, of_copy=0.9), "cupy_composed": st},
            "checked": {"cugather": True, "cupy_composed": False},
            "vs_plain_f16_gather": 1.5}
    text = table({"count": "bytes", "cases": [case], "host_us": {"gather_block_quantized wrap": 9.0}})
    assert "q4_gemma_65536" in text and "90%" in text and "NO: cupy_composed" in text
    assert "gather_block_quantized wrap" in text


def test_bench_variants_are_plannable_and_formatted():
    from cugather.bench import quantized as bench

    four, eight = bench.variants(4), bench.variants(8)
    assert len(four) == 2 * 3 * len(bench.VARIANT_MIN_BLOCKS) and len(eight) == len(four) // 2
    for bits, cands in ((4, four), (8, eight)):
        for v, ru, _ in cands:  # every candidate is a plan of the benchmark's table
            p = _plan((bench.ROWS, bench.VALUES * bits // 8), 65536, bits=bits,
                      block_size=bench.BLOCK, values_per_thread=v, rows_per_thread=ru)
            assert (p.fields["values"], p.fields["row_unroll"], p.fields["vec"]) == (v, ru, 1)
    row = {"default": True, "values": 32, "rows": 4, "min_blocks": "key", "block": [72, 3, 1],
           "grid": [5462, 1, 1], "registers": 80, "spill_bytes": 0, "checked": True,
           "ms": 0.12, "gbps": 3300.0, "of_copy": 0.8}
    bad = dict(row, default=False, checked=False, ms=None, gbps=None, of_copy=None)
    text = bench.variants_table({"count": "bytes", "cases": [{
        "name": "q4_gemma_65536", "moved_bytes": 386924544, "copy_gbps": 4125.0,
        "default_plan": "plan", "variants": [bad, row]}]})
    assert "80%" in text and "<- default" in text and "MISMATCH" in text
    assert text.index("<- default") < text.index("MISMATCH")
