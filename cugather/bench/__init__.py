"""``python -m cugather bench``: cugather against the copy ceiling and the peers.

Per case: the bytes a gather must move (2 x output + indices), a device copy
of the output bytes in the same run (the ceiling), cugather, cupy.take,
torch.index_select, jax.numpy.take and an onnxruntime-style kernel, each
checked against cugather's result, then timed (median of many calls after
warm-up).  Results go to a JSON file and a PNG chart in ``--out``.

``--quantized`` runs only the GatherBlockQuantized cases
(:mod:`cugather.bench.quantized`: quantized.json), which the full run
includes too.  ``--host`` times small calls on the host instead (:mod:`cugather.bench.host`).
``--sweep N [--seed S]`` runs N random geometries instead (see
:mod:`cugather.bench.sweep` for the distribution): sweep.json, sweep.png and
a summary; add ``--case`` or ``--quick`` to run the fixed cases as well.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time

import numpy

from .cases import CASES, QUICK, by_name
from .measure import divmod_comparison, host_overhead, run_case

__all__ = ["add_arguments", "run"]


def add_arguments(p) -> None:
    p.add_argument("--quick", action="store_true", help=f"run the subset {', '.join(QUICK)}")
    p.add_argument("--case", action="append", default=[], metavar="NAME",
                   help="run only this case (repeatable); names: "
                        + ", ".join(c.name for c in CASES))
    p.add_argument("--out", default="bench-out",
                   help="folder for results.json and chart.png (--sweep: sweep.json, sweep.txt, "
                        "sweep.png)")
    p.add_argument("--repeat", type=int, default=None, help="timed calls per measurement")
    p.add_argument("--no-peers", action="store_true", help="skip torch and JAX")
    p.add_argument("--no-family", action="store_true",
                   help="skip the gather_elements / gather_nd and gather_block_quantized cases")
    p.add_argument("--quantized", action="store_true",
                   help="run only the gather_block_quantized cases (quantized.json); with "
                        "--quick their subset")
    p.add_argument("--variants", action="store_true",
                   help="with --quantized: time every candidate plan of the 65536-index cases "
                        "side by side (quantized-variants.json)")
    p.add_argument("--sweep", type=_positive, default=None, metavar="N",
                   help="time N random gather geometries (sweep.json, sweep.png) instead of "
                        "the fixed cases; add --case or --quick to run those too")
    p.add_argument("--seed", type=int, default=0, help="seed of the sweep's shapes (default 0)")
    p.add_argument("--host", action="store_true",
                   help="host time per small call of every op and mode against the peers, "
                        "interleaved (host.json); see cugather.bench.host")
    p.add_argument("--distributed", action="store_true",
                   help="the sharded gather over every GPU of a job (run under "
                        "python -m cugather.distributed.run); see cugather.bench.distributed")
    from .distributed import add_arguments as _distributed_arguments

    _distributed_arguments(p)


def _positive(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"N must be a positive integer, got {text!r}")
    return n


def _progress(items, desc):
    try:
        from tqdm import tqdm

        return tqdm(items, desc=desc, file=sys.stderr, leave=False)
    except ImportError:  # progress as plain lines
        def gen():
            for i, item in enumerate(items):
                print(f"[{desc} {i + 1}/{len(items)}] {getattr(item, 'name', item)}",
                      file=sys.stderr, flush=True)
                yield item
        return gen()


def _versions(cp) -> dict:
    v = {"python": platform.python_version(), "numpy": numpy.__version__, "cupy": cp.__version__,
         "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
         "driver": cp.cuda.runtime.driverGetVersion()}
    from .. import __version__
    from ..compile.compiler import nvrtc_version

    v["cugather"] = __version__
    v["nvrtc"] = ".".join(map(str, nvrtc_version()))
    for name in ("torch", "jax"):
        try:
            v[name] = __import__(name).__version__
        except ImportError:
            pass
    return v


def run(args) -> int:
    from ..env import no_gpu_reason

    reason = no_gpu_reason()
    if reason is not None:
        print(f"cugather bench needs a CUDA GPU: {reason}", file=sys.stderr)
        return 2
    if args.distributed:
        from .distributed import run_distributed

        return run_distributed(args)
    import cupy as cp

    peers = _load_peers(not args.no_peers)
    os.makedirs(args.out, exist_ok=True)
    if args.host:
        from .host import format_host, host_benchmark

        result = host_benchmark(cp, peers)
        result.update(gpu=_gpu_name(cp), date=time.strftime("%Y-%m-%d %H:%M:%S"),
                      command="python -m cugather bench " + " ".join(sys.argv[2:]),
                      versions=_versions(cp))
        with open(os.path.join(args.out, "host.json"), "w") as f:
            json.dump(result, f, indent=1)
        print(format_host(result))
        return 0
    if args.quantized and args.variants:
        from .quantized import variants_command

        return variants_command(cp, args)
    if args.quantized:
        _quantized(cp, args, peers, args.repeat or (20 if args.quick else 50))
        return 0
    if args.sweep is None or args.case or args.quick:
        _run_cases(cp, args, peers)
    if args.sweep is not None:
        from .sweep_run import run_sweep_command

        run_sweep_command(cp, args, peers, _versions(cp), _gpu_name(cp))
    return 0


def _gpu_name(cp) -> str:
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else name


def _run_cases(cp, args, peers) -> None:
    names = args.case or (QUICK if args.quick else [c.name for c in CASES])
    cases = [by_name(n) for n in names]
    repeat = args.repeat or (20 if args.quick else 50)
    results = {"gpu": _gpu_name(cp), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
               "command": "python -m cugather bench " + " ".join(sys.argv[2:]),
               "versions": _versions(cp), "repeat": repeat, "cases": []}
    for case in _progress(cases, "cases"):
        results["cases"].append(run_case(cp, case, peers, repeat))
    if "tiny" in names:
        results["host_overhead_us"] = host_overhead(cp, by_name("tiny"), peers)
    if not args.case or any(n in names for n in ("emb512_f32_i64", "rows64B_f32")):
        results["fallback_divmod"] = divmod_comparison(cp, repeat)
    if not args.no_family and not args.case:
        results["family"] = _family(cp, args.quick, repeat, peers)
        results["quantized"] = _quantized(cp, args, peers, repeat)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    from .report import chart, table

    print(table(results))
    png = chart(results, os.path.join(args.out, "chart.png"))
    print(f"\nresults: {os.path.join(args.out, 'results.json')}" + (f", chart: {png}" if png else ""))


def _load_peers(enabled: bool) -> dict:
    peers = {}
    if not enabled:
        return peers
    try:
        import torch

        if torch.cuda.is_available():
            peers["torch"] = torch
    except ImportError:
        pass
    try:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax

        jax.config.update("jax_enable_x64", True)  # keep float64/complex128 as they are
        if any(d.platform == "gpu" for d in jax.devices()):
            peers["jax"] = jax
    except Exception:  # ImportError, or no GPU backend
        pass
    return peers


def _quantized(cp, args, peers, repeat) -> dict:
    """The gather_block_quantized cases (cugather.bench.quantized): quantized.json and a table."""
    from .quantized import run_quantized, table

    res = run_quantized(cp, args.quick, repeat, peers)
    res.update(gpu=_gpu_name(cp), date=time.strftime("%Y-%m-%d %H:%M:%S"),
               command="python -m cugather bench " + " ".join(sys.argv[2:]),
               versions=_versions(cp), repeat=repeat)
    path = os.path.join(args.out, "quantized.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(table(res))
    print(f"\nresults: {path}")
    return res


def _family(cp, quick, repeat, peers):
    try:
        from . import elements_nd as bench_elements_nd
    except ImportError:
        return []
    from .measure import run_family_case

    return [run_family_case(cp, c, repeat) for c in _progress(bench_elements_nd.cases(quick), "family")]
