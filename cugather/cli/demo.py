"""``cugather demo`` (the default command): one gather, result first.

On a GPU: the check against ``cupy.take`` and the timing, then the plan and
the compiled kernels (registers, spills, compile time).  Without a GPU: the
plan and the kernels compiled by NVRTC for the default target, then what is
missing to run them.  The CUDA source only with ``--source``.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, List, Tuple

import numpy

from .. import jit
from ..env import Environment, probe
from .format import error
from .inspect import GATHER_MODES, kernel_table

__all__ = ["add_arguments", "run"]

NO_GPU_ARCH = "sm_90"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``demo``."""
    p.add_argument("--rows", type=int, default=1_000_000, help="table rows (default 1e6)")
    p.add_argument("--cols", type=int, default=128, help="table columns (default 128)")
    p.add_argument("--dtype", default="float16", help="table dtype (default float16)")
    p.add_argument("--indices", type=int, default=2_000_000,
                   help="number of indices (default 2e6)")
    p.add_argument("--index-dtype", default="int64", choices=["int32", "int64"],
                   help="index dtype (default int64)")
    p.add_argument("--mode", default="raise", choices=GATHER_MODES,
                   help="out-of-range policy (default raise)")
    p.add_argument("--source", action="store_true",
                   help="also print the CUDA source of the gather kernel")


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit status 0, 1 (mismatch, or nothing could be compiled), 2 (bad options)."""
    from ..ops.gather import GatherOp

    try:
        dtype = numpy.dtype(args.dtype)
        op = GatherOp(axis=0, mode=args.mode)
        plan = op.plan(((args.rows, args.cols), dtype), ((args.indices,), args.index_dtype))
    except (TypeError, ValueError, IndexError) as e:
        return error(str(e))
    print(f"cugather demo: take(table[{args.rows} x {args.cols}] {dtype}, "
          f"{args.indices} {args.index_dtype} indices, axis=0, mode={args.mode!r})")
    env = probe()
    if env.gpu_problem is None and env.nvrtc_problem is None:
        code = _time_on_gpu(op, args, dtype)
        _print_plan(plan)
        infos = [i for i in jit.kernels() if i.key in (plan.key, plan.check_key)]
        _print_kernels(infos, f"loaded on GPU {infos[0].device}" if infos else "")
    else:
        _print_plan(plan)
        code, infos = _compile_only(plan, env)
    if args.source and infos:
        print(f"\nsource of {infos[0].entry}\n")
        print(infos[0].source.rstrip("\n"))
    return code


def _print_plan(plan: Any) -> None:
    print("\nplan")
    print("\n".join("  " + line for line in plan.describe().splitlines()))


def _print_kernels(infos: List[jit.KernelInfo], where: str) -> None:
    if not infos:
        return
    print(f"\nkernels ({infos[0].arch}, {where})" if where else f"\nkernels ({infos[0].arch})")
    print("\n".join("  " + line for line in kernel_table(infos).splitlines()))


def _compile_only(plan: Any, env: Environment) -> Tuple[int, List[jit.KernelInfo]]:
    if env.nvrtc_problem is not None:
        print(f"\nNothing was compiled or run. {env.nvrtc_problem}")
        return 1, []
    infos = [jit.compile_key(k, arch=NO_GPU_ARCH) for k in (plan.key, plan.check_key) if k]
    _print_kernels(infos, "compiled by NVRTC; no GPU needed")
    print(f"\nNot run: {env.gpu_problem}")
    return 0, infos


def _median_ms(fn: Callable[[], Any], repeat: int = 50) -> float:
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


def _time_on_gpu(op: Any, args: argparse.Namespace, dtype: numpy.dtype) -> int:
    import cupy

    rng = cupy.random.default_rng(0)
    table = rng.standard_normal((args.rows, args.cols), dtype=numpy.float32).astype(dtype)
    idx = rng.integers(-args.rows, args.rows, size=args.indices, dtype=args.index_dtype)
    got = op(table, idx)
    ref = cupy.take(table, idx, axis=0)
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    if not bool((got == ref).all()):
        print(f"\n{name}: MISMATCH against cupy.take")
        return 1
    out = cupy.empty_like(got)
    t_cg = _median_ms(lambda: op(table, idx, out=out))
    t_cp = _median_ms(lambda: cupy.take(table, idx, axis=0, out=out))
    t_copy = _median_ms(lambda: cupy.copyto(out, got))
    moved = 2 * got.nbytes + idx.nbytes
    print(f"\n{name}: result matches cupy.take; {moved / 1e6:.0f} MB moved per call")
    for label, t in (("copy ceiling", t_copy), ("cugather", t_cg), ("cupy.take", t_cp)):
        print(f"  {label:13s} {t * 1e3:9.1f} us  {moved / t / 1e9:6.2f} TB/s")
    print(f"  cugather is {t_cp / t_cg:.2f}x cupy.take, at {t_copy / t_cg:.0%} of the copy ceiling")
    return 0
