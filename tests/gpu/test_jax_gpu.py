"""JAX arrays on the GPU: the JAX front door against jnp.take / jnp.take_along_axis.

The front door is driven as the public ops drive it (cugather.frontends'
protocol), and once through ``cugather.gather`` itself.  Float8 and bfloat16
arrays (ml_dtypes dtypes CuPy cannot hold) are compared bit for bit with
jnp.take on a uint view.  Skips where JAX or its CUDA plugin is missing.
"""

from __future__ import annotations

import numpy as np
import pytest

from support import gpu as g

pytestmark = pytest.mark.gpu

NATIVE = ("float16", "float32", "int8", "int16", "int32", "uint8", "uint32", "complex64")
ML = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")


@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'jax[cuda12]')")
    try:
        jax.devices("gpu")
    except RuntimeError as e:
        pytest.skip(f"jax has no GPU backend here ({e}); pip install 'jax[cuda12]'")
    return jax


def _via_frontend(data, indices, axis=0, mode="raise", fill_value=0, stream=None):
    """cugather.gather as the public op calls the front door (cugather.frontends)."""
    from cugather import frontends
    from cugather.ops import gather as gather_op

    fe = frontends.native(data)
    assert fe is not None and fe.name == "jax"
    op = gather_op.GatherOp(axis, mode=mode, fill_value=fill_value)
    with fe.on_stream(stream):
        d = fe.prepare_data(data)
        i = fe.prepare_indices(indices, d.device)
        return fe.result(gather_op.run(op, d, i, None, stream, d.device, fe.backend))


def _table(jax, dtype, shape=(300, 24)):
    import jax.numpy as jnp

    rng = np.random.default_rng(4)
    if dtype in ML:
        import ml_dtypes

        return jnp.asarray(rng.standard_normal(shape).astype(np.float32)).astype(
            getattr(ml_dtypes, dtype))
    if dtype == "bool":
        return jnp.asarray(rng.integers(0, 2, shape).astype(bool))
    if np.dtype(dtype).kind in "fc":
        return jnp.asarray(rng.standard_normal(shape).astype(dtype))
    return jnp.asarray(rng.integers(0, 100, shape).astype(dtype))


def _ids(n, size, low=None):
    import jax.numpy as jnp

    rng = np.random.default_rng(6)
    return jnp.asarray(rng.integers(-n if low is None else low, n, size).astype(np.int32))


@pytest.mark.parametrize("dtype", NATIVE + ML)
def test_gather_matches_jnp_take(jax, dtype):
    import jax.numpy as jnp

    table = _table(jax, dtype)
    ids = _ids(300, 1000)
    got = _via_frontend(table, ids, 0, "wrap")
    assert isinstance(got, jax.Array) and got.dtype == table.dtype and got.shape == (1000, 24)
    want = jnp.take(table, ids % 300, axis=0)
    if dtype in ML:
        view = {1: jnp.uint8, 2: jnp.uint16}[table.dtype.itemsize]
        got = jax.lax.bitcast_convert_type(got, view)
        want = jax.lax.bitcast_convert_type(want, view)
    assert np.array_equal(np.asarray(got), np.asarray(want))


@pytest.mark.parametrize("mode", ["raise", "clip", "fill"])
def test_modes_match_jnp(jax, mode):
    import jax.numpy as jnp

    table = _table(jax, "float32", (20, 30))
    ids = _ids(30 if mode == "raise" else 90, 64)
    got = np.asarray(_via_frontend(table, ids, 1, mode, -7.0))
    i = np.asarray(ids).astype(np.int64)
    j = np.where(i < 0, i + 30, i)
    if mode == "clip":
        want = jnp.take(table, np.clip(j, 0, 29), axis=1)
    else:
        keep = (j >= 0) & (j < 30)
        want = jnp.where(keep[None, :], jnp.take(table, np.where(keep, j, 0), axis=1), -7.0)
    assert np.array_equal(got, np.asarray(want))


def test_float8_fill_writes_its_own_bytes(jax):
    import jax.numpy as jnp
    import ml_dtypes

    table = _table(jax, "float8_e4m3fn")
    ids = _ids(600, 500)
    got = jax.lax.bitcast_convert_type(_via_frontend(table, ids, 0, "fill", -2.0), jnp.uint8)
    i = np.asarray(ids).astype(np.int64)
    keep = (i >= -300) & (i < 300)
    rows = np.asarray(jax.lax.bitcast_convert_type(table, jnp.uint8))[np.where(keep, i, 0)]
    fill = np.array(-2.0, ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(np.asarray(got), np.where(keep[:, None], rows, fill))


def test_raise_and_immutable_out(jax):
    from cugather import frontends

    table = _table(jax, "float32")
    with pytest.raises(IndexError, match="index 300 is out of bounds for axis 0 with size 300"):
        _via_frontend(table, np.array([1, 300]), 0, "raise")
    with pytest.raises(TypeError, match="immutable"):
        frontends.native(table).prepare_out(table)


def test_jit_tracers_are_refused_with_a_reason(jax):
    from cugather import frontends

    table = _table(jax, "float32")

    def traced(x):
        frontends.native(x).prepare_data(x)
        return x

    with pytest.raises(TypeError, match="not inside jax.jit"):
        jax.jit(traced)(table)


def test_public_gather_returns_jax_arrays(jax):
    import jax.numpy as jnp

    import cugather

    table = _table(jax, "float32")
    ids = _ids(300, 100)
    got = cugather.gather(table, ids, mode="wrap")
    assert isinstance(got, jax.Array)
    assert np.array_equal(np.asarray(got), np.asarray(jnp.take(table, ids % 300, axis=0)))
    cp = g.cp()
    from cugather import frontends

    with frontends.using_output("cupy"):
        assert isinstance(cugather.gather(table, ids, mode="wrap"), cp.ndarray)
