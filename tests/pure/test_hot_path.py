"""The cached call without a GPU: the memo of the last call key, the LRU behind it,
raise mode's flag pool, read-only op settings, and the argument checks of plan()."""

import ctypes
import threading

import numpy as np
import pytest

import cugather
from cugather.plan.core import Launch, Plan
from cugather.plan.keys import KernelKey
from cugather.runtime.key import geometry_of_key
from cugather.runtime.launch import NO_BAD, Flags
from cugather.runtime.op import OpRuntime


# ---------------------------------------------------------------- read-only settings
@pytest.mark.parametrize("name,value", [("mode", "raise"), ("axis", 1), ("fill_value", 5.0),
                                        ("_mode", "raise"), ("_fill_value", 5.0)])
def test_gather_op_settings_are_read_only(name, value):
    """op.mode = "raise" on a wrap op was accepted and ignored (index 100 of 10 rows then
    wrapped silently); op.fill_value = 5.0 kept writing the old fill value."""
    op = cugather.GatherOp(0, mode="wrap", fill_value=0.0)
    with pytest.raises(AttributeError, match=r"read-only.*build a new GatherOp"):
        setattr(op, name, value)
    assert (op.axis, op.mode, op.fill_value) == (0, "wrap", 0.0)
    assert op.plan(((10, 3), "float32"), ((2,), "int64")).key.mode == "wrap"


def test_take_op_settings_are_read_only_too():
    from cugather.ops.gather import take_op

    op = take_op(0, "clip")
    with pytest.raises(AttributeError, match="read-only"):
        op.mode = "raise"
    op.note = "other attributes stay writable"
    assert op.note == "other attributes stay writable"


# ---------------------------------------------------------------- the memo
class _Backend:
    """Loads nothing; counts what the runtime asks of it."""

    fast_path = False

    def __init__(self):
        self.loaded = 0

    def load(self, key, device):
        self.loaded += 1
        return type("K", (), {"handle": 0, "launch_fn": None})()

    def limits(self, device):
        from cugather.plan.core import DeviceLimits

        return DeviceLimits()

    @staticmethod
    def fill_bytes(value, dtype):
        return np.asarray(value, dtype).tobytes()


def _runtime():
    planned = []

    def planner(geo, limits):
        planned.append(geo)
        main = Launch(KernelKey("rows", 4, "int64", "fast32", geo.mode),
                      dict(s_outer=0, s_axis=12, axis_len=10, rows=4, units=3, n_indices=4,
                           outer=1, chunk=0, stage_unit=0, row_unroll=1), (1, 1, 1), (3, 85, 1))
        return Plan("gather", (4, 3), 4, (0,), (10,), main=main)

    def geometry(key):
        return geometry_of_key("gather", key, 0, key[10])

    return OpRuntime(planner, geometry, 2), planned


def _key(backend, mode="wrap", strides=(12, 4), low=0):
    return (backend, 0, (10, 3), strides, np.dtype("float32"), low, (4,), (8,),
            np.dtype("int64"), 0, mode)


def test_a_repeated_call_is_one_memo_comparison_and_plans_once():
    backend = _Backend()
    runtime, planned = _runtime()
    first = runtime.bound(_key(backend), 0)
    assert runtime.cached(_key(backend)) is first           # equal key, new tuple: the memo
    assert len(planned) == 1 and backend.loaded == 1
    assert runtime.info().hits == 1 and runtime.info().misses == 1
    other = runtime.bound(_key(backend, strides=(16, 4)), 0)  # another layout: a new plan
    assert other is not first and len(planned) == 2
    assert runtime.cached(_key(backend)) is first            # back: the LRU, not a re-plan
    assert len(planned) == 2 and runtime.info().hits == 2
    assert runtime.cached(_key(backend, low=8)) is None      # another alignment: a miss
    assert runtime.cached(_key(_Backend())) is None          # another backend: a miss
    assert runtime.cached(_key(backend, mode="clip")) is None
    runtime.clear()
    assert runtime.cached(_key(backend)) is None and runtime.info().hits == 0


def test_the_memo_and_the_lru_agree_under_threads():
    backend = _Backend()
    runtime, planned = _runtime()
    keys = [_key(backend, strides=(12 + 4 * i, 4)) for i in range(2)]
    errors = []

    def worker(i):
        try:
            for j in range(300):
                key = keys[(i + j) % 2]
                bound = runtime.bound(key, 0)
                assert bound.plan is not None and runtime.cached(key) is not None
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and not any(t.is_alive() for t in threads)
    assert runtime.info().currsize == 2


