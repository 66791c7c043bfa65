"""Compilation: rendered source -> NVRTC binary -> loaded kernel handle.

NVRTC runs without a GPU (``cupy_backends.cuda.libs.nvrtc``), so compiling and
inspecting kernels works on any machine with the NVRTC library.  Binaries are
cached in process (per key, arch and options) and on disk under
``$CUPY_CACHE_DIR/cugather`` (CuPy's cache directory, default
``~/.cupy/kernel_cache``), in files that carry a SHA-1 of their contents: a
damaged entry is reported with a warning and recompiled.  Loading onto a
device goes through CuPy's module API and is cached per (device, key).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Optional

from ._codegen import Source, render
from ._keys import KernelKey

__all__ = [
    "CompiledKernel", "LoadedKernel", "CompileError", "CacheWarning", "compile_source",
    "compile_key", "load_kernel", "cache_dir", "stats", "clear", "BASE_OPTIONS",
    "disk_entries", "loaded_kernels",
]

BASE_OPTIONS = ("--std=c++17",)
_MAGIC = b"CUGATHER-KERNEL-1\n"


class CompileError(RuntimeError):
    """NVRTC rejected a rendered source; carries the key, log and source."""

    def __init__(self, key: KernelKey, arch: str, log: str, source: str):
        super().__init__(f"NVRTC failed to compile {key.entry} for {arch}:\n{log}\n"
                         f"--- source ---\n{source}")
        self.key, self.arch, self.log, self.source = key, arch, log, source


class CacheWarning(UserWarning):
    """A cached kernel binary was unreadable and is being recompiled."""


@dataclass(frozen=True)
class CompiledKernel:
    """An NVRTC result: the binary and what ptxas reported."""

    source: Source
    arch: str
    options: tuple
    binary: bytes        # cubin for sm_XX, PTX text (bytes) for compute_XX
    binary_kind: str     # "cubin" or "ptx"
    log: str
    compile_seconds: float
    registers: Optional[int] = None
    spill_stores: Optional[int] = None
    spill_loads: Optional[int] = None
    stack_frame: Optional[int] = None
    from_disk: bool = False

    @property
    def key(self) -> KernelKey:
        return self.source.key


@dataclass
class LoadedKernel:
    """A compiled kernel loaded on one device."""

    compiled: CompiledKernel
    device: int
    module: object = field(repr=False)
    function: object = field(repr=False)

    @property
    def ptr(self) -> int:
        return self.function.ptr


# ---------------------------------------------------------------- state
_lock = threading.Lock()
_compiled: dict = {}       # (key, arch, options) -> CompiledKernel
_loaded: dict = {}         # (device, key) -> LoadedKernel
_key_locks: dict = {}      # per (key, arch, options): one compile at a time
_stats = {"hits": 0, "misses": 0, "compiles": 0, "disk_hits": 0, "compile_seconds": 0.0}


def stats() -> dict:
    """Copy of the in-process counters."""
    with _lock:
        return dict(_stats)


def clear() -> None:
    """Forget every in-process binary and loaded kernel (counters too)."""
    with _lock:
        _compiled.clear()
        _loaded.clear()
        _key_locks.clear()
        _stats.update(hits=0, misses=0, compiles=0, disk_hits=0, compile_seconds=0.0)


def loaded_kernels() -> list:
    """LoadedKernel objects of this process."""
    with _lock:
        return list(_loaded.values())


def compiled_kernels() -> list:
    """CompiledKernel objects of this process."""
    with _lock:
        return list(_compiled.values())


# ---------------------------------------------------------------- NVRTC
def _nvrtc():
    from cupy_backends.cuda.libs import nvrtc

    return nvrtc


def nvrtc_version() -> tuple:
    return tuple(_nvrtc().getVersion())


_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "stack_frame": re.compile(r"(\d+) bytes stack frame"),
}


def parse_ptxas(log: str) -> dict:
    """Registers, spills and stack frame from a ``--ptxas-options=-v`` log."""
    found = {}
    for name, pattern in _PTXAS.items():
        m = pattern.search(log)
        found[name] = int(m.group(1)) if m else None
    return found


def compile_source(source: Source, arch: str = "sm_90", options: tuple = ()) -> CompiledKernel:
    """Run NVRTC on ``source`` for ``arch`` (``sm_XX`` -> cubin, ``compute_XX`` -> PTX)."""
    nvrtc = _nvrtc()
    real = arch.startswith("sm_")
    opts = list(BASE_OPTIONS) + [f"--gpu-architecture={arch}"] + list(options)
    if real:
        opts.append("--ptxas-options=-v")
    start = time.perf_counter()
    prog = nvrtc.createProgram(source.text, source.entry + ".cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError:
            raise CompileError(source.key, arch, nvrtc.getProgramLog(prog), source.text) from None
        log = nvrtc.getProgramLog(prog)
        binary = nvrtc.getCUBIN(prog) if real else nvrtc.getPTX(prog).encode()
    finally:
        nvrtc.destroyProgram(prog)
    seconds = time.perf_counter() - start
    with _lock:
        _stats["compiles"] += 1
        _stats["compile_seconds"] += seconds
    return CompiledKernel(source, arch, tuple(options), binary, "cubin" if real else "ptx",
                          log.strip(), seconds, **parse_ptxas(log))


# ---------------------------------------------------------------- disk cache
def cache_dir() -> str:
    """cugather's folder inside CuPy's kernel cache directory."""
    root = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    return os.path.join(root, "cugather")


def _entry_path(source: Source, arch: str, options: tuple) -> str:
    h = hashlib.sha256()
    for part in (source.text, arch, "\0".join(BASE_OPTIONS + tuple(options)),
                 repr(nvrtc_version())):
        h.update(part.encode() + b"\0")
    return os.path.join(cache_dir(), f"{source.entry}.{arch}.{h.hexdigest()[:24]}.cgk")


def disk_entries() -> list:
    """Paths of cugather's kernel files in the cache directory."""
    folder = cache_dir()
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".cgk"))


