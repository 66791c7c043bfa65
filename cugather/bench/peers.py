"""The implementations a benchmark case is run with, and how each is timed.

CuPy-stream implementations (the copy ceiling, cugather, cupy.take, the
onnxruntime-style kernel) are timed with CUDA events around each call on
CuPy's current stream; torch with torch.cuda events on torch's current
stream.  Before each timed call a one-thread kernel holds the stream (it
sleeps on the GPU's clock) until the start event, the call and the stop
event are all queued, so the events bracket the GPU work of the call and
not the host's time to validate arguments and launch; that host time is
measured on its own (:func:`host_time`).  Calls that synchronise with the
host (raise mode) cannot be held and are timed with plain events.  JAX
dispatches asynchronously on its own streams and is timed over many
back-to-back calls closed by block_until_ready().
"""

from __future__ import annotations

import time

import numpy

from ..validate import external_stream

__all__ = ["ORT_STYLE_SOURCE", "HOLD_SOURCE", "Samples", "ort_style_kernel", "time_cupy",
           "time_torch", "time_jax", "host_time"]

# One element per thread, 256 threads, two 32-bit fast_divmods, int32
# offsets, negative indices wrapped once and anything else read as 0 --
# the structure of onnxruntime's CUDA GatherImpl.
ORT_STYLE_SOURCE = r"""
struct FastDivmod { int d; unsigned int m; int l; };
__device__ __forceinline__ int fdiv(const FastDivmod& f, int n) {
    unsigned int t = __umulhi((unsigned int)n, f.m);
    return (int)((t + (unsigned int)n) >> f.l);
}
template <typename T, typename I>
__global__ void ort_gather(const T* in, const I* idx, T* out, long long n_out,
                           FastDivmod block_div, FastDivmod inner_div,
                           long long axis_len, long long input_block) {
    long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n_out) return;
    int q = fdiv(block_div, (int)id);
    int r = (int)id - q * block_div.d;
    int i = fdiv(inner_div, r);
    int offset = r - i * inner_div.d;
    long long v = idx[i];
    if (v < 0) v += axis_len;
    if (v < 0 || v >= axis_len) { out[id] = T(); return; }
    out[id] = in[q * input_block + (int)v * inner_div.d + offset];
}
"""

_ORT_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long",
              16: "double2"}


def _fast_divmod_struct(d: int):
    l = (d - 1).bit_length()  # noqa: E741
    m = ((1 << 32) * ((1 << l) - d)) // d + 1
    return numpy.array([(d, m & 0xFFFFFFFF, l)],
                       dtype=numpy.dtype([("d", "<i4"), ("m", "<u4"), ("l", "<i4")], align=True))


_ort_modules: dict = {}


