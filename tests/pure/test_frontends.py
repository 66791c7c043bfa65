"""Front doors without a GPU: import hygiene, dtype mapping, fill bytes, the output switch.

References are independent of the code under test: the float8 and bfloat16
bit patterns come from the formats' definitions (OCP 8-bit floating point,
the fnuz variants, E8M0 and bfloat16), not from a conversion routine.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cugather import frontends
from cugather.frontends import dtypes
from cugather.frontends.views import View, c_strides

# 1.0, -2.0 and 0.0 as each format encodes them: sign | exponent | mantissa.
BITS = {
    #                 1.0      -2.0     0.0
    "float8_e4m3fn": (b"\x38", b"\xc0", b"\x00"),   # bias 7
    "float8_e5m2": (b"\x3c", b"\xc0", b"\x00"),     # bias 15
    "float8_e4m3fnuz": (b"\x40", b"\xc8", b"\x00"),  # bias 8, no -0
    "float8_e5m2fnuz": (b"\x40", b"\xc4", b"\x00"),  # bias 16, no -0
    "bfloat16": (b"\x80\x3f", b"\x00\xc0", b"\x00\x00"),  # little-endian, float32's top half
}


def test_import_cugather_imports_neither_torch_nor_jax():
    code = textwrap.dedent("""
        import sys
        import numpy
        import cugather
        from cugather import frontends
        assert frontends.native(numpy.zeros(3)) is None
        assert frontends.native(3) is None
        frontends.set_output("cupy"); frontends.set_output("input")
        print(sorted(m for m in ("torch", "jax", "jaxlib", "ml_dtypes") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", f"import cugather imported {done.stdout.strip()}"


def test_native_knows_torch_and_jax_by_type_not_by_name():
    class Tensor:  # a look-alike from another module is not torch's
        __module__ = "torch"

    assert frontends.native(Tensor()) is None
    assert frontends.native(np.zeros(2)) is None
    assert frontends.native([1, 2]) is None
    torch = pytest.importorskip("torch", reason="torch is not installed")
    fe = frontends.native(torch.zeros(2))
    assert fe is not None and fe.name == "torch"
    assert frontends.native(torch.nn.Parameter(torch.zeros(2))) is fe  # a subclass


def test_set_output_switch():
    assert frontends.get_output() == "input"
    with frontends.using_output("cupy"):
        assert frontends.get_output() == "cupy"
    assert frontends.get_output() == "input"
    with pytest.raises(ValueError, match=r"set_output takes one of \('input', 'cupy'\), got 'torch'"):
        frontends.set_output("torch")


@pytest.mark.parametrize("name", sorted(BITS))
def test_ml_dtypes_fill_bytes_match_the_formats(name):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    dt = np.dtype(getattr(ml_dtypes, name))
    assert dtypes.numpy_dtype(name, dt.itemsize) == dt
    for value, want in zip((1.0, -2, 0), BITS[name]):
        assert dtypes.ml_fill_bytes(value, dt) == want, (name, value)


def test_ml_dtypes_fill_errors_are_named_like_validate():
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"fill_value 1000 is out of range for dtype "
                                         r"float8_e4m3fn \[-448.0, 448.0\]"):
        dtypes.ml_fill_bytes(1000, e4m3)
    with pytest.raises(ValueError, match="no infinity"):
        dtypes.ml_fill_bytes(float("inf"), e4m3)
    with pytest.raises(TypeError, match="is complex"):
        dtypes.ml_fill_bytes(1 + 2j, e4m3)
    with pytest.raises(TypeError, match="fill_value must be a number"):
        dtypes.ml_fill_bytes("x", e4m3)
    assert dtypes.ml_fill_bytes(float("-inf"), np.dtype(ml_dtypes.float8_e5m2)) == b"\xfc"
    assert dtypes.ml_fill_bytes(1 + 0j, e4m3) == b"\x38"


def test_stand_in_dtypes_are_distinct_per_name():
    a = dtypes.numpy_dtype("float4_e2m1fn_x2", 1)
    b = dtypes.numpy_dtype("bits8", 1)
    assert a.itemsize == b.itemsize == 1 and a != b
    assert not dtypes.is_native(a) and dtypes.is_native(np.dtype(np.float16))
    assert dtypes.unsigned_like(a) == np.uint8
    with pytest.raises(TypeError, match="16-byte items"):
        dtypes.unsigned_like(np.dtype(np.complex128))


def test_view_layout():
    v = View((3, 1, 4), c_strides((3, 1, 4), 2), np.dtype(np.float16), 512, 0, None)
    assert v.strides == (8, 8, 2) and v.ndim == 3 and v.size == 12 and v.itemsize == 2
    assert v.flags.c_contiguous
    t = View((3, 4), (2, 6), np.dtype(np.float16), 512, 0, None)  # a transpose
    assert not t.flags.c_contiguous and t.nbytes == 24


# ---------------------------------------------------------------- torch dtypes
def _torch():
    return pytest.importorskip("torch", reason="torch is not installed")


def test_torch_dtypes_map_to_distinct_numpy_dtypes_of_their_size():
    torch = _torch()
    from cugather.frontends import torch as fe

    mapped = fe._TO_NUMPY
    assert len(set(mapped.values())) == len(mapped), "two torch dtypes share a NumPy dtype"
    for td, dt in mapped.items():
        assert dt.itemsize == td.itemsize, td
    for name in ("float32", "int64", "bool", "complex64", "uint16"):
        assert mapped[getattr(torch, name)] == np.dtype(name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "bfloat16"):
        td = getattr(torch, name)
        assert fe.torch_dtype(fe.numpy_dtype(td)) is td
        assert not dtypes.is_native(fe.numpy_dtype(td))


@pytest.mark.parametrize("name", sorted(BITS))
def test_torch_fill_bytes_match_the_formats(name):
    torch = _torch()
    from cugather.frontends import torch as fe

    dt = fe.numpy_dtype(getattr(torch, name))
    for value, want in zip((1.0, -2, 0), BITS[name]):
        assert fe.BACKEND.fill_bytes(value, dt) == want, (name, value)


def test_torch_fill_bytes_errors_and_native_dtypes():
    torch = _torch()
    from cugather.frontends import torch as fe

    be = fe.BACKEND
    e4m3 = fe.numpy_dtype(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"out of range for dtype float8_e4m3fn \[-448.0, 448.0\]"):
        be.fill_bytes(449, e4m3)  # torch would saturate it to 448
    with pytest.raises(ValueError, match="no infinity"):
        be.fill_bytes(float("inf"), e4m3)
    with pytest.raises(ValueError, match="out of range"):
        be.fill_bytes(1e39, fe.numpy_dtype(torch.bfloat16))
    if hasattr(torch, "float8_e8m0fnu"):  # powers of two only, no zero, no sign
        e8m0 = fe.numpy_dtype(torch.float8_e8m0fnu)
        assert be.fill_bytes(1.0, e8m0) == b"\x7f" and be.fill_bytes(4, e8m0) == b"\x81"
        with pytest.raises(ValueError, match="out of range"):
            be.fill_bytes(0, e8m0)
    assert be.fill_bytes(float("nan"), fe.numpy_dtype(torch.float8_e4m3fnuz)) == b"\x80"
    with pytest.raises(TypeError, match="is complex"):
        be.fill_bytes(2j, e4m3)
    assert be.fill_bytes(-7, np.dtype(np.int16)) == np.int16(-7).tobytes()
    with pytest.raises(ValueError, match=r"out of range for dtype uint8 \[0, 255\]"):
        be.fill_bytes(-1, np.dtype(np.uint8))


def test_cpu_tensors_are_refused_by_the_cuda_view():
    torch = _torch()
    from cugather.frontends import torch as fe

    with pytest.raises(TypeError, match="data is a torch tensor on cpu; cugather runs on CUDA"):
        fe.FRONTEND.prepare_data(torch.zeros(3))
    with pytest.raises(TypeError, match="out must be a torch.Tensor when data is one"):
        fe.FRONTEND.prepare_out(np.zeros(3))
