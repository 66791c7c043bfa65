"""cugather.jit on a GPU: loaded kernels, function attributes, caches across calls and processes."""

import json
import textwrap

import numpy as np
import pytest

import cugather
from cugather import jit
from cugather.compile import compiler as _compiler
from support.jit import run_fresh

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def cache(private_kernel_cache):
    return private_kernel_cache


@pytest.fixture
def cp():
    import cupy

    return cupy


def _table(cp, rows=1000, cols=128, dtype="float16"):
    rng = np.random.default_rng(0)
    host = rng.standard_normal((rows, cols)).astype(dtype)
    idx = rng.integers(-rows, rows, size=4096).astype(np.int64)
    return host, idx, cp.asarray(host), cp.asarray(idx)


def test_kernels_after_a_real_gather_carry_function_attributes(cp):
    from cugather.compile.compiler import arch_for_device
    from cugather.plan.tuning import MAX_THREADS

    host, idx, table, d_idx = _table(cp)
    got = cugather.gather(table, d_idx, axis=0)
    np.testing.assert_array_equal(got.get(), np.take(host, idx, axis=0))
    plan = cugather.GatherOp(0).plan(table, d_idx)
    device = table.data.device_id
    loaded = {i.entry: i for i in jit.kernels() if i.device == device}
    assert set(loaded) >= {plan.key.entry, plan.check_key.entry}
    arch = arch_for_device(device)
    cc = cp.cuda.Device(device).compute_capability
    for entry in (plan.key.entry, plan.check_key.entry):
        info = loaded[entry]
        assert info.arch == arch and info.attributes is not None
        attrs = info.attributes
        assert set(attrs) == set(jit.FUNCTION_ATTRIBUTES)
        assert attrs["max_threads_per_block"] == MAX_THREADS  # __launch_bounds__
        assert attrs["num_regs"] > 0
        if arch.startswith("sm_"):  # the driver loaded our own cubin
            assert attrs["num_regs"] == info.registers
            assert attrs["binary_version"] == int(cc)
        json.dumps(info.as_dict())


def test_a_second_op_finds_loaded_kernels_in_memory(cp):
    _, _, table, d_idx = _table(cp)
    cugather.GatherOp(0)(table, d_idx)
    before = _compiler.stats()
    cugather.GatherOp(0)(table, d_idx)  # new plan cache, same kernels
    after = _compiler.stats()
    assert after["hits"] - before["hits"] == 2  # gather and bounds check
    assert after["misses"] == before["misses"] and after["compiles"] == before["compiles"]


def test_cache_clear_drops_plans_and_kernels_and_calls_still_work(cp):
    host, idx, table, d_idx = _table(cp)
    op = cugather.GatherOp(0, mode="wrap")
    op(table, d_idx)
    assert op.cache_info().currsize == 1 and jit.kernels()
    cleared = jit.cache_clear()
    assert cleared.plans >= 1 and cleared.kernels >= 1
    assert op.cache_info().currsize == 0 and jit.kernels() == []
    got = op(table, d_idx)  # rebinds from the disk cache
    np.testing.assert_array_equal(got.get(), np.take(host, idx, axis=0, mode="wrap"))
    s = _compiler.stats()
    assert s["compiles"] == 0 and s["disk_hits"] == 1 and op.cache_info().misses == 1


_GPU_WARM_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    import cupy
    import cugather
    from cugather.compile import compiler as _compiler
    host = np.arange(1000 * 64, dtype=np.float32).reshape(1000, 64)
    idx = np.array([3, -1, 999, 0, 512] * 100, dtype=np.int64)
    got = cugather.gather(cupy.asarray(host), cupy.asarray(idx), axis=0).get()
    print(json.dumps({"stats": _compiler.stats(),
                      "ok": bool((got == np.take(host, idx, axis=0)).all())}))
""")


def test_warm_start_through_load_kernel_compiles_nothing(cache):
    cold = run_fresh(_GPU_WARM_SCRIPT, cache.parent)
    assert cold["ok"] and cold["stats"]["compiles"] == 2 and cold["stats"]["disk_hits"] == 0
    warm = run_fresh(_GPU_WARM_SCRIPT, cache.parent)
    assert warm["ok"] and warm["stats"]["compiles"] == 0 and warm["stats"]["disk_hits"] == 2
