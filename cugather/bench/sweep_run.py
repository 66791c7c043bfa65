"""Running the sweep on a GPU: data, bit-exact checks, adaptive timings, progress.

Per shape (from :mod:`cugather.bench.sweep`): the table is filled on the GPU
(a counter hash; floats get a sign, a random mantissa and an exponent that
keeps them normal, so no NaN or denormal can be altered by a peer; bools
are 0 or 1), indices are uniform in ``[-n, n)``.  cugather runs in wrap mode
and its output is the reference every other result is compared with, byte
for byte.  Timings use the fixed suite's helpers (held-stream CUDA events for
CuPy and torch, back-to-back batches for JAX), with an adaptive count: two
warm-up calls, then samples until about :data:`TARGET_MS` of GPU time is
timed (at least :data:`MIN_SAMPLES`, at most :data:`MAX_SAMPLES`).  JAX's
compilation of each new shape is timed on its own and excluded.
"""

from __future__ import annotations

import gc
import json
import math
import os
import sys
import time

import numpy

from .measure import _same, _stats
from .peers import Samples, time_cupy, time_jax, time_torch
from .sweep import SweepShape, draw_shapes
from .sweep_report import score, summarize, sweep_chart, sweep_text, why

__all__ = ["run_sweep_command", "run_sweep", "run_shape", "make_table", "make_indices",
           "peer_notes",
           "adaptive",
           "TARGET_MS", "MIN_SAMPLES", "MAX_SAMPLES", "WARMUP"]

TARGET_MS = 40.0
MIN_SAMPLES, MAX_SAMPLES, WARMUP = 5, 30, 2
JAX_BATCHES = 5

# splitmix64 of (seed + i * golden ratio): cheap, deterministic, one pass.
_FILL_BODY = r"""
unsigned long long z = seed + (unsigned long long)i * 0x9E3779B97F4A7C15ull;
z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
out = (unsigned int)(z ^ (z >> 31));
"""
_fill_kernel: dict = {}


def _fill(cp):
    if "k" not in _fill_kernel:
        _fill_kernel["k"] = cp.ElementwiseKernel("uint64 seed", "uint32 out", _FILL_BODY,
                                                 "cg_sweep_fill")
    return _fill_kernel["k"]


