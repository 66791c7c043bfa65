"""Compilation: rendered source -> NVRTC binary -> loaded kernel handle.

NVRTC runs without a GPU (``cupy_backends.cuda.libs.nvrtc``), so compiling and
inspecting kernels works on any machine with the NVRTC library.  Binaries are
cached in process (per key, arch, options and sources digest) and on disk
under ``$CUPY_CACHE_DIR/cugather`` (CuPy's cache directory, default
``~/.cupy/kernel_cache``; see :mod:`cugather.compile.diskcache`).  A disk
entry's name hashes the rendered source (which inlines every header and
records their digest), the target, the options and the NVRTC version, so an
edited header never finds an old binary; the file carries an HMAC of its
contents keyed by this user's cache key and the source it was built from, and
is read only if it is a private regular file of this user's, so a damaged,
mismatched, planted or hostile entry is reported with a :class:`CacheWarning`
and recompiled.  Loading onto a device goes through CuPy's module API and is
cached per (device, key).
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field, replace

from .render import Source, render, sources_digest
from .diskcache import (ENTRY_SUFFIX, cache_dir, disk_entries, entry_path, load_entry,
                         read_entry, write_entry)
from ..plan.keys import KernelKey
from .nvrtc import (BASE_OPTIONS, CacheEntryError, CacheWarning, CompiledKernel, CompileError,
                     _as_bytes, _nvrtc, _whole_cubin, cubin_registers, elf_extent, nvrtc_options,
                     nvrtc_version, parse_ptxas)

# Re-exported: the compiler is where the rest of cugather looks these up.
__all__ = [
    "CompiledKernel", "LoadedKernel", "CompileError", "CacheWarning", "CacheEntryError",
    "compile_source", "compile_key", "load_kernel", "cache_dir", "stats", "clear",
    "BASE_OPTIONS", "ENTRY_SUFFIX", "disk_entries", "entry_path", "read_entry",
    "loaded_kernels", "compiled_kernels", "nvrtc_options", "nvrtc_version", "parse_ptxas",
    "elf_extent", "cubin_registers", "arch_for_device", "_whole_cubin",
]


@dataclass
class LoadedKernel:
    """A compiled kernel loaded on one device."""

    compiled: CompiledKernel
    device: int
    module: object = field(repr=False)
    function: object = field(repr=False)

    @property
    def handle(self) -> int:
        """The ``CUfunction`` handle a launch passes to ``cuLaunchKernel``."""
        return self.function.ptr

    @property
    def launch_fn(self):
        """``cuLaunchKernel`` as CuPy exposes it (a BoundKernel's launcher calls it)."""
        from cupy.cuda import driver

        return driver.launchKernel


# ---------------------------------------------------------------- state
_lock = threading.Lock()
_compiled: dict = {}       # (key, arch, options, digest) -> CompiledKernel
_loaded: dict = {}         # (device, key, options, digest) -> LoadedKernel
_key_locks: dict = {}      # per compiled ident: one compile at a time
_ZERO = {"hits": 0, "misses": 0, "compiles": 0, "disk_hits": 0, "compile_seconds": 0.0}
_stats = dict(_ZERO)
# ptxas reports by (source, arch, options).  NVRTC 13 answers a repeat of an
# identical program in the same process without running ptxas again, so
# without a report; the first report of that program stands in for it.
_ptxas_reports: dict = {}


def stats() -> dict:
    """Copy of the in-process counters.

    ``hits`` counts lookups (:func:`load_kernel` or :func:`compile_key`)
    answered from memory, ``misses`` those that went to disk or NVRTC,
    ``disk_hits`` the misses the disk cache answered, ``compiles`` and
    ``compile_seconds`` every NVRTC run of this process.
    """
    with _lock:
        return dict(_stats)


def clear() -> None:
    """Forget every in-process binary and loaded kernel (counters too)."""
    with _lock:
        _compiled.clear()
        _loaded.clear()
        _key_locks.clear()
        _stats.update(_ZERO)


def loaded_kernels() -> list:
    """LoadedKernel objects of this process."""
    with _lock:
        return list(_loaded.values())


def compiled_kernels() -> list:
    """CompiledKernel objects of this process."""
    with _lock:
        return list(_compiled.values())


# ---------------------------------------------------------------- NVRTC
def compile_source(source: Source, arch: str = "sm_90", options: tuple = ()) -> CompiledKernel:
    """Run NVRTC on ``source`` for ``arch`` (``sm_XX`` -> cubin, ``compute_XX`` -> PTX).

    The PTX is kept in both cases (:attr:`CompiledKernel.ptx`).
    """
    nvrtc = _nvrtc()
    real = arch.startswith("sm_")
    start = time.perf_counter()
    prog = nvrtc.createProgram(source.text, source.entry + ".cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, nvrtc_options(arch, options))
        except nvrtc.NVRTCError:
            raise CompileError(source.key, arch, nvrtc.getProgramLog(prog), source.text) from None
        log = nvrtc.getProgramLog(prog)
        ptx = _as_bytes(nvrtc.getPTX(prog))
        binary = _whole_cubin(_as_bytes(nvrtc.getCUBIN(prog))) if real else ptx
    finally:
        nvrtc.destroyProgram(prog)
    seconds = time.perf_counter() - start
    with _lock:
        _stats["compiles"] += 1
        _stats["compile_seconds"] += seconds
    log = log.rstrip("\0").strip()
    report = parse_ptxas(log)
    ident = (hashlib.sha256(source.text.encode()).hexdigest(), arch, tuple(options))
    with _lock:
        if report["registers"] is not None:
            _ptxas_reports[ident] = (log, report)
        elif real and ident in _ptxas_reports:
            log, report = _ptxas_reports[ident]
    if real and report["registers"] is None:  # no report at all: the cubin still says
        report["registers"] = cubin_registers(binary, source.entry)
    return CompiledKernel(source, arch, tuple(options), binary, "cubin" if real else "ptx",
                          log, seconds, **report, ptx=ptx)


def compile_key(key: KernelKey, arch: str = "sm_90", options: tuple = (),
                use_disk: bool = True) -> CompiledKernel:
    """Compiled binary of ``key``: from memory, from disk, or from NVRTC.

    Concurrent callers asking for the same kernel wait for one compilation.
    """
    options = tuple(options)
    ident = (key, arch, options, sources_digest())
    with _lock:
        ck = _compiled.get(ident)
        if ck is not None:
            _stats["hits"] += 1
            return ck
        key_lock = _key_locks.setdefault(ident, threading.Lock())
    with key_lock:
        with _lock:
            ck = _compiled.get(ident)
            _stats["hits" if ck is not None else "misses"] += 1
        if ck is not None:
            return ck
        source = render(key)
        path = entry_path(source, arch, options) if use_disk else None
        ck = load_entry(path, source, arch, options) if path else None
        if ck is not None:
            with _lock:
                _stats["disk_hits"] += 1
        else:
            ck = compile_source(source, arch, options)
            if path:
                write_entry(path, ck)
                ck = replace(ck, path=path)
        with _lock:
            _compiled[ident] = ck
        return ck


# ---------------------------------------------------------------- devices
_arch_cache: dict = {}


def arch_for_device(device: int) -> str:
    """NVRTC target for a device: its own sm_XX, or PTX of the newest NVRTC knows."""
    arch = _arch_cache.get(device)
    if arch is None:
        import cupy

        cc = int(cupy.cuda.Device(device).compute_capability)
        supported = [a for a in _nvrtc().getSupportedArchs() if a <= cc]
        if not supported:
            raise RuntimeError(f"NVRTC {nvrtc_version()} cannot target compute capability {cc}")
        best = max(supported)
        arch = f"sm_{cc}" if best == cc else f"compute_{best}"
        _arch_cache[device] = arch
    return arch


def load_kernel(key: KernelKey, device: int, options: tuple = ()) -> LoadedKernel:
    """The kernel ``key`` loaded on ``device`` (compiled first if needed)."""
    ident = (device, key, tuple(options), sources_digest())
    with _lock:
        lk = _loaded.get(ident)
        if lk is not None:
            _stats["hits"] += 1
            return lk
    import cupy
    from cupy.cuda import function as cupy_function

    ck = compile_key(key, arch_for_device(device), options)  # counts the hit or miss
    with cupy.cuda.Device(device):
        module = cupy_function.Module()
        module.load(ck.binary)
        function = module.get_function(key.entry)
    lk = LoadedKernel(ck, device, module, function)
    with _lock:
        return _loaded.setdefault(ident, lk)
