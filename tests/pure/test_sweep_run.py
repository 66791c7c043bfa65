"""The sweep's GPU path rehearsed on the host: CuPy, torch and JAX replaced by
NumPy stand-ins and the timers by fakes, so that data generation, the
bit-exact checks, the adaptive sample counts, the records and the files the
command writes are exercised without a GPU.  cugather's plan is the real one;
its launch is numpy.take (the stand-in's output is the reference)."""

import json
import math
import sys
import types
from argparse import Namespace

import numpy as np
import pytest

import cugather
from cugather.bench import sweep_run
from cugather.bench.peers import Samples
from cugather.bench.sweep import SweepShape

RealGatherOp = cugather.GatherOp


class DevArray(np.ndarray):
    """A NumPy array with the few CuPy/torch/JAX attributes the runner touches."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)

    def contiguous(self):
        return self

    def block_until_ready(self):
        return self


def dev(a):
    return np.asarray(a).view(DevArray)


def splitmix(seed, n):
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))).astype(np.uint32)


def fake_cupy():
    copies = []

    def kernel(in_params, out_params, body, name):
        assert "0x9E3779B97F4A7C15" in body and name == "cg_sweep_fill"

        def run(seed, out):
            out[...] = splitmix(int(seed), out.size)
        return run

    rng = lambda seed: types.SimpleNamespace(  # noqa: E731
        integers=lambda lo, hi, size, dtype: dev(np.random.default_rng(seed).integers(
            lo, hi, size=size, dtype=dtype)))
    runtime = types.SimpleNamespace(
        memcpyDeviceToDevice=3,
        memcpyAsync=lambda dst, src, n, kind, stream: copies.append(n),
        getDeviceProperties=lambda d: {"multiProcessorCount": 132, "l2CacheSize": 50 << 20})
    cuda = types.SimpleNamespace(
        runtime=runtime, get_current_stream=lambda: types.SimpleNamespace(ptr=0),
        Device=lambda *a: types.SimpleNamespace(synchronize=lambda: None, id=0))
    pool = types.SimpleNamespace(free_all_blocks=lambda: None)
    return types.SimpleNamespace(
        uint8=np.uint8, uint32=np.uint32, empty=lambda n, dtype: dev(np.empty(n, dtype)),
        empty_like=lambda a: dev(np.empty_like(a)), where=lambda *a: dev(np.where(*a)),
        take=lambda a, i, axis: dev(np.take(a, i, axis=axis)), bitwise_and=np.bitwise_and,
        bitwise_or=np.bitwise_or, ElementwiseKernel=kernel, cuda=cuda,
        random=types.SimpleNamespace(default_rng=rng), from_dlpack=dev,
        get_default_memory_pool=lambda: pool, copies=copies)


class FakeOp:
    """cugather.GatherOp with the real plan and numpy.take as the launch."""

    def __init__(self, axis, mode):
        self.real, self.axis = RealGatherOp(axis, mode=mode), axis

    def plan(self, data, idx):
        return self.real.plan(data, idx)

    def __call__(self, data, idx):
        return dev(np.take(data, idx, axis=self.axis))


def fake_torch(corrupt=False):
    def index_select(t, dim, i):
        assert i.ndim == 1 and (i >= 0).all(), "torch takes 1-D non-negative indices"
        out = np.take(t, i, axis=dim)
        if corrupt and out.size:
            out.view(np.uint8).reshape(-1)[0] ^= 1
        return dev(out)
    return types.SimpleNamespace(from_dlpack=dev, index_select=index_select,
                                 cuda=types.SimpleNamespace(empty_cache=lambda: None))


def fake_jax():
    jnp = types.ModuleType("jax.numpy")
    def take(d, i, axis, mode):
        assert mode == "clip" and (np.asarray(i) >= 0).all(), "clip would hide negatives"
        return dev(np.take(d, i, axis=axis, mode=mode))
    jnp.take = take
    jax = types.ModuleType("jax")
    jax.numpy, jax.jit = jnp, (lambda f: f)
    jax.dlpack = types.SimpleNamespace(from_dlpack=dev)
    return jax


def constant_timer(ms):
    def timer(*args):
        fn, repeat = (args[1], args[2]) if not callable(args[0]) else (args[0], args[1])
        fn()
        return Samples([ms] * repeat)
    return timer


SHAPES = [
    SweepShape((50, 6), "float16", 0, (7,), "int64", "l2", "awkward"),
    SweepShape((3, 40, 5), "bool", 1, (4, 3), "int32", "l2", "awkward"),
    SweepShape((2, 3, 17), "complex128", 2, (), "int64", "l2", "element"),
    SweepShape((9, 2, 2, 4), "int64", 0, (1,), "int32", "l2", "loguniform"),
    SweepShape((1000,), "uint8", 0, (64,), "int32", "l2", "element"),
]


@pytest.fixture
def host(monkeypatch, tmp_path):
    """Stand-ins installed; returns a function running the sweep command."""
    cp = fake_cupy()
    monkeypatch.setattr(cugather, "GatherOp", FakeOp)
    monkeypatch.setattr(sweep_run, "draw_shapes", lambda n, seed: SHAPES[:n])
    monkeypatch.setattr(sweep_run, "_jax_takes", {})
    monkeypatch.setattr(sweep_run, "time_cupy", lambda cp_, fn, r, w: constant_timer(0.016)(fn, r))
    monkeypatch.setattr(sweep_run, "time_torch", lambda t, fn, r, w: constant_timer(0.008)(fn, r))
    monkeypatch.setattr(sweep_run, "time_jax",
                        lambda fn, r, w, batches: (fn(), [0.04] * batches)[1])
    jax = fake_jax()
    monkeypatch.setitem(sys.modules, "jax", jax)
    monkeypatch.setitem(sys.modules, "jax.numpy", jax.numpy)

    def run(torch=None, with_jax=True, n=len(SHAPES)):
        peers = {"torch": torch or fake_torch()} if torch is not False else {}
        if with_jax:
            peers["jax"] = jax
        args = Namespace(sweep=n, seed=3, out=str(tmp_path), no_peers=False)
        return sweep_run.run_sweep_command(cp, args, peers, {"numpy": np.__version__}, "fake GPU")
    return run


def test_host_rehearsal_writes_checked_records(host, tmp_path, capsys):
    res = host()
    on_disk = json.loads((tmp_path / "sweep.json").read_text())
    assert on_disk["summary"] == json.loads(json.dumps(res["summary"]))
    assert len(on_disk["records"]) == len(SHAPES) and on_disk["complete"]
    for rec, s in zip(on_disk["records"], SHAPES):
        assert rec["errors"] == {}, rec["errors"]
        assert rec["checked"] == {"cupy.take": True, "torch.index_select": True,
                                  "jax.numpy.take": True}
        assert rec["out_shape"] == list(s.shape[:s.axis] + s.indices + s.shape[s.axis + 1:])
        assert rec["plan"]["kind"] == RealGatherOp(s.axis, mode="wrap").plan(
            (s.shape, s.dtype), (s.indices, s.index_dtype)).kind
        # best peer: torch at 8 us; cugather 16 us
        assert rec["best_peer"] == "torch.index_select"
        assert rec["ratio"] == pytest.approx(0.5)
        moved = 2 * math.prod(rec["out_shape"]) * np.dtype(s.dtype).itemsize + rec["index_bytes"]
        assert rec["impl"]["cugather"]["gbps"] == pytest.approx(moved / 0.016 / 1e6)
        assert rec["why"].startswith("launch-bound")
    out = capsys.readouterr()
    assert "every result bit-exact" in out.out and f"[{len(SHAPES)}/{len(SHAPES)}]" in out.err
    assert (tmp_path / "sweep.txt").read_text().startswith("sweep: 5 shapes (seed 3)")


def test_host_rehearsal_reports_a_wrong_peer(host, tmp_path, capsys):
    res = host(torch=fake_torch(corrupt=True), n=2)
    assert res["summary"]["mismatches"] == [[0, "torch.index_select"], [1, "torch.index_select"]]
    assert all(r["why"].startswith("WRONG RESULT") for r in res["records"])
    assert "MISMATCHES: #0 torch.index_select, #1 torch.index_select" in capsys.readouterr().out


def test_host_rehearsal_notes_missing_peers(host, capsys):
    res = host(torch=False, with_jax=False, n=1)
    assert len(res["notes"]) == 2 and "torch.index_select skipped" in res["notes"][0]
    assert res["records"][0]["best_peer"] == "cupy.take"
    assert "note: jax" in capsys.readouterr().out


def test_peer_failure_is_recorded_not_fatal(host):
    broken = fake_torch()
    broken.index_select = lambda *a: (_ for _ in ()).throw(RuntimeError("boom\nmore"))
    res = host(torch=broken, n=1)
    rec = res["records"][0]
    assert rec["errors"] == {"torch.index_select": "RuntimeError: boom"}
    assert rec["best_peer"] == "cupy.take"
    assert res["summary"]["errors"][0][:2] == [0, "torch.index_select"]


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "float16", "int16", "float32",
                                   "int32", "float64", "int64", "complex128"])
def test_make_table_values(dtype):
    s = SweepShape((37, 3), dtype, 0, (5,), "int64", "l2", "loguniform")
    a = sweep_run.make_table(fake_cupy(), s, seed=11)
    assert a.shape == (37, 3) and a.dtype == np.dtype(dtype)
    again = sweep_run.make_table(fake_cupy(), s, seed=11)
    assert a.tobytes() == again.tobytes()
    assert a.tobytes() != sweep_run.make_table(fake_cupy(), s, seed=12).tobytes()
    if dtype == "bool":
        assert set(a.view(np.uint8).ravel()) <= {0, 1}
    elif np.dtype(dtype).kind in "fc":
        parts = a.view(a.real.dtype) if dtype == "complex128" else a
        mag = np.abs(np.asarray(parts, np.float64))
        assert np.isfinite(mag).all() and (mag >= np.finfo(parts.dtype).tiny).all()
        assert (mag < 2).all() and (np.asarray(parts) < 0).any()
    else:
        assert len(np.unique(a)) > 50  # raw random bits


@pytest.mark.parametrize("ms,expected", [(1e-3, 30), (20.0, 5), (4.0, 10), (9.0, 5), (7.0, 6)])
def test_adaptive_sample_count(ms, expected):
    calls = []

    def timer(fn, repeat, warmup):
        calls.append((repeat, warmup))
        return Samples([ms] * repeat)
    got = sweep_run.adaptive(timer, lambda: None)
    assert len(got) == expected
    assert calls[0] == (sweep_run.MIN_SAMPLES, sweep_run.WARMUP)
    assert all(w == 0 for _, w in calls[1:])


@pytest.mark.parametrize("argv,cases,sweep", [
    (["--sweep", "3"], False, True),
    (["--sweep", "3", "--quick"], True, True),
    (["--sweep", "3", "--case", "tiny"], True, True),
    ([], True, False),
])
def test_bench_runs_the_sweep_alone_unless_cases_are_asked(monkeypatch, tmp_path, argv, cases,
                                                           sweep):
    import argparse

    from cugather import bench

    ran = []
    monkeypatch.setattr("cugather.env.no_gpu_reason", lambda: None)
    monkeypatch.setattr(bench, "_load_peers", lambda enabled: {})
    monkeypatch.setattr(bench, "_versions", lambda cp: {})
    monkeypatch.setattr(bench, "_gpu_name", lambda cp: "G")
    monkeypatch.setattr(bench, "_run_cases", lambda cp, args, peers: ran.append("cases"))
    monkeypatch.setattr(sweep_run, "run_sweep_command",
                        lambda cp, args, peers, v, g: ran.append(("sweep", args.sweep, args.seed)))
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    assert bench.run(p.parse_args(argv + ["--out", str(tmp_path)])) == 0
    assert ran == (["cases"] if cases else []) + ([("sweep", 3, 0)] if sweep else [])


def test_a_failing_cugather_call_is_recorded(host, monkeypatch):
    class Broken(FakeOp):
        def __call__(self, data, idx):
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")
    monkeypatch.setattr(cugather, "GatherOp", Broken)
    res = host(n=2)
    for rec in res["records"]:
        assert rec["ratio"] is None and rec["plan"]["entry"].startswith("cugather_")
        assert rec["why"] == "cugather failed: RuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS"
    assert res["summary"]["n"] == 0 and len(res["summary"]["errors"]) == 2
