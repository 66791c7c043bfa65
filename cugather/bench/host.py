"""``python -m cugather bench --host``: the host time of small calls, interleaved.

Host time per call varies a lot between machine instances, so every
contender is timed in the same process, in turns (A B C A B C ...): each
batch runs every contender for ``calls`` back-to-back calls (then one stream
synchronisation) and records its time per call.  The report gives, per
contender, the median over the batches, the spread (the interquartile range
over the median) and the median of its per-batch ratio to
``torch.index_select`` and to the bare launch of the same batch, so that a
slow batch moves every contender alike and drops out of the ratios.

The contenders: a bare ``cuLaunchKernel`` of cugather's kernel with a
prepacked argument block (with and without one ``cupy.ndarray`` output
allocation), a cached ``GatherOp`` call in each mode, ``gather()`` and
``take()`` with default arguments (raise mode: the kernel checks, one
synchronisation), ``gather_elements`` / ``take_along_axis`` on a top-k pick,
``gather_nd``, and the peers ``cupy.take``, ``cupy.take_along_axis``,
``torch.index_select`` and ``torch.gather``.  A breakdown times the pieces
of a cached call on their own (allocation, stream lookup, the launch).
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List

import numpy

__all__ = ["host_benchmark", "interleaved", "format_host"]

TINY = ((1000, 64), "float32", 10)           # table, dtype, int64 indices (a decode step)
TOPK = (256, 128256, 50)                     # rows, width, picks per row (a top-k pick)


def interleaved(contenders: Dict[str, Callable[[], object]], sync: Callable[[], None],
                batches: int = 15, calls: int = 2000, warmup: int = 200) -> Dict[str, List[float]]:
    """Microseconds per call of each contender, one value per batch, timed in turns."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
        sync()
    times: Dict[str, List[float]] = {name: [] for name in contenders}
    clock = time.perf_counter
    for _ in range(batches):
        for name, fn in contenders.items():
            sync()
            start = clock()
            for _ in range(calls):
                fn()
            sync()
            times[name].append((clock() - start) / calls * 1e6)
    return times


def _summary(times: Dict[str, List[float]], references: List[str]) -> dict:
    out = {}
    for name, ts in times.items():
        a = numpy.asarray(ts)
        q1, med, q3 = numpy.percentile(a, [25, 50, 75])
        row = {"us": float(med), "spread": float((q3 - q1) / med), "batches": [float(t) for t in ts]}
        for ref in references:
            if ref in times:
                row[f"vs {ref}"] = float(numpy.median(a / numpy.asarray(times[ref])))
        out[name] = row
    return out


