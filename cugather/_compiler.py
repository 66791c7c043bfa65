"""Compilation: rendered source -> NVRTC binary -> loaded kernel handle.

NVRTC runs without a GPU (``cupy_backends.cuda.libs.nvrtc``), so compiling and
inspecting kernels works on any machine with the NVRTC library.  Binaries are
cached in process (per key, arch, options and sources digest) and on disk
under ``$CUPY_CACHE_DIR/cugather`` (CuPy's cache directory, default
``~/.cupy/kernel_cache``).  A disk entry's name hashes the rendered source
(which inlines every header and records their digest), the target, the options
and the NVRTC version, so an edited header never finds an old binary; the file
carries a SHA-256 of its contents and the source it was built from, so a
damaged or mismatched entry is reported with a :class:`CacheWarning` and
recompiled.  Loading onto a device goes through CuPy's module API and is
cached per (device, key).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from typing import Optional

from ._codegen import KIND_SPECS, Source, render, sources_digest
from ._keys import KernelKey
from ._version import __version__

__all__ = [
    "CompiledKernel", "LoadedKernel", "CompileError", "CacheWarning", "CacheEntryError",
    "compile_source", "compile_key", "load_kernel", "cache_dir", "stats", "clear",
    "BASE_OPTIONS", "disk_entries", "entry_path", "read_entry", "loaded_kernels",
    "compiled_kernels", "nvrtc_options", "nvrtc_version", "elf_extent",
]

BASE_OPTIONS = ("--std=c++17",)
#: First line of every disk entry; part of the entry name's hash too, so a
#: format change gives new names instead of unreadable old files.
_FORMAT = b"CUGATHER-KERNEL-2\n"
_DIGEST_LEN = 64  # hex SHA-256
ENTRY_SUFFIX = ".cgk"


class CompileError(RuntimeError):
    """NVRTC rejected a rendered source; carries the key, log and source."""

    def __init__(self, key: KernelKey, arch: str, log: str, source: str):
        super().__init__(f"NVRTC failed to compile {key.entry} for {arch}:\n{log}\n"
                         f"--- source ---\n{source}")
        self.key, self.arch, self.log, self.source = key, arch, log, source


class CacheWarning(UserWarning):
    """A cached kernel binary was unusable (damaged, truncated, mismatched) and is rebuilt."""


class CacheEntryError(ValueError):
    """A disk entry cannot be used; the message says why."""


@dataclass(frozen=True)
class CompiledKernel:
    """An NVRTC result: the binary, its PTX and what ptxas reported."""

    source: Source
    arch: str
    options: tuple       # options given on top of nvrtc_options(arch)
    binary: bytes        # cubin for sm_XX, PTX text (bytes) for compute_XX
    binary_kind: str     # "cubin" or "ptx"
    log: str
    compile_seconds: float
    registers: Optional[int] = None
    spill_stores: Optional[int] = None
    spill_loads: Optional[int] = None
    stack_frame: Optional[int] = None
    from_disk: bool = False
    ptx: Optional[bytes] = field(default=None, repr=False)
    path: Optional[str] = None  # disk entry it was read from or written to

    @property
    def key(self) -> KernelKey:
        return self.source.key

    @property
    def nvrtc_options(self) -> list:
        """The complete NVRTC command line this binary was built with."""
        return nvrtc_options(self.arch, self.options)


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
def _nvrtc():
    from cupy_backends.cuda.libs import nvrtc

    return nvrtc


def nvrtc_version() -> tuple:
    return tuple(_nvrtc().getVersion())


def nvrtc_options(arch: str, options: tuple = ()) -> list:
    """NVRTC options for ``arch``: the base ones, the target, ``options``, ptxas -v."""
    opts = list(BASE_OPTIONS) + [f"--gpu-architecture={arch}"] + list(options)
    if arch.startswith("sm_"):
        opts.append("--ptxas-options=-v")
    return opts


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
    return CompiledKernel(source, arch, tuple(options), binary, "cubin" if real else "ptx",
                          log, seconds, **report, ptx=ptx)


def _as_bytes(value) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def elf_extent(image: bytes) -> Optional[int]:
    """Bytes an ELF64 image spans up to the end of its header tables; None if not ELF64."""
    if len(image) < 64 or image[:4] != b"\x7fELF" or image[4] != 2:
        return None
    phoff, shoff = struct.unpack_from("<QQ", image, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", image, 54)
    return max(phoff + phentsize * phnum, shoff + shentsize * shnum)


def _whole_cubin(image: bytes) -> bytes:
    # CuPy's getCUBIN drops the last byte as if the cubin were a C string.
    # The driver reads past the end into Python's terminating NUL and loads
    # it, but cuobjdump and nvdisasm reject the short file.  The image ends
    # with the program header table, whose last byte (the top of p_align) is 0.
    if elf_extent(image) == len(image) + 1:
        image += b"\0"
    return image


# ---------------------------------------------------------------- disk cache
def cache_dir() -> str:
    """cugather's folder inside CuPy's kernel cache directory (follows ``CUPY_CACHE_DIR``)."""
    root = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    return os.path.join(root, "cugather")


def entry_path(source: Source, arch: str, options: tuple = ()) -> str:
    """Disk entry for ``source`` built for ``arch`` with ``options``."""
    h = hashlib.sha256(_FORMAT)
    for part in (source.text, arch, "\0".join(BASE_OPTIONS + tuple(options)),
                 repr(nvrtc_version())):
        h.update(part.encode() + b"\0")
    return os.path.join(cache_dir(), f"{source.entry}.{arch}.{h.hexdigest()[:24]}{ENTRY_SUFFIX}")



def disk_entries() -> list:
    """Paths of cugather's kernel files in the cache directory."""
    folder = cache_dir()
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names if n.endswith(ENTRY_SUFFIX))


