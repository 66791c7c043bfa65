"""Raise mode in one launch (GPU tier): the gather kernel checks every index it
reads into a pinned host flag, one synchronisation, the first bad position named.

Every op and kernel kind, bad indices spread over many blocks and grid-stride
rounds (the flag must hold the first position, not any), threads whose calls
each name their own first bad index, several devices, and out= untouched."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import cugather
from support.reference import assert_same

pytestmark = pytest.mark.gpu

cp = pytest.importorskip("cupy")

_POS = re.compile(r"at indices\[([0-9, ]+)\]")


def _position(err: BaseException, shape) -> int:
    coords = [int(c) for c in _POS.search(str(err)).group(1).split(",")]
    return int(np.ravel_multi_index(coords, shape)) if coords else 0


@pytest.mark.parametrize("kind", ["rows", "chunks", "chunks16", "scalar", "inner", "slab", "slabw",
                                  "window", "pack", "weave", "slabr", "flat", "slabf", "span",
                                  "lean", "strided"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_every_gather_kind_names_the_first_of_many_bad_indices(kind, index_dtype):
    rng = np.random.default_rng(len(kind) * 7 + len(index_dtype))
    shape, axis = {"rows": ((500, 12), 0), "chunks": ((60, 1500), 0),
                   "chunks16": ((60, 1501), 0), "scalar": ((5000,), 0),
                   "inner": ((8, 3000), 1), "slab": ((8, 3000), 1), "slabw": ((8, 3000), 1),
                   "window": ((500, 19), 0),
                   "pack": ((500, 7), 0), "weave": ((500, 7), 0), "flat": ((500, 7), 0),
                   "slabf": ((8, 300, 3), 1), "slabr": ((8, 300, 3), 1),
                   "span": ((500, 301), 0),
                   "lean": ((500, 3), 0), "strided": ((40, 30), 0)}[kind]
    dtype = np.uint8 if kind in ("window", "pack", "weave", "span") else np.float32
    data = cp.asarray(rng.integers(0, 100, size=shape).astype(dtype))
    n = shape[axis]
    size = {"chunks": 5000, "chunks16": 5000, "span": 5000, "lean": 40_000}.get(kind, 200_000)
    idx = rng.integers(-n, n, size=size).astype(index_dtype)
    bad = np.sort(rng.choice(idx.size, 64, replace=False))
    idx[bad] = n + bad.astype(index_dtype) % 7
    op = cugather.GatherOp(axis, mode="raise")
    plan_kind = op.plan(data, idx, kind=kind).kind
    assert plan_kind == kind
    for _ in range(3):  # the pinned flag is reused: each call must be exact again
        with pytest.raises(IndexError, match=f"index {int(idx[bad[0]])} is out of bounds"):
            cugather.runtime.run_plan(op.plan(data, cp.asarray(idx), kind=kind), data,
                                      cp.asarray(idx))
    good = np.where(idx >= n, 0, idx)
    assert_same(op(data, cp.asarray(good)).get(), np.take(data.get(), good, axis=axis), kind)


def test_elements_and_nd_name_the_first_bad_index_in_one_launch():
    rng = np.random.default_rng(5)
    data = cp.asarray(rng.standard_normal((300, 400)).astype(np.float32))
    picks = rng.integers(0, 400, size=(300, 50))
    picks[123, 7], picks[250, 1] = 400, -401
    with pytest.raises(IndexError) as err:
        cugather.take_along_axis(data, cp.asarray(picks), axis=1)
    assert _position(err.value, picks.shape) == 123 * 50 + 7
    tuples = rng.integers(0, 300, size=(5000, 2)) % np.array([300, 400])
    tuples[4000, 1], tuples[3000, 0] = 400, 300
    with pytest.raises(IndexError) as err:
        cugather.gather_nd(data, cp.asarray(tuples))
    assert _position(err.value, tuples.shape) == 3000 * 2


def test_out_stays_untouched_and_a_good_call_follows():
    data = cp.arange(40, dtype=cp.float64).reshape(8, 5)
    out = cp.full((3, 5), -1.0)
    for fn in (lambda o: cugather.gather(data, cp.asarray([1, 9, 2]), out=o),
               lambda o: cugather.gather_elements(data[:3], cp.asarray([[0] * 5, [9] * 5, [1] * 5]),
                                                  0, out=o)):
        with pytest.raises(IndexError, match="index 9"):
            fn(out)
        assert bool((out == -1).all())
    assert_same(cugather.gather(data, cp.asarray([1, 7, 2]), out=out).get(),
                data.get()[[1, 7, 2]], "after the error")


def test_threads_each_name_their_own_first_bad_index():
    data = cp.arange(1000 * 16, dtype=cp.float32).reshape(1000, 16)
    errors, wrong = [], []

    def worker(t):
        rng = np.random.default_rng(t)
        for _ in range(200):
            idx = rng.integers(0, 1000, size=3000)
            first = int(rng.integers(0, 3000))
            idx[first] = 1000 + t
            idx[rng.integers(first, 3000, size=5)] = 1000 + t  # later bad ones
            try:
                cugather.gather(data, cp.asarray(idx))
                wrong.append((t, "no error"))
            except IndexError as e:
                if _position(e, idx.shape) != first:
                    wrong.append((t, str(e)))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
            good = idx % 1000
            got = cugather.gather(data, cp.asarray(good))
            if not bool((got == data[cp.asarray(good)]).all()):
                wrong.append((t, "bad result"))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=240)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors and not wrong, (errors[:3], wrong[:3])


def test_several_devices_check_on_their_own_device():
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs")
    for dev in (1, 0, 1):
        with cp.cuda.Device(dev):
            data = cp.arange(60, dtype=cp.int32).reshape(12, 5)
            idx = cp.asarray([3, 11, 12 + dev, 4])
        with pytest.raises(IndexError, match=f"index {12 + dev} .*at indices\\[2\\]"):
            cugather.gather(data, idx)
        with cp.cuda.Device(dev):
            got = cugather.gather(data, cp.asarray([3, 11]))
        assert got.data.device_id == dev and got.get().tolist() == data.get()[[3, 11]].tolist()
