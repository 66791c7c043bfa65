"""NVRTC tier: every kernel key the library can produce, rendered and compiled for
sm_75, sm_80 and sm_90 without a GPU: no error, no warning, no register spills.

The keys come from ``cugather.plan.keys.all_kernel_keys()``, so a new variant is
covered as soon as the library can produce it.  Compilation runs once per
architecture on a thread pool (NVRTC releases the GIL); each key and
architecture is then its own test, reporting the key and the NVRTC log.
"""

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from cugather.compile.render import render
from cugather.compile.compiler import CompileError, compile_source
from cugather.plan.keys import all_kernel_keys

ARCHS = ("sm_75", "sm_80", "sm_90")
KEYS = list(all_kernel_keys())

#: (entry, arch) -> why it is expected to fail.  strict: an entry that starts
#: passing fails the run, so the list cannot go stale.
KNOWN_FAILURES = {}

_lock = threading.Lock()


def _compile(key, arch):
    try:
        return compile_source(render(key), arch)
    except CompileError as e:
        return e
    except Exception as e:  # a rendering bug: report it against the key
        return e


@functools.lru_cache(maxsize=None)
def _results(arch: str) -> dict:
    """key -> CompiledKernel or exception, for every key, compiled in parallel."""
    workers = max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(KEYS, pool.map(lambda k: _compile(k, arch), KEYS)))


def results(arch: str) -> dict:
    with _lock:  # one pool per architecture, even if tests run in threads
        return _results(arch)


def _params():
    for arch in ARCHS:
        for key in KEYS:
            marks = []
            reason = KNOWN_FAILURES.get((key.entry, arch))
            if reason:
                marks.append(pytest.mark.xfail(reason=reason, strict=True))
            yield pytest.param(arch, key, id=f"{arch}-{key.entry}", marks=marks)


@pytest.mark.nvrtc
@pytest.mark.parametrize("arch,key", list(_params()))
def test_kernel_compiles_clean(arch, key):
    ck = results(arch)[key]
    where = f"{key.entry} (kind={key.kind} unit={key.unit} index={key.index_dtype} " \
            f"math={key.math} mode={key.mode}) for {arch}"
    if isinstance(ck, CompileError):
        pytest.fail(f"NVRTC rejected {where}:\n{ck.log}", pytrace=False)
    if isinstance(ck, Exception):
        pytest.fail(f"rendering or compiling {where} raised {type(ck).__name__}: {ck}",
                    pytrace=False)
    problems = []
    if "warning" in ck.log.lower():
        problems.append("NVRTC warned")
    if ck.spill_stores is None or ck.spill_loads is None:
        problems.append("no ptxas spill report (was --ptxas-options=-v passed?)")
    elif ck.spill_stores or ck.spill_loads:
        problems.append(f"{ck.spill_stores} bytes spill stores, {ck.spill_loads} bytes spill "
                        f"loads ({ck.registers} registers)")
    if ck.binary_kind != "cubin" or not ck.binary:
        problems.append("no cubin")
    if problems:
        pytest.fail(f"{where}: {'; '.join(problems)}\n{ck.log}", pytrace=False)
