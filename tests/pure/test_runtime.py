"""The op runtime without a GPU: plan caches, geometry keys, the shared-op
registry, and the defects each of these once had (every test here failed
before its fix)."""

import math

import numpy as np
import pytest

import cugather
from cugather import validate
from cugather.ops.gather import _shared_op, take_op
from cugather.plan.core import Launch, Plan
from cugather.plan.keys import KernelKey
from cugather.runtime.binding import Bound, bind, fill_words
from cugather.plan.core import alignment
from cugather.runtime.cache import PlanCache
from cugather.runtime.key import call_key, fill_token, geometry_of_key, out_bits

AxisError = getattr(getattr(np, "exceptions", np), "AxisError")


# ---------------------------------------------------------------- plan caches
def test_plan_cache_is_lru_a_hit_moves_to_the_end():
    cache = PlanCache(3)
    for k in "abc":
        cache.put(k, k.upper())
    assert cache.get("a") == "A"          # a is now the most recent
    cache.put("d", "D")                   # drops b, the least recent
    assert [cache.get(k) for k in "abcd"] == ["A", None, "C", "D"]
    info = cache.info()
    assert (info.hits, info.misses, info.maxsize, info.currsize) == (4, 4, 3, 3)
    assert cache.clear() == 3 and cache.info() == (0, 0, 3, 0)


def test_gather_op_cache_size_bounds_its_plans():
    op = cugather.GatherOp(0, cache_size=2)
    for i in range(5):
        op._runtime.put(("geometry", i), object())
    assert op.cache_info().currsize == 2
    with pytest.raises(ValueError, match="cache_size"):
        cugather.GatherOp(0, cache_size=0)


# ---------------------------------------------------------------- call keys
class _Arrays:
    """A backend's view of NumPy arrays, enough for call_key."""

    array_type = np.ndarray

    @staticmethod
    def pointer(arr):
        return arr.ctypes.data


def test_call_key_holds_everything_a_plan_reads_and_names_it_back():
    data = np.zeros((6, 5), np.float32)[:, 1:]
    idx = np.zeros(3, np.int64)

    def key_of(out=None, d=data):
        return call_key(_Arrays, 0, d, d.ctypes.data, idx, out_bits(out, _Arrays))

    key = key_of()
    geo = geometry_of_key("gather", key, 1, "wrap")
    assert geo.data_shape == (6, 4) and geo.data_strides == (20, 4) and geo.axis == 1
    assert geo.data_align == alignment(data.ctypes.data) and geo.out_align == 256
    assert geo.fill is None and geo.mode == "wrap" and geo.dtype == np.float32
    assert geo.backend is _Arrays and geo.indices_shape == (3,) and geo.extra == ()
    assert hash(key) == hash(key_of()) and key == key_of()
    with pytest.raises(AttributeError):
        geo.axis = 0  # frozen
    out = np.empty(3, np.float32)[1:]
    assert geometry_of_key("gather", key_of(out), 1, "wrap").out_align == 4
    assert key_of([1.0]) == key  # not an array: check_out reports it later
    # What a plan depends on changes the key: strides, dtype, alignment, index layout.
    assert key_of(d=np.zeros((6, 4), np.float32)) != key
    assert key_of(d=data.astype(np.int32)) != key
    assert call_key(_Arrays, 0, data, data.ctypes.data, idx[::2], 0) != key
    assert call_key(_Arrays, 0, data, data.ctypes.data + 4, idx, 0) != key
    assert call_key(_Arrays, 1, data, data.ctypes.data, idx, 0) != key


@pytest.mark.parametrize("a,b", [(0.0, -0.0), (0j, -0j), (complex(0, -0.0), 0j),
                                 (1, True), (np.float32(0), np.float32(-0.0)),
                                 (float("nan"), float("-nan"))])
def test_fill_token_tells_values_apart_by_their_bytes(a, b):
    assert fill_token(a) != fill_token(b)
    assert fill_token(a) == fill_token(type(a)(a))


def test_shared_ops_keep_negative_zero_fills_apart():
    """gather(..., fill_value=-0.0) after a call with 0.0 wrote +0.0: both shared one op."""
    plus = _shared_op(cugather.GatherOp, 0, "fill", 0.0)
    minus = _shared_op(cugather.GatherOp, 0, "fill", -0.0)
    assert plus is not minus
    assert math.copysign(1, minus.fill_value) == -1
    assert _shared_op(cugather.GatherOp, 0, "fill", -0.0) is minus
    assert fill_words(validate.fill_bytes(minus.fill_value, np.dtype("float64")))[0] == 1 << 63