def _write_entry(path: str, ck: CompiledKernel) -> None:
    meta = {k: getattr(ck, k) for k in ("binary_kind", "log", "compile_seconds", "registers",
                                        "spill_stores", "spill_loads", "stack_frame")}
    payload = json.dumps(meta).encode() + b"\0" + ck.binary
    data = _MAGIC + hashlib.sha1(payload).hexdigest().encode() + payload
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _read_entry(path: str, source: Source, arch: str, options: tuple) -> Optional[CompiledKernel]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        warnings.warn(f"cugather: cannot read cached kernel {path} ({e}); recompiling",
                      CacheWarning, stacklevel=4)
        return None
    head = len(_MAGIC) + 40
    payload = data[head:]
    ok = data.startswith(_MAGIC) and data[len(_MAGIC):head] == hashlib.sha1(payload).hexdigest().encode()
    if ok:
        meta_bytes, sep, binary = payload.partition(b"\0")
        try:
            meta = json.loads(meta_bytes) if sep else None
        except ValueError:
            meta = None
        if meta is not None and binary:
            return CompiledKernel(source, arch, tuple(options), binary, from_disk=True, **meta)
    warnings.warn(f"cugather: cached kernel {path} is damaged or truncated; recompiling",
                  CacheWarning, stacklevel=4)
    return None


def compile_key(key: KernelKey, arch: str = "sm_90", options: tuple = (),
                use_disk: bool = True) -> CompiledKernel:
    """Compiled binary of ``key``: from memory, from disk, or from NVRTC.

    Concurrent callers asking for the same kernel wait for one compilation.
    """
    options = tuple(options)
    ident = (key, arch, options)
    with _lock:
        ck = _compiled.get(ident)
        if ck is not None:
            return ck
        key_lock = _key_locks.setdefault(ident, threading.Lock())
    with key_lock:
        with _lock:
            ck = _compiled.get(ident)
        if ck is not None:
            return ck
        source = render(key)
        path = _entry_path(source, arch, options) if use_disk else None
        ck = _read_entry(path, source, arch, options) if path else None
        if ck is not None:
            with _lock:
                _stats["disk_hits"] += 1
        else:
            ck = compile_source(source, arch, options)
            if path:
                _write_entry(path, ck)
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
    ident = (device, key, tuple(options))
    with _lock:
        lk = _loaded.get(ident)
        if lk is not None:
            _stats["hits"] += 1
            return lk
        _stats["misses"] += 1
    import cupy
    from cupy.cuda import function as cupy_function

    ck = compile_key(key, arch_for_device(device), options)
    with cupy.cuda.Device(device):
        module = cupy_function.Module()
        module.load(ck.binary)
        function = module.get_function(key.entry)
    lk = LoadedKernel(ck, device, module, function)
    with _lock:
        return _loaded.setdefault(ident, lk)
