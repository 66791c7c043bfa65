"""After out-of-range indices, in any mode, the GPU keeps working (GPU tier).

Out-of-range policies are compile-time choices, never device asserts, so no
call may leave a sticky CUDA error behind.  Each test feeds extreme indices
(the limits of the index dtype, +-2^62, just past each end) to every
operation in every mode and kernel shape, then proves the process still uses
the GPU normally: the device synchronises cleanly, a CuPy reduction is right,
and a normal gather is right.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from support import gpu as g
from support.reference import assert_same

pytestmark = pytest.mark.gpu

# data shapes (gathered on axis 1) that lead to different gather kernels:
# long rows, short rows, one-element rows (staged or not), strided data.
SHAPES = {
    "long rows": ((6, 5, 700), "float32"),
    "short rows": ((6, 40, 3), "float64"),
    "one element, many indices": ((3, 60), "int16"),
    "one element, few indices": ((2, 5000), "int8"),
}


def extreme_indices(n: int, dtype: str, size: int, rng) -> np.ndarray:
    info = np.iinfo(dtype)
    pool = [n, n + 1, -n - 1, 2 * n, int(info.max), int(info.min), int(info.max) - 1,
            int(info.min) + 1]
    if info.bits == 64:
        pool += [1 << 62, -(1 << 62), (1 << 32) + 1, -(1 << 31) - 1]
    values = rng.integers(-n, n, size=size)
    bad = rng.choice(size, size=max(1, size // 3), replace=False)
    values[bad] = rng.choice(np.array(pool, dtype=np.int64), size=bad.size)
    values[0] = pool[4]  # the dtype's maximum first
    return values.astype(dtype)


def assert_gpu_healthy():
    cp = g.cp()
    cp.cuda.runtime.deviceSynchronize()  # raises on a sticky error
    assert int((cp.arange(1000, dtype=cp.int64) * 2).sum()) == 999000
    rng = np.random.default_rng(0)
    data = rng.standard_normal((50, 40)).astype(np.float32)
    idx = rng.integers(-40, 40, size=(7, 9))
    import cugather

    assert_same(cugather.gather(cp.asarray(data), cp.asarray(idx), 1).get(),
                np.take(data, idx, axis=1))
    cp.cuda.runtime.deviceSynchronize()


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("mode", ["raise", "wrap", "clip", "fill"])
@pytest.mark.parametrize("shape_name", list(SHAPES))
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_gather_with_extreme_indices_leaves_the_gpu_usable(shape_name, layout, mode, index_dtype):
    cp = g.cp()
    import cugather
    from support.reference import gather_ref, random_data

    shape, dtype = SHAPES[shape_name]
    rng = np.random.default_rng(zlib.crc32(repr((shape_name, layout, mode, index_dtype)).encode()))
    host = random_data(rng, shape, dtype)
    if layout == "transposed":  # the same logical array with other strides (general kernel)
        data = cp.asarray(np.ascontiguousarray(host.swapaxes(0, 1))).swapaxes(0, 1)
    else:
        data = cp.asarray(host)
    n = shape[1]
    idx = extreme_indices(n, index_dtype, 300 if shape_name != "one element, few indices" else 7,
                          rng)
    out = cp.full(shape[:1] + idx.shape + shape[2:], 3, dtype)
    before = out.get()
    if mode == "raise":
        with pytest.raises(IndexError, match=str(int(idx.reshape(-1)[0]))):
            cugather.gather(data, cp.asarray(idx), 1, out=out, mode=mode)
        assert_same(out.get(), before, "out after IndexError")
    else:
        i = idx.astype(np.int64)
        got = cugather.gather(data, cp.asarray(idx), 1, out=out, mode=mode, fill_value=-1)
        want = gather_ref(host, np.mod(i, n) if mode == "wrap" else i, 1, mode, -1)
        assert_same(got.get(), want)
    assert_gpu_healthy()


@pytest.mark.parametrize("name,mode", g.OP_MODES)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_every_operation_with_extreme_indices_leaves_the_gpu_usable(name, mode, index_dtype):
    if not g.available(name):
        pytest.skip(f"cugather has no {name} operation in this version")
    cp = g.cp()
    rng = np.random.default_rng(7)
    host = g.host_arrays(rng, "float32", index_dtype=index_dtype)
    for key, bound in (("idx", 33), ("idx_e", 33)):
        host[key] = extreme_indices(bound, index_dtype, host[key].size, rng).reshape(
            host[key].shape)
    host["idx_nd"] = np.stack([extreme_indices(64, index_dtype, host["idx_nd"].shape[0], rng),
                               extreme_indices(33, index_dtype, host["idx_nd"].shape[0], rng)],
                              axis=-1)
    dev = g.device_arrays(host)
    want = g.reference(name, mode, host)
    if want is IndexError:
        with pytest.raises(IndexError):
            g.call(name, mode, dev)
    else:
        assert_same(g.call(name, mode, dev).get(), want, f"{name} mode={mode}")
    assert_gpu_healthy()


def test_the_same_op_works_after_an_index_error():
    """A raise-mode failure leaves the op (and its cached plan) ready for valid indices."""
    cp = g.cp()
    import cugather

    op = cugather.GatherOp(0)
    data = cp.arange(100 * 8, dtype=cp.float32).reshape(100, 8)
    bad = cp.asarray(np.array([3, 100, 5], np.int64))
    for _ in range(3):
        with pytest.raises(IndexError, match="100"):
            op(data, bad)
        good = cp.asarray(np.array([3, -100, 99], np.int64))
        assert_same(op(data, good).get(), data.get()[[3, 0, 99]])
    assert op.cache_info().currsize == 1
    assert_gpu_healthy()
