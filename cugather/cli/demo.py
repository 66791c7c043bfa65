"""The demo: one gather, checked and timed against cupy.take on the GPU.

Without a GPU it says so and shows what it would run: the plan and the
rendered kernel (with NVRTC's register report when NVRTC is installed).
"""

from __future__ import annotations

import numpy

from ..env import no_gpu_reason, nvrtc_available


def add_arguments(p) -> None:
    p.add_argument("--rows", type=int, default=1_000_000, help="table rows (default 1e6)")
    p.add_argument("--cols", type=int, default=128, help="table columns (default 128)")
    p.add_argument("--dtype", default="float16", help="table dtype (default float16)")
    p.add_argument("--indices", type=int, default=2_000_000, help="number of indices")
    p.add_argument("--index-dtype", default="int64", choices=["int32", "int64"])
    p.add_argument("--mode", default="raise", choices=["raise", "wrap", "clip", "fill"])


def _median_ms(fn, repeat=50):
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(numpy.median(times))


def run(args) -> int:
    from ..ops.gather import GatherOp

    dtype = numpy.dtype(args.dtype)
    op = GatherOp(axis=0, mode=args.mode)
    plan = op.plan(((args.rows, args.cols), dtype), ((args.indices,), args.index_dtype))
    print(f"cugather demo: take(table[{args.rows} x {args.cols}] {dtype}, "
          f"{args.indices} {args.index_dtype} indices, axis=0, mode={args.mode!r})\n")
    print(plan.describe())
    reason = no_gpu_reason()
    if reason is not None:
        print(f"\nNo GPU here: {reason}.  Nothing was launched; this is the kernel a GPU "
              f"would compile and run:\n")
        return _show_kernel(plan)
    return _time_on_gpu(op, args, dtype)


def _show_kernel(plan) -> int:
    from ..compile.render import render

    print(render(plan.key).text)
    why = nvrtc_available()
    if why is not None:
        print(f"({why}; install cugather[cuda12] to compile it here)")
        return 0
    from ..compile.compiler import compile_key

    ck = compile_key(plan.key, "sm_90", use_disk=False)
    print(f"NVRTC sm_90: {ck.registers} registers, {ck.spill_stores} B spill stores, "
          f"{ck.spill_loads} B spill loads, compiled in {ck.compile_seconds * 1e3:.0f} ms")
    return 0


def _time_on_gpu(op, args, dtype) -> int:
    import cupy

    rng = cupy.random.default_rng(0)
    table = rng.standard_normal((args.rows, args.cols), dtype=numpy.float32).astype(dtype)
    idx = rng.integers(-args.rows, args.rows, size=args.indices, dtype=args.index_dtype)
    got = op(table, idx)
    ref = cupy.take(table, idx, axis=0)
    if not bool((got == ref).all()):
        print("MISMATCH against cupy.take")
        return 1
    out = cupy.empty_like(got)
    t_cg = _median_ms(lambda: op(table, idx, out=out))
    t_cp = _median_ms(lambda: cupy.take(table, idx, axis=0, out=out))
    t_copy = _median_ms(lambda: cupy.copyto(out, got))
    moved = 2 * got.nbytes + idx.nbytes
    print(f"\n{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}: result matches "
          f"cupy.take; {moved / 1e6:.0f} MB moved per call")
    for name, ms in (("copy ceiling", t_copy), ("cugather", t_cg), ("cupy.take", t_cp)):
        print(f"  {name:13s} {ms * 1e3:9.1f} us  {moved / ms / 1e9:6.2f} TB/s")
    print(f"  cugather is {t_cp / t_cg:.2f}x cupy.take, at {t_copy / t_cg:.0%} of the copy ceiling")
    return 0
