"""Threads (GPU tier): 8 threads x 1000 calls of mixed shapes, dtypes and modes.

Every result must be right, every raise-mode failure must name the right
index, and every kernel must be compiled exactly once although the threads
ask for the same kernels at the same moment (they start behind a barrier,
with the in-process caches emptied and an empty disk cache).
"""

from __future__ import annotations

import threading
import zlib

import numpy as np
import pytest

from support import gpu as g
from support.reference import assert_same

pytestmark = pytest.mark.gpu

THREADS = 8
CALLS = 1000


def _cases():
    """(name, mode, host arrays, device arrays, expected) over shapes, dtypes and modes."""
    specs = []
    for dtype, index_dtype, rows, cols, n in (("float32", "int64", 64, 33, 300),
                                              ("float16", "int32", 5, 700, 40),
                                              ("int8", "int64", 300, 1, 1000),
                                              ("complex128", "int32", 17, 9, 64),
                                              ("uint16", "int64", 2, 5000, 7),
                                              ("bool", "int32", 40, 12, 200)):
        for out_of_range in (False, True):
            seed = zlib.crc32(repr((dtype, index_dtype, rows, out_of_range)).encode())
            host = g.host_arrays(np.random.default_rng(seed), dtype, index_dtype, rows, cols, n,
                                 out_of_range)
            dev = g.device_arrays(host)
            for name, mode in g.OP_MODES:
                if g.available(name):
                    specs.append((name, mode, host, dev, g.reference(name, mode, host)))
    return specs


def test_eight_threads_share_kernels_and_plans(tmp_path, monkeypatch):
    cp = g.cp()
    import cugather
    from cugather import jit
    from cugather.compile import compiler as _compiler

    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))  # an empty disk cache
    cases = _cases()
    cp.cuda.Device().synchronize()
    jit.cache_clear()  # in-process kernels, plans and counters
    shared_ops: dict = {}  # GatherOp objects used by every thread
    barrier = threading.Barrier(THREADS)
    errors: list = []
    counts = [0] * THREADS

    def work(t: int):
        rng = np.random.default_rng(t)
        own_ops: dict = {}
        stream = cp.cuda.Stream(non_blocking=True) if t % 2 else None
        try:
            barrier.wait()
            for i in range(CALLS):
                # The first calls of every thread hit the same cases: compile races.
                k = i % len(cases) if i < len(cases) else int(rng.integers(len(cases)))
                name, mode, host, dev, want = cases[k]
                ops = shared_ops if i % 3 == 0 else own_ops
                with stream if stream is not None else _Null():
                    if want is IndexError:
                        with pytest.raises(IndexError):
                            g.call(name, mode, dev, op_cache=ops)
                    else:
                        got = g.call(name, mode, dev, op_cache=ops)
                        if stream is not None:
                            stream.synchronize()
                        assert_same(got.get(), want, f"thread {t} call {i}: {name} mode={mode}")
                counts[t] += 1
        except BaseException as e:  # reported by the main thread
            errors.append((t, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, f"{len(errors)} threads failed; first: {errors[0]!r}"
    assert counts == [CALLS] * THREADS

    info = jit.cache_info()
    loaded = [lk for lk in _compiler.loaded_kernels()]
    keys = {lk.compiled.key for lk in loaded}
    print(f"{len(keys)} kernels, {info.compiles} compiles, {info.disk_hits} disk hits, "
          f"{len(loaded)} loaded")
    assert info.compiles == info.in_memory == len(keys), (
        f"{info.compiles} NVRTC compiles for {len(keys)} kernels ({info.in_memory} in memory): "
        f"some kernel was compiled more than once")
    assert len(loaded) == len(keys), "a kernel was loaded more than once on one device"
    assert info.disk_hits == 0, "the disk cache was not empty"
    del cugather


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