def host_benchmark(cp, peers: dict, batches: int = 15, calls: int = 2000) -> dict:
    """Every contender of the module docstring; returns the JSON-able result."""
    import cugather
    from cupy.cuda import driver

    from ..runtime import bind

    rng = cp.random.default_rng(0)
    shape, dtype, n = TINY
    table = rng.standard_normal(size=shape, dtype=numpy.float32).astype(dtype)
    idx = rng.integers(0, shape[0], size=n, dtype=numpy.int64)
    rows, width, k = TOPK
    scores = rng.standard_normal(size=(rows, width), dtype=numpy.float32)
    picks = rng.integers(0, width, size=(rows, k), dtype=numpy.int64)
    nd_idx = idx.reshape(n, 1)

    ops = {m: cugather.GatherOp(0, mode=m, fill_value=0) for m in ("wrap", "clip", "fill", "raise")}
    # The bare launch: the wrap kernel with its argument block packed once.
    plan = ops["wrap"].plan(table, idx)
    bound = bind(plan, table.data.device_id, out_dtype=table.dtype)
    kernel = bound.main
    result = cp.ndarray(plan.out_shape, table.dtype)
    kernel.launch(0, table.data.ptr, idx.data.ptr, result.data.ptr, 0)
    fn, params = kernel.kernel.handle, numpy.array([kernel.args.ctypes.data], numpy.uint64)
    pptr = params.ctypes.data
    (g0, g1, g2), (b0, b1, b2) = kernel.grid, kernel.block
    stream = cp.cuda.get_current_stream().ptr
    out_shape, out_dtype = plan.out_shape, table.dtype
    launch = driver.launchKernel
    ndarray = cp.ndarray

    def bare():
        launch(fn, g0, g1, g2, b0, b1, b2, 0, stream, pptr, 0)

    def bare_alloc():
        ndarray(out_shape, out_dtype)
        launch(fn, g0, g1, g2, b0, b1, b2, 0, stream, pptr, 0)

    contenders: Dict[str, Callable[[], object]] = {
        "bare cuLaunchKernel": bare,
        "bare cuLaunchKernel + cupy.ndarray": bare_alloc,
    }
    for m, op in ops.items():
        contenders[f"GatherOp {m}"] = lambda op=op: op(table, idx)
    contenders.update({
        "gather() default (raise)": lambda: cugather.gather(table, idx),
        "take() default (raise)": lambda: cugather.take(table, idx, axis=0),
        "cupy.take": lambda: cp.take(table, idx, axis=0),
        "gather_nd raise": lambda: cugather.gather_nd(table, nd_idx),
        "gather_nd wrap": lambda: cugather.gather_nd(table, nd_idx, mode="wrap"),
        "take_along_axis top-k": lambda: cugather.take_along_axis(scores, picks, axis=1),
        "gather_elements wrap top-k": lambda: cugather.gather_elements(scores, picks, 1,
                                                                       mode="wrap"),
        "cupy.take_along_axis top-k": lambda: cp.take_along_axis(scores, picks, axis=1),
    })
    for got, want, what in ((ops["wrap"](table, idx), cp.take(table, idx, axis=0), "gather"),
                            (cugather.take_along_axis(scores, picks, axis=1),
                             cp.take_along_axis(scores, picks, axis=1), "take_along_axis")):
        if not bool((got == want).all()):
            raise AssertionError(f"{what} differs from CuPy's before timing")
    torch = peers.get("torch")
    if torch is not None:
        t_table = torch.from_dlpack(table)
        t_idx = torch.from_dlpack(idx)
        t_scores, t_picks = torch.from_dlpack(scores), torch.from_dlpack(picks)
        contenders["torch.index_select"] = lambda: torch.index_select(t_table, 0, t_idx)
        contenders["torch.gather top-k"] = lambda: torch.gather(t_scores, 1, t_picks)

    def sync():
        cp.cuda.get_current_stream().synchronize()
        if torch is not None:
            torch.cuda.current_stream().synchronize()

    times = interleaved(contenders, sync, batches, calls)
    breakdown = interleaved({
        "cupy.ndarray(out)": lambda: ndarray(out_shape, out_dtype),
        "cupy.cuda.get_current_stream().ptr": lambda: cp.cuda.get_current_stream().ptr,
        "cupy.cuda.runtime.getDevice()": cp.cuda.runtime.getDevice,
        "cuLaunchKernel": bare,
        "call key + memo compare": _key_probe(ops["wrap"], table, idx),
    }, sync, batches, calls)
    refs = ["torch.index_select", "bare cuLaunchKernel + cupy.ndarray"]
    return {"tiny": {"table": list(shape), "dtype": dtype, "indices": n},
            "topk": {"rows": rows, "width": width, "picks": k},
            "batches": batches, "calls_per_batch": calls,
            "calls": _summary(times, refs), "breakdown": _summary(breakdown, [])}


def _key_probe(op, data, indices) -> Callable[[], object]:
    """The cached path's key construction and memo comparison alone."""
    from ..runtime.launch import CUDA

    runtime = op._runtime

    def probe():
        mem = data.data
        ptr = mem.ptr
        return runtime.cached((CUDA, mem.device_id, data.shape, data.strides, data.dtype,
                               ptr & 255, indices.shape, indices.strides, indices.dtype, 0))
    return probe


def format_host(result: dict) -> str:
    """The report as a text table."""
    lines = [f"host time per call: median of {result['batches']} batches of "
             f"{result['calls_per_batch']} calls, contenders interleaved",
             f"{'contender':40s} {'us':>7s} {'spread':>7s} {'vs torch':>9s} {'vs bare+alloc':>13s}"]
    for name, row in result["calls"].items():
        t = row.get("vs torch.index_select")
        b = row.get("vs bare cuLaunchKernel + cupy.ndarray")
        lines.append(f"{name:40s} {row['us']:7.2f} {row['spread']:7.1%} "
                     f"{'-' if t is None else f'{t:.2f}x':>9s} {'-' if b is None else f'{b:.2f}x':>13s}")
    lines.append("breakdown of a cached call:")
    for name, row in result["breakdown"].items():
        lines.append(f"  {name:38s} {row['us']:7.2f} {row['spread']:7.1%}")
    return "\n".join(lines)
