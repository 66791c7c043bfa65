"""Compile every kernel key into cugather's disk cache, one NVRTC process per core.

Later processes (tests, the sanitizer) then load binaries from disk instead of
compiling each kernel on first use.  The target architectures are those of
the visible GPUs (``--arch`` overrides, so this also runs without a GPU)::

    python tests/tools/warm_cache.py [--jobs N] [--arch sm_90 ...]

Prints how many kernels were compiled and how many were already cached; exits
nonzero if any kernel failed to compile.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # this checkout's cugather


def _compile(args):
    key, arch = args
    from cugather.compile import compiler as _compiler

    before = _compiler.stats()["compiles"]
    ck = _compiler.compile_key(key, arch)
    return key.entry, arch, _compiler.stats()["compiles"] - before, ck.spill_stores or 0


def device_archs() -> list:
    from cugather.compile.compiler import arch_for_device
    from cugather.env import gpu_count

    return sorted({arch_for_device(d) for d in range(gpu_count())})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--arch", action="append", help="target (default: every visible GPU's)")
    args = p.parse_args(argv)

    from cugather.plan.keys import all_kernel_keys

    archs = args.arch or device_archs()
    if not archs:
        print("warm_cache: no GPU found and no --arch given; nothing to do")
        return 0
    work = [(key, arch) for arch in archs for key in all_kernel_keys()]
    start = time.perf_counter()
    compiled = cached = 0
    failed = []
    # spawn: the workers need NVRTC only, never the CUDA context this process opened
    with ProcessPoolExecutor(max_workers=max(1, args.jobs),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_compile, w): w for w in work}
        for fut in as_completed(futures):
            try:
                _, _, n, _ = fut.result()
            except Exception as e:  # report every failure, keep going
                key, arch = futures[fut]
                failed.append(f"{key.entry} for {arch}: {type(e).__name__}: {str(e)[:300]}")
                continue
            compiled += n
            cached += n == 0
    seconds = time.perf_counter() - start
    from cugather.compile.compiler import cache_dir

    print(f"warm_cache: {len(work)} kernels for {', '.join(archs)} in {seconds:.1f} s "
          f"({compiled} compiled, {cached} already on disk) -> {cache_dir()}")
    for line in failed:
        print("FAILED", line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
