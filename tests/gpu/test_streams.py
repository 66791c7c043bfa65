"""Streams and CUDA graphs (GPU tier).

Work goes on CuPy's current stream or on ``stream=``; two streams run gathers
side by side; outside raise mode a call never synchronises: gathers are
captured into a CUDA graph and replayed after new index values are written
into the same buffer; raise mode inside a capture is a clear RuntimeError.

A busy kernel (``support.gpu.spin``) holds a stream for a known time: work
queued behind it on the right stream sees what the stream did first, work
wrongly sent elsewhere would run at once and see stale data.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from support import gpu as g
from support.reference import assert_same

pytestmark = pytest.mark.gpu

NON_RAISE = [(n, m) for n, m in g.OP_MODES if m != "raise"]
SPIN_MS = 200


def _skip_missing(name):
    if not g.available(name):
        pytest.skip(f"cugather has no {name} operation in this version")


def _setup(seed, dtype="float32", **kw):
    rng = np.random.default_rng(seed)
    host = g.host_arrays(rng, dtype, **kw)
    return host, g.device_arrays(host)


def _warm(name, mode, dev, stream=None):
    """One call first, so the timed/captured one finds its kernels compiled and bound."""
    g.call(name, mode, dev, stream=stream)
    g.cp().cuda.Device().synchronize()


def _bumped(host, name):
    """The host inputs after ``data += 1`` on the device."""
    bumped = dict(host)
    key = "data3" if name == "nd" else "data"
    bumped[key] = host[key] + np.asarray(1, host[key].dtype)
    return bumped


# ---------------------------------------------------------------- which stream
@pytest.mark.parametrize("name,mode", g.OP_MODES)
def test_runs_on_the_current_stream(name, mode):
    _skip_missing(name)
    cp = g.cp()
    host, dev = _setup(1)
    _warm(name, mode, dev)
    s = cp.cuda.Stream(non_blocking=True)  # does not wait for the legacy default stream
    key = "data3" if name == "nd" else "data"
    with s:
        g.spin(s, SPIN_MS)
        dev[key] += 1  # queued behind the spin
        got = g.call(name, mode, dev)  # no stream=: CuPy's current stream is s
    s.synchronize()
    assert_same(got.get(), g.reference(name, mode, _bumped(host, name)),
                f"{name} mode={mode} did not run on the current stream")


@pytest.mark.parametrize("name,mode", [(n, m) for n, m in g.OP_MODES if n in g.WITH_STREAM])
def test_runs_on_the_stream_argument(name, mode):
    _skip_missing(name)
    cp = g.cp()
    host, dev = _setup(2)
    _warm(name, mode, dev)
    s = cp.cuda.Stream(non_blocking=True)
    key = "data3" if name == "nd" else "data"
    with s:
        g.spin(s, SPIN_MS)
        dev[key] += 1
    got = g.call(name, mode, dev, stream=s)  # the current stream is the default one
    s.synchronize()
    assert_same(got.get(), g.reference(name, mode, _bumped(host, name)),
                f"{name} mode={mode} did not run on stream=")


@pytest.mark.parametrize("name", [n for n in g.WITH_STREAM])
@pytest.mark.parametrize("index_kind", ["int16 device", "strided int64 device", "numpy int32"])
@pytest.mark.parametrize("as_handle", [False, True], ids=["Stream", "raw handle"])
def test_stream_argument_covers_index_conversion(name, index_kind, as_handle):
    """Indices that need converting: the copy must be ordered before the gather on ``stream=``.

    The current stream is held busy; the gather's own stream is idle.  A
    conversion queued on the busy stream would still be pending when the
    gather on ``stream=`` reads its result.  ``stream=`` is a CuPy stream or
    its raw ``cudaStream_t``.
    """
    _skip_missing(name)
    cp = g.cp()
    host, dev = _setup(3, index_dtype="int64")
    key = {"gather": "idx", "op": "idx", "elements": "idx_e", "nd": "idx_nd"}[name]
    if index_kind == "int16 device":
        host[key] = host[key].astype(np.int16)
        dev[key] = cp.asarray(host[key])
    elif index_kind == "strided int64 device":
        wide = np.repeat(host[key][..., None], 2, axis=-1)  # every other element
        dev[key] = cp.asarray(wide)[..., 0]
    else:
        host[key] = host[key].astype(np.int32)
        dev[key] = host[key]  # host array: copied to the device by the call
    _warm(name, "wrap", dev)
    busy = cp.cuda.Stream(non_blocking=True)
    s = cp.cuda.Stream(non_blocking=True)
    with busy:
        g.spin(busy, SPIN_MS)
        got = g.call(name, "wrap", dev, stream=s.ptr if as_handle else s)
    s.synchronize()
    result = got.get()
    busy.synchronize()
    assert_same(result, g.reference(name, "wrap", host),
                f"{name} with {index_kind} indices: the conversion was not ordered before the "
                f"gather on stream=")


def test_two_streams_in_two_threads_concurrently():
    """Two host threads, each feeding its own stream; a shared GatherOp in both."""
    cp = g.cp()
    import cugather

    shared_op = cugather.GatherOp(1, mode="wrap")
    cases = []
    for seed in range(2):
        host, dev = _setup(10 + seed, out_of_range=True, n=2000)
        cases.append((host, dev))
    for _, dev in cases:
        shared_op(dev["data"], dev["idx"])
    cp.cuda.Device().synchronize()
    results = [[], []]
    errors = []
    barrier = threading.Barrier(2)

    def work(k):
        try:
            host, dev = cases[k]
            s = cp.cuda.Stream(non_blocking=True)
            with s:
                barrier.wait()
                g.spin(s, 50)  # the two streams overlap
                for i in range(40):
                    results[k].append(("op", shared_op(dev["data"], dev["idx"])))
                    for name, mode in NON_RAISE:
                        if g.available(name):
                            results[k].append(((name, mode), g.call(name, mode, dev)))
            s.synchronize()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k, (host, _) in enumerate(cases):
        refs = {}
        for what, got in results[k]:
            name, mode = ("gather", "wrap") if what == "op" else what
            if (name, mode) not in refs:
                refs[(name, mode)] = g.reference(name, mode, host)
            assert_same(got.get(), refs[(name, mode)], f"stream {k}: {what}")


# ---------------------------------------------------------------- no synchronisation
@pytest.mark.parametrize("name,mode", NON_RAISE)
def test_never_waits_for_the_stream_outside_raise_mode(name, mode):
    _skip_missing(name)
    cp = g.cp()
    host, dev = _setup(4)
    shape = g.out_shape(name, host)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        _warm(name, mode, dev)
        out = cp.empty(shape, host["data"].dtype)
        if name != "along":
            g.call(name, mode, dev, out=out)
        s.synchronize()
        g.spin(s, SPIN_MS)
        start = time.perf_counter()
        got = g.call(name, mode, dev)  # allocating its output
        if name != "along":
            g.call(name, mode, dev, out=out)
        elapsed = time.perf_counter() - start
        busy = not s.done
    s.synchronize()
    assert busy and elapsed < SPIN_MS / 1000 / 3, (
        f"{name} mode={mode} waited for the stream ({elapsed * 1000:.0f} ms, busy={busy})")
    want = g.reference(name, mode, host)
    assert_same(got.get(), want)
    if name != "along":
        assert_same(out.get(), want)


@pytest.mark.parametrize("name", [n for n, modes in g.OPS if "raise" in modes])
def test_raise_mode_does_synchronise(name):
    """The documented cost of raise mode: the call returns after the stream's earlier work."""
    _skip_missing(name)
    cp = g.cp()
    host, dev = _setup(5)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        _warm(name, "raise", dev)
        g.spin(s, SPIN_MS)
        start = time.perf_counter()
        got = g.call(name, "raise", dev)
        elapsed = time.perf_counter() - start
    assert elapsed > SPIN_MS / 1000 / 2, f"{name} raise mode returned after {elapsed:.3f} s"
    assert_same(got.get(), g.reference(name, "raise", host))