def make_table(cp, s: SweepShape, seed: int):
    """The data array of ``s``, filled on the GPU from ``seed``."""
    nbytes = s.table_bytes
    words = cp.empty(2 * -(-nbytes // 8), dtype=cp.uint32)  # whole 8-byte words
    _fill(cp)(numpy.uint64(seed), words)
    raw = words.view(cp.uint8)[:nbytes]
    dt = numpy.dtype(s.dtype)
    if dt.kind == "b":
        cp.bitwise_and(raw, numpy.uint8(1), out=raw)
    elif dt.kind in "fc":
        # Clear the exponent's top bit and set the next: the exponent field
        # is then in [bias/2, bias], a normal number of magnitude under 2.
        bits = 8 * (dt.itemsize if dt.kind == "f" else dt.itemsize // 2)
        u = raw.view(f"uint{bits}")
        ut = u.dtype.type
        cp.bitwise_and(u, ut(((1 << bits) - 1) ^ (1 << (bits - 2))), out=u)
        cp.bitwise_or(u, ut(1 << (bits - 3)), out=u)
    return raw.view(dt).reshape(s.shape)


def make_indices(cp, s: SweepShape, seed: int):
    """The indices of ``s`` drawn from ``seed`` over wrap mode's range, -n to n - 1
    for an axis of n rows."""
    n = s.axis_len
    idx = cp.random.default_rng(seed).integers(-n, n, size=s.n_indices, dtype=numpy.int64)
    return idx.astype(s.index_dtype).reshape(s.indices)


def adaptive(timer, fn, target_ms: float = TARGET_MS, min_samples: int = MIN_SAMPLES,
             max_samples: int = MAX_SAMPLES, warmup: int = WARMUP) -> Samples:
    """Samples of ``timer(fn, repeat, warmup)`` until about ``target_ms`` are timed
    (at least ``min_samples``, at most ``max_samples``)."""
    first = timer(fn, min_samples, warmup)
    total = sum(first)
    more = 0
    if total < target_ms:
        per = max(float(numpy.median(first)), 1e-4)
        more = min(max_samples - len(first), math.ceil((target_ms - total) / per))
    if more <= 0:
        return first
    rest = timer(fn, more, 0)
    out = Samples(list(first) + list(rest))
    out.unheld = first.unheld + rest.unheld
    return out


def _record(name, times, moved, res, how):
    st = _stats(times, moved)
    st["samples"] = len(times)
    st["how"] = how
    res["impl"][name] = st


def _error(res, name, e) -> None:
    first = (str(e).strip().splitlines() or [""])[0]
    res["errors"][name] = f"{type(e).__name__}: {first[:300]}"


def _peer_views(cp, data, idx_pos, from_dlpack):
    """``data`` and ``idx_pos`` in a peer; bools as uint8 where DLPack refuses them."""
    cp.cuda.Device().synchronize()
    try:
        return from_dlpack(data), from_dlpack(idx_pos), ""
    except Exception:
        if data.dtype != numpy.bool_:
            raise
        return from_dlpack(data.view(numpy.uint8)), from_dlpack(idx_pos), " (bool as uint8)"


def _torch(cp, torch, s, data, idx_pos, ref, res):
    td, ti, note = _peer_views(cp, data, idx_pos, torch.from_dlpack)
    flat = ti.reshape(-1)
    fn = lambda: torch.index_select(td, s.axis, flat).reshape(s.out_shape)  # noqa: E731
    got = cp.from_dlpack(fn().contiguous())
    res["checked"]["torch.index_select"] = _same(got.view(ref.dtype), ref)
    _record("torch.index_select", adaptive(lambda f, r, w: time_torch(torch, f, r, w), fn),
            s.moved_bytes, res, "torch.cuda events, held stream; non-negative indices" + note)


_jax_takes: dict = {}


def _jax_take(jax, axis: int):
    """The jitted ``jnp.take`` along ``axis``; kept per axis, JAX retraces per shape."""
    if axis not in _jax_takes:
        import jax.numpy as jnp

        _jax_takes[axis] = jax.jit(lambda d, i: jnp.take(d, i, axis=axis, mode="clip"))
    return _jax_takes[axis]


def _jax(cp, jax, s, data, idx_pos, ref, res):
    jd, ji, note = _peer_views(cp, data, idx_pos, jax.dlpack.from_dlpack)
    take = _jax_take(jax, s.axis)
    t0 = time.perf_counter()
    out = take(jd, ji).block_until_ready()
    res["jax_compile_s"] = time.perf_counter() - t0
    got = cp.from_dlpack(out)
    res["checked"]["jax.numpy.take"] = _same(got.view(ref.dtype), ref)
    del out, got
    fn = lambda: take(jd, ji)  # noqa: E731
    probe = time_jax(fn, 3, WARMUP, batches=1)[0]  # ms per call, dispatch included
    per = max(1, min(MAX_SAMPLES, math.ceil(TARGET_MS / JAX_BATCHES / max(probe, 1e-3))))
    _record("jax.numpy.take", time_jax(fn, per * JAX_BATCHES, 0, batches=JAX_BATCHES),
            s.moved_bytes, res, f"jitted jnp.take(mode='clip'), {JAX_BATCHES} batches of {per} "
            "back-to-back calls closed by block_until_ready; non-negative indices" + note)


def _plan(op, data, idx) -> dict:
    plan = op.plan(data, idx)
    key = plan.key
    return {"entry": getattr(key, "entry", None), "kind": plan.kind,
            "unit": getattr(key, "unit", None), "reason": plan.reason,
            "chosen_by": getattr(plan, "chosen_by", ""),
            "grid": list(plan.grid), "block": list(plan.block)}


def run_shape(cp, s: SweepShape, seed: int, peers: dict) -> dict:
    """Check and time one shape: cugather (wrap), the copy ceiling and the peers.

    Returns the shape's record: geometry, cugather's plan, per implementation
    the median ms and effective GB/s, the checks and any errors, then the
    ratios of :func:`cugather.bench.sweep_report.score`.
    """
    import cugather

    res = dict(s.as_dict(), impl={}, checked={}, errors={})
    try:
        data = make_table(cp, s, seed)
        n = s.axis_len
        idx = make_indices(cp, s, seed)
        idx_pos = cp.where(idx < 0, idx + n, idx).astype(idx.dtype)
    except Exception as e:  # out of memory, most likely
        _error(res, "setup", e)
        return score(res)
    op = cugather.GatherOp(s.axis, mode="wrap")
    try:
        res["plan"] = _plan(op, data, idx)
        ref = op(data, idx)
    except Exception as e:
        _error(res, "cugather", e)
        return score(res)
    dst = cp.empty_like(ref)
    rt, moved = cp.cuda.runtime, s.moved_bytes
    timer = lambda f, r, w: time_cupy(cp, f, r, w)  # noqa: E731

    def copy():
        rt.memcpyAsync(dst.data.ptr, ref.data.ptr, ref.nbytes, rt.memcpyDeviceToDevice,
                       cp.cuda.get_current_stream().ptr)

    _record("copy", adaptive(timer, copy), 2 * s.out_bytes, res,
            "cudaMemcpyAsync of the output bytes, CUDA events, held stream")
    del dst
    _record("cugather", adaptive(timer, lambda: op(data, idx)), moved, res,
            "GatherOp(mode='wrap'), CUDA events on CuPy's stream, held stream")
    try:
        res["checked"]["cupy.take"] = _same(cp.take(data, idx, axis=s.axis), ref)
        _record("cupy.take", adaptive(timer, lambda: cp.take(data, idx, axis=s.axis)), moved,
                res, "CUDA events on CuPy's stream, held stream")
    except Exception as e:  # a peer's failure is a result, not the end of the sweep
        _error(res, "cupy.take", e)
    for name, fn in (("torch", _torch), ("jax", _jax)):
        if name in peers:
            try:
                fn(cp, peers[name], s, data, idx_pos, ref, res)
            except Exception as e:
                _error(res, dict(torch="torch.index_select", jax="jax.numpy.take")[name], e)
    return score(res)


def _free(cp, peers, big: bool) -> None:
    if big:  # peers' DLPack views keep the table alive until collected
        gc.collect()
    cp.get_default_memory_pool().free_all_blocks()
    if "torch" in peers:
        peers["torch"].cuda.empty_cache()


def _progress_line(i, n, s, rec, t0) -> str:
    elapsed = time.perf_counter() - t0
    eta = elapsed / (i + 1) * (n - i - 1)
    if rec.get("ratio") is not None:
        what = f"{rec['plan']['kind']:7s} {rec['ratio']:5.2f}x {rec['best_peer']}"
    else:
        what = "FAILED " + "; ".join(f"{k}: {v}" for k, v in rec["errors"].items())[:120]
    return f"[{i + 1}/{n}] {s.label()}: {what} | {elapsed:.0f}s elapsed, ETA {eta:.0f}s"


def run_sweep(cp, n: int, seed: int, peers: dict, device: dict, checkpoint=None) -> dict:
    """Run ``n`` sweep shapes drawn from ``seed``; returns {"records", "elapsed_s", ...}.

    ``checkpoint(partial)``, when given, is called every 20 shapes with the
    records so far, so a run cut short leaves its results behind.
    """
    shapes = draw_shapes(n, seed)
    records, t0 = [], time.perf_counter()
    tty = sys.stderr.isatty()
    bar = None
    if tty:
        try:
            from tqdm import tqdm

            bar = tqdm(total=n, desc="sweep", file=sys.stderr)
        except ImportError:
            pass
    for i, s in enumerate(shapes):
        shape_seed = (seed * 1_000_003 + i) & ((1 << 63) - 1)
        ts = time.perf_counter()
        try:
            rec = run_shape(cp, s, shape_seed, peers)
        except KeyboardInterrupt:
            print(f"interrupted after {i} shapes", file=sys.stderr)
            break
        except Exception as e:  # timing cugather or the copy failed: record it, go on
            rec = dict(s.as_dict(), impl={}, checked={}, errors={}, ratio=None)
            _error(rec, "cugather", e)
        rec["i"], rec["seconds"] = i, time.perf_counter() - ts
        rec["why"] = why(rec, device)
        records.append(rec)
        _free(cp, peers, s.footprint_bytes > (1 << 30))
        line = _progress_line(i, n, s, rec, t0)
        if bar is not None:
            bar.set_postfix_str(line.split(": ", 1)[1][:60])
            bar.update()
        else:
            print(line, file=sys.stderr, flush=True)
        if checkpoint is not None and (i + 1) % 20 == 0 and i + 1 < n:
            checkpoint({"records": records, "elapsed_s": time.perf_counter() - t0,
                        "complete": False})
    if bar is not None:
        bar.close()
    return {"records": records, "elapsed_s": time.perf_counter() - t0,
            "complete": len(records) == n,
            "jax_compile_s": sum(r.get("jax_compile_s", 0.0) for r in records)}


def peer_notes(peers: dict, enabled: bool) -> list:
    """Sentences for the peers that will not run."""
    if not enabled:
        return ["--no-peers: torch.index_select and jax.numpy.take skipped"]
    return [f"{lib} with a CUDA GPU backend not found: {peer} skipped"
            for lib, peer in (("torch", "torch.index_select"), ("jax", "jax.numpy.take"))
            if lib not in peers]


def _json_default(obj):
    return obj.item() if hasattr(obj, "item") else str(obj)


def run_sweep_command(cp, args, peers: dict, versions: dict, gpu: str) -> dict:
    """``bench --sweep N``: run the sweep, write ``sweep.json`` (rewritten every
    20 shapes while running), ``sweep.txt`` and ``sweep.png`` into ``args.out``,
    print the report; returns the results."""
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    device = {"sm_count": int(props["multiProcessorCount"]), "l2_bytes": int(props["l2CacheSize"])}
    notes = peer_notes(peers, not args.no_peers)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    head = {"gpu": gpu, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": "python -m cugather bench " + " ".join(sys.argv[2:]),
            "versions": versions, "seed": args.seed, "n": args.sweep, "device": device,
            "notes": notes, "distribution": "see the docstring of cugather.bench.sweep",
            "timing": {"target_ms": TARGET_MS, "min_samples": MIN_SAMPLES,
                       "max_samples": MAX_SAMPLES, "warmup": WARMUP, "jax_batches": JAX_BATCHES,
                       "moved_bytes": "2 x output bytes + index bytes",
                       "ratio": "cugather GB/s / best peer GB/s"}}
    path = os.path.join(args.out, "sweep.json")

    def write(part: dict) -> dict:
        results = dict(head, **part)
        results["summary"] = summarize(results["records"])
        with open(path + ".tmp", "w") as f:
            json.dump(results, f, indent=1, default=_json_default)
        os.replace(path + ".tmp", path)
        return results

    results = write(run_sweep(cp, args.sweep, args.seed, peers, device, checkpoint=write))
    text = sweep_text(results)
    with open(os.path.join(args.out, "sweep.txt"), "w") as f:
        f.write(text + "\n")
    print(text)
    png = sweep_chart(results, os.path.join(args.out, "sweep.png"))
    print(f"\nsweep: {path}" + (f", chart: {png}" if png else ", no chart (matplotlib missing)"))
    return results