def ort_style_kernel(cp, itemsize: int, index_dtype: str):
    """A callable(data, idx, out, axis) running the onnxruntime-style kernel."""
    key = (itemsize, index_dtype)
    if key not in _ort_modules:
        names = [f"ort_gather<{t}, {i}>" for t in _ORT_TYPES.values() for i in ("int", "long long")]
        mod = cp.RawModule(code=ORT_STYLE_SOURCE, options=("--std=c++14",), name_expressions=names)
        _ort_modules.update({
            (size, idt): mod.get_function(
                f"ort_gather<{t}, {'int' if idt == 'int32' else 'long long'}>")
            for size, t in _ORT_TYPES.items() for idt in ("int32", "int64")})
    fn = _ort_modules[key]

    def run(data, idx, out, axis):
        inner = int(numpy.prod(data.shape[axis + 1:], dtype=numpy.int64))
        n_idx = idx.size
        n_out = out.size
        block = (n_idx * inner)
        grid = (-(-n_out // 256),)
        fn(grid, (256,), (data, idx, out, numpy.int64(n_out), _fast_divmod_struct(block),
                          _fast_divmod_struct(inner), numpy.int64(data.shape[axis]),
                          numpy.int64(data.shape[axis] * inner)))
    return run


# One thread that sleeps until ``ns`` nanoseconds of the GPU's global timer
# have passed: it keeps the stream busy while the host queues a timed call.
HOLD_SOURCE = r"""
extern "C" __global__ void cg_bench_hold(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
"""

_hold: dict = {}
_HOLD_MAX_S = 0.05


class Samples(list):
    """Milliseconds per call; ``unheld`` counts samples whose call was queued
    after the holding kernel had finished (they include host time)."""

    unheld = 0


def _hold_kernel(cp):
    dev = cp.cuda.Device().id
    if dev not in _hold:
        _hold[dev] = cp.RawKernel(HOLD_SOURCE, "cg_bench_hold")
    return _hold[dev]


def _timed(fn, repeat, warmup, hold, event, elapsed, is_done, synchronize, launch_hold,
           syncs=False):
    """The timing loop shared by :func:`time_cupy` and :func:`time_torch`.

    ``syncs``: ``fn`` synchronises with the stream itself (raise mode), so a
    finished start event proves nothing; the hold (4x the call's host time,
    at least 100 us) is then trusted to outlast the host's work before the
    launch, and the sample runs from the kernel's start to the stop event
    recorded once ``fn`` has returned: the device time plus the host's
    return from the synchronisation.
    """
    for _ in range(warmup):
        fn()
    synchronize()
    samples = Samples()
    if hold:
        t0 = time.perf_counter()
        fn()
        host_s = time.perf_counter() - t0
        synchronize()
        hold_s = min(max(4 * host_s, 100e-6), _HOLD_MAX_S)
    for _ in range(repeat):
        for _attempt in range(6):
            start, stop = event(), event()
            if hold:
                launch_hold(int(hold_s * 1e9))
            start.record()
            fn()
            stop.record()
            # A start event already passed means the hold ended before the call was
            # fully queued, so the sample may include host time: hold longer, retry.
            late = hold and not syncs and is_done(start)
            stop.synchronize()
            if not late:
                break
            hold_s = min(2 * hold_s, _HOLD_MAX_S)
        else:
            samples.unheld += 1
        samples.append(elapsed(start, stop))
    return samples


def time_cupy(cp, fn, repeat: int, warmup: int = 3, hold: bool = True,
              syncs: bool = False) -> Samples:
    """Milliseconds per call: CUDA events around each call on CuPy's stream,
    queued behind a holding kernel unless ``hold`` is False (``syncs``: see
    :func:`_timed`)."""
    stream = cp.cuda.get_current_stream()

    def launch_hold(ns):
        _hold_kernel(cp)((1,), (1,), (numpy.uint64(ns),))

    return _timed(fn, repeat, warmup, hold, cp.cuda.Event, cp.cuda.get_elapsed_time,
                  lambda e: e.done, stream.synchronize, launch_hold, syncs)


def time_torch(torch, fn, repeat: int, warmup: int = 3, hold: bool = True) -> Samples:
    """Milliseconds per call: torch.cuda events on torch's current stream,
    queued behind a holding kernel (launched there through CuPy)."""
    import cupy as cp

    ts = torch.cuda.current_stream()
    ext = external_stream(cp, ts.cuda_stream)

    def launch_hold(ns):
        with ext:
            _hold_kernel(cp)((1,), (1,), (numpy.uint64(ns),))

    return _timed(fn, repeat, warmup, hold, lambda: torch.cuda.Event(enable_timing=True),
                  lambda a, b: a.elapsed_time(b), lambda e: e.query(), torch.cuda.synchronize,
                  launch_hold)


def time_jax(fn, repeat: int, warmup: int = 3, batches: int = 5) -> list:
    """Milliseconds per call: back-to-back calls closed by block_until_ready()."""
    for _ in range(warmup):
        fn().block_until_ready()
    per = max(1, repeat // batches)
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per - 1):
            fn()
        fn().block_until_ready()
        times.append((time.perf_counter() - t0) * 1e3 / per)
    return times


def host_time(fn, sync, calls: int = 2000) -> float:
    """Host (CPU) microseconds per call for back-to-back asynchronous calls."""
    for _ in range(50):
        fn()
    sync()
    t0 = time.process_time()
    w0 = time.perf_counter()
    for _ in range(calls):
        fn()
    cpu = time.process_time() - t0
    wall = time.perf_counter() - w0
    sync()
    return min(cpu, wall) * 1e6 / calls