# ---------------------------------------------------------------- CUDA graphs
def _graph_ops():
    return [(n, m) for n, m in NON_RAISE if g.available(n) and n != "along"]


def test_capture_and_replay_with_new_indices():
    """Every operation and non-raise mode captured into one graph, replayed twice.

    Between the replays new values (some out of range) are written into the
    very index buffers the graph was captured with; each replay must gather
    with the values present at that time.
    """
    cp = g.cp()
    rng = np.random.default_rng(6)
    host = g.host_arrays(rng, "float32")
    dev = g.device_arrays(host)
    ops = _graph_ops()
    outs = {}
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        for name, mode in ops:
            outs[(name, mode)] = cp.full(g.out_shape(name, host), 12345, host["data"].dtype)
            g.call(name, mode, dev, out=outs[(name, mode)], stream=s)  # bind before capture
            outs[(name, mode)].fill(12345)
        g.call("gather", "wrap", dev)  # leaves a free block of the size allocated below
        s.synchronize()
        s.begin_capture()
        try:
            for name, mode in ops:
                g.call(name, mode, dev, out=outs[(name, mode)],
                        stream=s if name in g.WITH_STREAM else None)
            allocated = g.call("gather", "wrap", dev)  # an output allocated in the capture
        finally:
            graph = s.end_capture()
        s.synchronize()
    for key, out in outs.items():
        assert (out.get() == 12345).all(), f"{key} ran during capture instead of recording"

    for round_, out_of_range in enumerate((False, True)):
        new = g.host_arrays(np.random.default_rng(100 + round_), "float32",
                            out_of_range=out_of_range)
        for k in ("idx", "idx_e", "idx_nd"):
            dev[k].set(new[k])  # same buffers, new values
            host[k] = new[k]
        cp.cuda.Device().synchronize()
        graph.launch(stream=s)
        s.synchronize()
        for (name, mode), out in outs.items():
            assert_same(out.get(), g.reference(name, mode, host),
                        f"replay {round_}: {name} mode={mode}")
        assert_same(allocated.get(), g.reference("gather", "wrap", host), "allocated output")


@pytest.mark.parametrize("name", [n for n, modes in g.OPS if "raise" in modes])
@pytest.mark.parametrize("via", ["current stream", "stream argument"])
def test_raise_mode_in_capture_is_a_clear_error(name, via):
    _skip_missing(name)
    if via == "stream argument" and name not in g.WITH_STREAM:
        pytest.skip(f"{name} has no stream= argument")
    cp = g.cp()
    host, dev = _setup(7)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        _warm(name, "raise", dev)
        _warm("gather", "wrap", dev)
        s.synchronize()
        s.begin_capture()
        try:
            with pytest.raises(RuntimeError, match="(?i)captur"):
                g.call(name, "raise", dev, stream=s if via == "stream argument" else None)
            ok = g.call("gather", "wrap", dev, stream=s)  # the capture is still valid
        finally:
            graph = s.end_capture()
        graph.launch(stream=s)
        s.synchronize()
    assert_same(ok.get(), g.reference("gather", "wrap", host))
    # and the stream works normally afterwards
    with s:
        got = g.call(name, "raise", dev)
    s.synchronize()
    assert_same(got.get(), g.reference(name, "raise", host))
