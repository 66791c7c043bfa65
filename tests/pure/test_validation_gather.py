"""Argument validation that needs no GPU: NumPy-style errors naming the value."""

import importlib.util

import numpy as np
import pytest

import cugather
from cugather import validate as _arrays

AxisError = getattr(getattr(np, "exceptions", np), "AxisError")


def test_import_touches_no_gpu_and_exports_api():
    for name in ("gather", "take", "GatherOp", "GatherPlan", "__version__"):
        assert hasattr(cugather, name)


@pytest.mark.parametrize("mode", ["bogus", "", None, 3, "RAISE"])
def test_bad_mode(mode):
    with pytest.raises(ValueError, match="mode must be one of"):
        cugather.GatherOp(0, mode=mode)
    with pytest.raises(ValueError, match="mode"):
        cugather.gather(np.zeros(3), [0], mode=mode)


def test_take_has_numpy_modes_only():
    with pytest.raises(ValueError, match="mode"):
        cugather.take(np.zeros(3), [0], mode="fill")


@pytest.mark.parametrize("axis", [1.0, "0", None, True])
def test_bad_axis_type(axis):
    with pytest.raises(TypeError, match="axis must be an integer"):
        cugather.GatherOp(axis)


def test_axis_out_of_range_is_axis_error():
    op = cugather.GatherOp(2)
    with pytest.raises(AxisError):
        op.plan(((3, 4), "f4"), ((2,), "i8"))
    assert cugather.GatherOp(-2).plan(((3, 4), "f4"), ((2,), "i8")).axis == 0


def test_host_data_is_rejected_with_advice():
    if importlib.util.find_spec("cupy") is None:  # nothing can run: say what to install
        for call in (lambda: cugather.gather(np.zeros(3), [0]), lambda: cugather.take([1, 2], [0])):
            with pytest.raises(ImportError, match=r"needs CuPy.*pip install 'cugather\[cuda12\]'"):
                call()
        return
    with pytest.raises(TypeError, match="numpy.ndarray.*cupy.asarray"):
        cugather.gather(np.zeros(3), [0])
    with pytest.raises(TypeError, match="list"):
        cugather.take([1, 2, 3], [0])


@pytest.mark.parametrize("dtype", ["float32", "complex64", "bool", "U3"])
def test_non_integer_index_dtypes(dtype):
    with pytest.raises(TypeError, match="integer"):
        cugather.GatherOp(0).plan(((3,), "f4"), ((2,), dtype))


@pytest.mark.parametrize("dtype,expect", [("int8", "int32"), ("uint16", "int32"), ("int32", "int32"),
                                          ("uint32", "int64"), ("int64", "int64"), ("uint64", "int64")])
def test_index_dtype_promotion(dtype, expect):
    assert cugather.GatherOp(0).plan(((3,), "f4"), ((2,), dtype)).key.index_dtype == expect


def test_bool_indices_accepted_by_take_semantics():
    from cugather.ops.gather import take_op

    assert take_op(0, "raise").plan(((3,), "f4"), ((2,), "bool")).key.index_dtype == "int32"
    with pytest.raises(TypeError, match="integer"):
        cugather.GatherOp(0).plan(((3,), "f4"), ((2,), "bool"))


def test_zero_dim_data_is_rejected():
    with pytest.raises(ValueError, match="at least one dimension"):
        cugather.GatherOp(0).plan(((), "f4"), ((2,), "i8"))


@pytest.mark.parametrize("fill,dtype,exc", [
    (1.5, "int32", TypeError), (300, "uint8", ValueError), (-1, "uint16", ValueError),
    (2, "bool", ValueError), (1 + 2j, "float32", TypeError), ("x", "float32", TypeError),
    ([1, 2], "float32", ValueError),
])
def test_bad_fill_values(fill, dtype, exc):
    with pytest.raises(exc, match="fill_value"):
        _arrays.fill_bytes(fill, np.dtype(dtype))


@pytest.mark.parametrize("fill,dtype", [(7, "uint8"), (-1.5, "float16"), (2.0, "int64"),
                                        (True, "bool"), (1 - 2j, "complex128"), (np.nan, "float32")])
def test_good_fill_values(fill, dtype):
    raw = _arrays.fill_bytes(fill, np.dtype(dtype))
    back = np.frombuffer(raw, dtype)[0]
    assert back == np.asarray(fill).astype(dtype) or (np.isnan(back) and np.isnan(fill))


def test_fill_value_checked_at_construction():
    with pytest.raises(TypeError, match="fill_value"):
        cugather.GatherOp(0, mode="fill", fill_value="zero")


def test_stream_pointer_rejects_junk():
    pytest.importorskip("cupy")
    with pytest.raises(TypeError, match="stream"):
        _arrays.stream_pointer("stream")
    assert _arrays.stream_pointer(1234) == 1234


def test_alignment():
    from cugather.plan.core import alignment

    assert alignment(0) == 256 and alignment(4096) == 256
    assert alignment(8) == 8 and alignment(3) == 1 and alignment(48) == 16