_META_FIELDS = ("binary_kind", "log", "compile_seconds", "registers", "spill_stores",
                "spill_loads", "stack_frame")
_unwritable: set = set()  # folders already warned about


def _write_entry(path: str, ck: CompiledKernel) -> None:
    text = ck.source.text.encode()
    ptx = b"" if ck.binary_kind == "ptx" else ck.ptx or b""  # PTX binaries are their own PTX
    meta = {name: getattr(ck, name) for name in _META_FIELDS}
    meta.update(key=asdict(ck.key), arch=ck.arch, options=list(ck.options),
                cugather=__version__, nvrtc=list(nvrtc_version()),
                sources_digest=ck.source.digest, created=time.time(),
                sizes=[len(ck.binary), len(ptx), len(text)])
    payload = json.dumps(meta).encode() + b"\0" + ck.binary + ptx + text
    data = _FORMAT + hashlib.sha256(payload).hexdigest().encode() + payload
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".cgk-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # atomic: readers see the old file or the whole new one
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        if folder not in _unwritable:
            _unwritable.add(folder)
            warnings.warn(f"cugather: cannot write kernel cache in {folder} ({e}); kernels "
                          f"will be recompiled in every process", CacheWarning, stacklevel=4)


def read_entry(path: str) -> tuple:
    """``(meta, CompiledKernel)`` stored in the disk entry ``path``.

    Raises
    ------
    FileNotFoundError
        No such entry.
    CacheEntryError
        The file is unreadable, truncated, damaged or of an unknown format.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise
    except OSError as e:  # a folder, no permission, an I/O error
        raise CacheEntryError(f"cannot read it ({e})") from None
    head = len(_FORMAT) + _DIGEST_LEN
    if not data.startswith(_FORMAT):
        raise CacheEntryError("it is truncated or not a cugather kernel file"
                              if len(data) < len(_FORMAT) else "unknown format")
    payload = data[head:]
    if data[len(_FORMAT):head] != hashlib.sha256(payload).hexdigest().encode():
        raise CacheEntryError(f"its checksum does not match its contents "
                              f"({len(data)} bytes: damaged or truncated)")
    meta_bytes, _, blobs = payload.partition(b"\0")
    try:
        meta = json.loads(meta_bytes)
        n_bin, n_ptx, n_src = meta["sizes"]
        if n_bin + n_ptx + n_src != len(blobs):
            raise ValueError("section sizes do not add up")
        key = KernelKey(**meta["key"])
        source = Source(key, key.entry, KIND_SPECS[key.kind].args_type,
                        KIND_SPECS[key.kind].template,
                        blobs[n_bin + n_ptx:].decode(), meta["sources_digest"])
        ck = CompiledKernel(source, meta["arch"], tuple(meta["options"]), blobs[:n_bin],
                            from_disk=True, path=path,
                            ptx=blobs[n_bin:n_bin + n_ptx] or (
                                blobs[:n_bin] if meta["binary_kind"] == "ptx" else None),
                            **{name: meta[name] for name in _META_FIELDS})
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        raise CacheEntryError(f"its metadata is not understood ({type(e).__name__}: {e})") from None
    return meta, ck


def _load_entry(path: str, source: Source, arch: str, options: tuple) -> Optional[CompiledKernel]:
    try:
        _, ck = read_entry(path)
    except FileNotFoundError:
        return None
    except CacheEntryError as e:
        warnings.warn(f"cugather: cached kernel {path} is unusable: {e}; recompiling",
                      CacheWarning, stacklevel=4)
        return None
    if ck.source.text != source.text or ck.arch != arch or ck.options != tuple(options):
        warnings.warn(f"cugather: cached kernel {path} was built from another source or "
                      f"target than its name says; recompiling", CacheWarning, stacklevel=4)
        return None
    return replace(ck, source=source)


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
        ck = _load_entry(path, source, arch, options) if path else None
        if ck is not None:
            with _lock:
                _stats["disk_hits"] += 1
        else:
            ck = compile_source(source, arch, options)
            if path:
                _write_entry(path, ck)
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