# ---------------------------------------------------------------- raise mode's flags
class _Memory:
    def __init__(self):
        self.blocks = []

    def __call__(self, nbytes):
        block = np.zeros(nbytes // 8, np.uint64)
        self.blocks.append(block)
        return block.ctypes.data


def test_flags_are_reset_read_and_reused():
    memory = _Memory()
    flags = Flags(memory)
    a = flags.take()
    assert ctypes.c_uint64.from_address(a).value == NO_BAD
    ctypes.c_uint64.from_address(a).value = 333  # what a kernel's atomicMin leaves
    assert flags.read_and_give(a) == 333
    b = flags.take()
    assert b == a and ctypes.c_uint64.from_address(b).value == NO_BAD  # reused, reset
    flags.give_back(b)
    assert len(memory.blocks) == 1


def test_concurrent_calls_never_share_a_flag():
    flags = Flags(_Memory())
    held, lock, errors = set(), threading.Lock(), []

    def worker():
        for _ in range(500):
            addr = flags.take()
            with lock:
                if addr in held:
                    errors.append(addr)
                held.add(addr)
            with lock:
                held.discard(addr)
            flags.give_back(addr)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors and not any(t.is_alive() for t in threads)


def test_the_pool_grows_past_one_block():
    memory = _Memory()
    flags = Flags(memory)
    taken = [flags.take() for _ in range(Flags.BLOCK + 3)]
    assert len(set(taken)) == len(taken) and len(memory.blocks) == 2


# ---------------------------------------------------------------- plan() and fill checks
@pytest.mark.parametrize("shape,exc,match", [
    ((5, -3), ValueError, "negative dimension -3"),
    ((5, 3.7), TypeError, "must hold integers, got float 3.7"),
    ((2 ** 63, 1), ValueError, "2\\*\\*63 elements"),
    ((2 ** 40, 2 ** 30), ValueError, "2\\*\\*63 elements"),
    ((True, 3), TypeError, "must hold integers, got bool"),
    ("5,3", TypeError, "must hold integers, got str"),
])
def test_plan_checks_shape_dtype_pairs(shape, exc, match):
    """(shape, dtype) pairs took negative sizes, truncated 3.7 and sizes above 2**63."""
    with pytest.raises(exc, match=match):
        cugather.GatherOp(0).plan((shape, "float32"), ((2,), "int64"))


@pytest.mark.parametrize("dtype", ["float64", "float16", "int64", "uint64", "complex64"])
def test_a_fill_value_beyond_every_dtype_says_out_of_range(dtype):
    """fill_value=10**400 for float64 said 'must be a number, got int'."""
    op = cugather.GatherOp(0, mode="fill", fill_value=10 ** 400)
    with pytest.raises(ValueError, match=f"fill_value 1000.* is out of range for dtype {dtype}"):
        op.plan(((5, 3), dtype), ((2,), "int64"))


def test_a_big_int_fill_that_a_float_holds_is_kept():
    op = cugather.GatherOp(0, mode="fill", fill_value=10 ** 30)
    assert op.plan(((5, 3), "float64"), ((2,), "int64")).key.mode == "fill"
    from cugather import validate

    assert validate.fill_bytes(10 ** 30, np.dtype("float64")) == np.float64(1e30).tobytes()


def test_peer_gather_refuses_a_cache_size_below_one():
    """PeerGather(cache_size=-1) failed later with KeyError: 'dictionary is empty'."""
    from cugather.distributed.peer import PeerGather

    for bad in (-1, 0, 1.5, True):
        with pytest.raises(ValueError, match="cache_size must be a positive int"):
            PeerGather([0], [0, 4], (3,), "float32", 0, cache_size=bad)


def test_a_key_of_a_registered_kind_renders_in_a_fresh_process():
    """warm_cache's NVRTC workers unpickle keys of kinds their process has not
    registered yet (the sharded kind lives in cugather.distributed): KeyError."""
    import pickle
    import subprocess
    import sys

    from cugather.plan.keys import all_kernel_keys

    key = next(k for k in all_kernel_keys() if k.kind == "sharded")
    code = ("import pickle, sys; from cugather.compile.render import render; "
            "print(render(pickle.loads(sys.stdin.buffer.read())).entry)")
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(key),
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().strip() == key.entry