# ---------------------------------------------------------------- bind
class _Recorder:
    """A backend that records what bind loads (no GPU, no compiler)."""

    fast_path = True

    def __init__(self):
        self.loaded = []

    def load(self, key, device):
        self.loaded.append((key, device))
        return type("K", (), {"handle": len(self.loaded), "launch_fn": None})()


def test_bind_packs_every_launch_of_the_plan():
    main = Launch(KernelKey("rows", 4, "int64", "fast32", "fill"),
                  dict(s_outer=0, s_axis=12, axis_len=10, rows=4, units=3, n_indices=4,
                       outer=1, chunk=0, stage_unit=0, row_unroll=1), (1, 1, 1), (3, 85, 1))
    check = Launch(KernelKey("check", 0, "int64", "fast64", "raise"),
                   dict(n=4, axis_len=10), (1, 1, 1), (256, 1, 1))
    plan = Plan("gather", (4, 3), 4, (0,), (10,), main=main, check=check)
    backend = _Recorder()
    bound = bind(plan, 3, np.float32(-2.5).tobytes(), backend)
    assert isinstance(bound, Bound) and backend.loaded == [(main.key, 3), (check.key, 3)]
    args = bound.main.args
    assert int(args["s_axis"][0]) == 12 and int(args["units"][0]) == 3
    assert np.frombuffer(args["fill"].tobytes(), np.float32).tolist() == [-2.5] * 4
    assert int(bound.check.args["axis_len"][0]) == 10
    assert bound.checked and bound.call is None  # raise mode; no cached path on this backend
    with pytest.raises(ValueError, match="fill value"):
        bind(plan, 0, None, _Recorder())


# ---------------------------------------------------------------- plan() checks what the call checks
@pytest.mark.parametrize("fill,dtype,exc", [(300, "uint8", ValueError),
                                            (float("nan"), "int32", TypeError),
                                            (1.5, "int16", TypeError)])
def test_plan_checks_the_fill_value_against_the_dtype(fill, dtype, exc):
    op = cugather.GatherOp(0, mode="fill", fill_value=fill)
    with pytest.raises(exc, match="fill_value"):
        op.plan(((5, 3), dtype), ((2,), "int64"))


@pytest.mark.parametrize("data,name", [([1.0, 2.0], "list"), (None, "NoneType"), (3.0, "float")])
def test_plan_refuses_what_the_call_refuses(data, name):
    with pytest.raises(TypeError, match=f"data must be an array.*got {name}"):
        cugather.GatherOp(0).plan(data, [0])
    with pytest.raises(TypeError, match=f"a must be an array.*got {name}"):
        take_op(0, "raise").plan(data, [0])


@pytest.mark.parametrize("dtype", ["U4", "O", "V8", "M8[s]"])
def test_plan_refuses_dtypes_no_gpu_array_holds(dtype):
    with pytest.raises(TypeError, match="data must have a boolean, integer, floating or complex"):
        cugather.GatherOp(0).plan(((3,), dtype), ((1,), "int64"))


# ---------------------------------------------------------------- numpy.take's 0-d arrays
@pytest.mark.parametrize("axis", [0, -1])
def test_take_treats_a_0d_array_as_1d(axis):
    """numpy.take(np.array(5.), 0, axis=0) is 5.0; cugather.take raised ValueError."""
    plan = take_op(axis, "raise").plan(((), "float64"), ((), "int64"))
    assert plan.out_shape == np.take(np.array(5.0), 0, axis=axis).shape == ()
    assert plan.axis_len == 1 and plan.key is not None
    with pytest.raises(ValueError, match="data must have at least one dimension"):
        cugather.GatherOp(axis).plan(((), "float64"), ((), "int64"))


def test_take_axis_out_of_range_on_a_0d_array_is_axis_error():
    with pytest.raises(AxisError):
        np.take(np.array(5.0), 0, axis=1)
    with pytest.raises(AxisError):
        take_op(1, "raise").plan(((), "float64"), ((), "int64"))


def test_take_errors_name_its_parameter_a():
    op = take_op(0, "raise")
    with pytest.raises(TypeError, match=r"^a must be"):
        op.plan([1, 2], [0])
    with pytest.raises(TypeError, match=r"^a must have a boolean"):
        op.plan(((3,), "U2"), [0])
