"""``cugather inspect``: the plan, source and ptxas report of one gather.

No GPU is needed (the default target is the GPU's, or sm_90 without one).
Without CuPy or NVRTC it prints the plan, says what is missing and exits 1.
"""

from __future__ import annotations

import argparse
from typing import Any, Dict, List, Tuple

import numpy

from .. import jit
from ..env import probe
from .format import emit_json, error, json_flag, listing, ms, print_listing, table

__all__ = ["add_arguments", "run", "GATHER_MODES"]

GATHER_MODES = ("raise", "wrap", "clip", "fill")


def _shape(text: str) -> Tuple[int, ...]:
    text = text.strip().strip("()[]")
    try:
        shape = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        shape = None
    if shape is None or any(n < 0 for n in shape):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated sizes >= 0 such as 1000,128, got {text!r}")
    return shape


def _dtype(text: str) -> numpy.dtype:
    try:
        return numpy.dtype(text)
    except TypeError:
        raise argparse.ArgumentTypeError(f"not a NumPy dtype: {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``inspect``."""
    p.add_argument("--dtype", type=_dtype, default=numpy.dtype("float16"),
                   help="table dtype (default float16)")
    p.add_argument("--index-dtype", default="int64", choices=["int32", "int64"],
                   help="index dtype (default int64)")
    p.add_argument("--shape", type=_shape, default=(1000, 128),
                   help="table shape (default 1000,128)")
    p.add_argument("--indices-shape", type=_shape, default=(4096,),
                   help="indices shape (default 4096; '' for a scalar index)")
    p.add_argument("--axis", type=int, default=0, help="gather axis (default 0)")
    p.add_argument("--mode", default="raise", choices=GATHER_MODES,
                   help="out-of-range policy (default raise)")
    p.add_argument("--arch", default=None,
                   help="NVRTC target (default: the GPU's, or sm_90 without one)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ptx", dest="listing", action="store_const", const="ptx",
                   help="print the PTX instead of the source")
    g.add_argument("--sass", dest="listing", action="store_const", const="sass",
                   help="print the SASS instead of the source (needs cuobjdump or nvdisasm)")
    g.add_argument("--no-source", dest="listing", action="store_const", const="none",
                   help="print no listing")
    p.set_defaults(listing="source")
    json_flag(p)


def _default_arch() -> str:
    env = probe()
    if env.gpu_problem is None and env.nvrtc_problem is None:
        from ..compile.compiler import arch_for_device

        return arch_for_device(0)
    return "sm_90"


def _plan_dict(plan: Any) -> Dict[str, Any]:
    def plain(v: Any) -> Any:
        if isinstance(v, tuple) and hasattr(v, "_asdict"):  # a Divisor
            return v._asdict()
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return {"kernel": plan.key.entry if plan.key else None, "variant": plan.kind,
            "reason": plan.reason, "unit": plan.key.unit if plan.key else None,
            "index_dtype": plan.key.index_dtype if plan.key else None,
            "math": plan.key.math if plan.key else None,
            "mode": plan.key.mode if plan.key else None,
            "check_kernel": plan.check_key.entry if plan.check_key else None,
            "out_shape": list(plan.out_shape), "axis": plan.axis, "axis_len": plan.axis_len,
            "n_indices": plan.n_indices, "grid": list(plan.grid), "block": list(plan.block),
            "shared_mem": plan.shared_mem, "copy_data": plan.copy_data,
            "fast_divmod": {k: d._asdict() for k, d in plan.divisors().items()},
            "arguments": {k: plain(v) for k, v in plan.fields.items()}}


def run(args: argparse.Namespace) -> int:
    """Print the report; exit status 0, 1 (cannot compile, no listing) or 2 (bad request)."""
    from ..compile.compiler import CompileError
    from ..ops.gather import GatherOp

    call = (f"gather(data {args.shape} {args.dtype}, indices {args.indices_shape} "
            f"{args.index_dtype}, axis={args.axis}, mode={args.mode!r})")
    try:
        plan = GatherOp(args.axis, mode=args.mode).plan(
            (args.shape, args.dtype), (args.indices_shape, args.index_dtype))
    except (ValueError, TypeError, IndexError) as e:
        return error(str(e))
    arch = args.arch or _default_arch()
    no_gpu = None if args.arch else probe().gpu_problem
    try:
        infos = [jit.compile_key(k, arch=arch) for k in (plan.key, plan.check_key) if k]
    except jit.NvrtcUnavailableError as e:
        return _cannot_compile(args, call, plan, str(e))
    except CompileError as e:
        return error(str(e), 1)
    except ValueError as e:  # an arch NVRTC does not know
        return error(str(e))
    code = _report(args, call, arch, plan, infos)
    if no_gpu and not args.json:
        print(f"\nNo GPU here, so the target is {arch} (--arch picks another). {no_gpu}")
    return code


def _cannot_compile(args: argparse.Namespace, call: str, plan: Any, problem: str) -> int:
    if args.json:
        emit_json({"call": call, "plan": _plan_dict(plan), "kernels": [], "error": problem})
    else:
        print(call + "\n")
        print(plan.describe())
        print(f"\nNothing was compiled. {problem}")
    return 1


def _report(args: argparse.Namespace, call: str, arch: str, plan: Any,
            infos: List[jit.KernelInfo]) -> int:
    main = infos[0] if infos else None
    what = None if args.listing == "none" or main is None else args.listing
    text, err = listing(main, what)
    if args.json:
        doc = {"call": call, "arch": arch, "plan": _plan_dict(plan),
               "kernels": [i.as_dict() for i in infos]}
        if what and main is not None:
            doc["listing"] = {"what": what, "kernel": main.entry, "text": text, "error": err}
        emit_json(doc)
        return 1 if err else 0
    print(call + "\n")
    print(plan.describe())
    if infos:
        print(f"\nptxas report (NVRTC, {arch})\n")
        print(kernel_table(infos))
    return print_listing(text, err, what, main)


def kernel_table(infos: List[jit.KernelInfo]) -> str:
    """Registers, spills, stack, compile time and origin of each kernel, one row each."""
    return table(["KERNEL", "REGS", "SPILL ST", "SPILL LD", "STACK", "COMPILE", "FROM"],
                 [[i.entry, i.registers, i.spill_stores, i.spill_loads, i.stack_frame,
                   ms(i.compile_seconds), "disk cache" if i.from_disk else "NVRTC"]
                  for i in infos], right=(1, 2, 3, 4, 5))
